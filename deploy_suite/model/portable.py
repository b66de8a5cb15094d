"""What a handed-off manifest carries that belongs to the cluster it came from, and the edit that drops it.

A DGD exported from a live cluster (``kubectl get -o yaml``) carries what the API server and the
operator wrote there: ``metadata.uid``, ``resourceVersion``, ``generation``, ``creationTimestamp``,
``managedFields``, a ``status``, and the operator's own annotations. Newer operators refuse a DGD
whose user sets an operator-owned annotation (``nvidia.com/workload-provider`` is immutable once
persisted), and a ``resourceVersion`` or ``uid`` makes the apply a conflict or a stale update. A
recipe may also hard-code a ``metadata.namespace`` other than the contract's. None of this is a
performance setting: step 1 drops or retargets it in the run-scoped copy only, one recorded
patch per field (file, document, JSON pointer, before, after, reason with its evidence), recorded like
step 2's compatibility patches (docs/procedure.md, "Exported manifests"). Pure: parsed documents in,
edits out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deploy_suite.constants import DGD_KIND
from deploy_suite.model.patches import AUTOMATIC

# Annotations the Dynamo operator writes on a DGD and owns, each with where ai-dynamo/dynamo says so
# (deploy/operator/internal/consts/consts.go).
OPERATOR_ANNOTATIONS: Mapping[str, str] = {
    "nvidia.com/workload-provider": "KubeAnnotationWorkloadProvider: the controller-owned, immutable workload "
                                    "provider, persisted by the operator",
    "nvidia.com/current-worker-hash": "AnnotationCurrentWorkerHash: a controller-owned rolling-update annotation",
    "nvidia.com/current-worker-hash-v2": "AnnotationCurrentWorkerHashV2: a controller-owned rolling-update "
                                         "annotation",
    "nvidia.com/dynamo-operator-origin-version": "KubeAnnotationDynamoOperatorOriginVersion: stamped at creation "
                                                "by the operator's mutating webhook",
}
# Metadata the API server sets on every object it stores (Kubernetes ObjectMeta: read-only or
# system-populated); a new object carries none of it.
SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                   "deletionGracePeriodSeconds", "managedFields", "selfLink")


@dataclass(frozen=True)
class CopyPatch:
    """One change to a document of a run-scoped copy (an RFC 6902 ``remove`` or ``replace``)."""

    document: str  # "Kind/name" of the document the pointer addresses
    index: int  # 0-based index among the file's documents
    op: str  # remove | replace
    pointer: str  # RFC 6901 JSON pointer inside that document
    before: Any
    after: Any  # None when removed
    change: str  # one line for a person
    reason: str  # why, naming the evidence

    def record(self) -> dict[str, Any]:
        """The ledger's ``patches`` entry fields (``deploy_suite.procedure.compat_patches.Patch``'s shape)."""
        return {"change": self.change, "reason": self.reason, "document": self.document,
                "changes": [{"op": self.op, "pointer": self.pointer, "before": self.before, "after": self.after}],
                "evidence": {"document_index": self.index, "found": {self.pointer: self.before}},
                "source": AUTOMATIC}


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _label(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), Mapping) else {}
    return f"{doc.get('kind')}/{(meta or {}).get('name', '?')}"


def _summary(value: Any) -> Any:
    """What the ledger keeps of a removed value: scalars as they were, large ones by their size."""
    if isinstance(value, list):
        return f"<{len(value)} entries>"
    if isinstance(value, dict):
        return f"<{len(value)} keys>"
    return value


def portable_copy(documents: Sequence[Any], namespace: str) -> list[CopyPatch]:
    """Edit ``documents`` in place for the workload's ``namespace`` and return one patch per change:
    server-set metadata and ``status`` removed from every object, the operator's annotations from
    every DGD, and a ``metadata.namespace`` other than ``namespace`` set to it."""
    patches: list[CopyPatch] = []
    for index, doc in enumerate(documents):
        if not isinstance(doc, dict):
            continue
        label = _label(doc)
        meta = doc.get("metadata")
        if isinstance(meta, dict):
            patches.extend(_metadata(index, label, doc, meta, namespace))
        if "status" in doc:
            before = doc.pop("status")
            patches.append(CopyPatch(label, index, "remove", "/status", _summary(before), None,
                                     f"{label}: status removed",
                                     "status is written by the cluster the object was exported from; a new object "
                                     "carries none (the API server ignores it on create)"))
    return patches


def _metadata(index: int, label: str, doc: Mapping[str, Any], meta: dict[str, Any],
              namespace: str) -> list[CopyPatch]:
    patches = []
    for key in SERVER_METADATA:
        if key in meta:
            before = meta.pop(key)
            patches.append(CopyPatch(label, index, "remove", f"/metadata/{key}", _summary(before), None,
                                     f"{label}: metadata.{key} removed",
                                     f"metadata.{key} is set by the API server of the cluster the object was exported "
                                     "from; applied here it would make the apply a conflict or a stale update"))
    annotations = meta.get("annotations")
    if doc.get("kind") == DGD_KIND and isinstance(annotations, dict):
        for key, source in OPERATOR_ANNOTATIONS.items():
            if key in annotations:
                before = annotations.pop(key)
                patches.append(CopyPatch(label, index, "remove", f"/metadata/annotations/{_escape(key)}", before,
                                         None,
                                         f"{label}: annotation {key} removed",
                                         f"{key} is the Dynamo operator's own ({source}, ai-dynamo/dynamo "
                                         "deploy/operator/internal/consts/consts.go); newer operators refuse it "
                                         "set by a user"))
        if not annotations and patches and patches[-1].pointer.startswith("/metadata/annotations/"):
            meta.pop("annotations")  # emptied here: no key left to apply
    current = meta.get("namespace")
    if current is not None and current != namespace:
        meta["namespace"] = namespace
        patches.append(CopyPatch(label, index, "replace", "/metadata/namespace", current, namespace,
                                 f"{label}: metadata.namespace {current!r} -> {namespace!r}",
                                 f"the manifest names namespace {current!r}; user_workload.yaml's kubernetes.namespace "
                                 f"is {namespace!r}, where every object of the run is created"))
    return patches
