"""Compatibility patches to run-scoped copies: RFC 6902 operations, what each changed, and the guard
that keeps them off the candidate's performance settings.

The procedure allows "Kubernetes-only compatibility patches ... when required and recorded" and
forbids changing "engine arguments, GPU counts, replica topology, routing, or other performance
settings" (docs/procedure.md, "Compatibility patches"). The guard does not list JSON paths (a
v1alpha1 ``extraPodSpec`` and a v1beta1 ``podTemplate`` spell the same field differently, and a
whole-component ``replace`` touches every field at once): it compares what the operator will run,
read by :mod:`deploy_suite.model.dgd`, before and after each operation, so any spelling that moves
a performance setting is refused.

The operations themselves are applied by ``jsonpatch`` (RFC 6902, a well-kept library), never by
our own pointer code.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import jsonpointer

from deploy_suite.constants import DGD_KIND
from deploy_suite.errors import InputError
from deploy_suite.model.dgd import Dgd, from_documents
from deploy_suite.model.references import image_tag
from deploy_suite.yamlio import load_yaml_documents

# How a patch was made: found by the harness from the cluster's own objects, or handed over by the caller.
AUTOMATIC, HANDED_OVER = "automatic", "handed-over"
PATCH_FIX = ("write the patch file as {reason: TEXT, file: deploy.yaml, operations: [{op: replace, path: "
             "/spec/..., value: ...}]} (RFC 6902 operations against the run-scoped copy)")
_OPS = {"add", "remove", "replace", "move", "copy", "test"}


@dataclass(frozen=True)
class Change:
    """One operation as applied: where, what was there, what is there now."""

    op: str
    pointer: str
    before: Any
    after: Any

    def as_dict(self) -> dict[str, Any]:
        return {"op": self.op, "pointer": self.pointer, "before": self.before, "after": self.after}


@dataclass(frozen=True)
class Proposal:
    """A patch the harness or the caller wants in one run-scoped copy, with the reason and evidence."""

    file_type: str  # deploy, model-cache, model-download, model-validate
    operations: tuple[Mapping[str, Any], ...]
    reason: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    source: str = AUTOMATIC
    document: str | None = None  # "Kind/name" of the document the pointers address (default: see target_index)
    patch_file: str | None = None  # where a handed-over patch came from
    patch_sha256: str | None = None


def append_ops(doc: Any, parent: str, field_name: str, items: Sequence[Any]) -> tuple[dict[str, Any], ...]:
    """Operations that append ``items`` to the list ``field_name`` under ``parent``, creating the
    list (or ``parent`` itself) when the document does not have it yet."""
    ops: list[dict[str, Any]] = []
    parts = parent.split("/")
    for end in range(2, len(parts) + 1):  # each missing ancestor, from the first one missing
        prefix = "/".join(parts[:end])
        if value_at(doc, prefix) is None:
            ops.append({"op": "add", "path": prefix, "value": {}})
    if value_at(doc, f"{parent}/{field_name}") is None:
        ops.append({"op": "add", "path": f"{parent}/{field_name}", "value": []})
    ops.extend({"op": "add", "path": f"{parent}/{field_name}/-", "value": item} for item in items)
    return tuple(ops)


def pod_spec_pointers(doc: Any) -> dict[str, str]:
    """Each component's pod spec in a DGD document, as a JSON pointer: v1alpha1
    ``/spec/services/<name>/extraPodSpec``, v1beta1 ``/spec/components/<i>/podTemplate/spec``."""
    spec = (doc.get("spec") if isinstance(doc, dict) else None) or {}
    out: dict[str, str] = {}
    if isinstance(spec.get("services"), dict):
        out.update({name: f"/spec/services/{escape(name)}/extraPodSpec" for name in spec["services"]})
    for i, comp in enumerate(spec.get("components") or []):
        if isinstance(comp, dict) and comp.get("name"):
            out[str(comp["name"])] = f"/spec/components/{i}/podTemplate/spec"
    return out


def escape(key: str) -> str:
    """RFC 6901: ``~`` and ``/`` in a key."""
    return key.replace("~", "~0").replace("/", "~1")


class PatchRefused(ValueError):
    """An operation that does not apply, or touches a performance setting; the message names it."""


def target_index(docs: Sequence[Any], document: str | None, file_type: str) -> int:
    """Which document of a file the pointers address: ``Kind/name`` when given, else the DGD of
    ``deploy.yaml``, else a file's only document."""
    if document:
        kind, _, name = document.partition("/")
        for i, doc in enumerate(docs):
            meta = doc.get("metadata") or {} if isinstance(doc, dict) else {}
            if isinstance(doc, dict) and doc.get("kind") == kind and meta.get("name") == name:
                return i
        raise PatchRefused(f"no document {document} in {file_type}.yaml")
    if file_type == "deploy":
        for i, doc in enumerate(docs):
            if isinstance(doc, dict) and doc.get("kind") == DGD_KIND:
                return i
    if len(docs) == 1:
        return 0
    raise PatchRefused(f"{file_type}.yaml holds {len(docs)} documents: name one with document: Kind/name")


def value_at(doc: Any, pointer: str) -> Any:
    """A copy of what ``pointer`` addresses in ``doc``; None when nothing is there (nor past a list's end)."""
    try:
        found = jsonpointer.resolve_pointer(doc, pointer)
    except jsonpointer.JsonPointerException:
        return None
    return None if isinstance(found, jsonpointer.EndOfList) else copy.deepcopy(found)


def _change(op: str, pointer: str, before: Any, doc: Any) -> Change:
    """The change one operation made; an append (``.../-``) is recorded at the index it took."""
    if pointer.endswith("/-"):
        parent = pointer[:-2]
        items = value_at(doc, parent) or []
        pointer = f"{parent}/{len(items) - 1}"
    return Change(op, pointer, before, value_at(doc, pointer))


def apply(docs: list[Any], proposal: Proposal) -> tuple[list[Any], list[Change]]:
    """The documents with ``proposal`` applied (new objects; ``docs`` untouched), and each change.

    Refused, naming the operation, when it does not apply (RFC 6902: a failed ``test`` or a missing
    path) or when it moves a performance setting (:func:`performance_view`)."""
    out = copy.deepcopy(docs)
    index = target_index(out, proposal.document, proposal.file_type)
    changes: list[Change] = []
    for n, op in enumerate(proposal.operations, 1):
        where = f"{proposal.file_type}.yaml operation {n} ({op.get('op')} {op.get('path')})"
        before_view = performance_view(out, proposal.file_type)
        before = value_at(out[index], str(op.get("path", "")))
        try:
            out[index] = jsonpatch.apply_patch(out[index], [dict(op)])
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError, KeyError) as exc:
            raise PatchRefused(f"{where} does not apply: {exc}") from exc
        moved = _difference(before_view, performance_view(out, proposal.file_type))
        if moved:
            raise PatchRefused(f"{where} changes a performance setting ({moved}); the procedure allows "
                               "Kubernetes-only compatibility patches")
        if op.get("op") != "test":
            changes.append(_change(str(op["op"]), str(op["path"]), before, out[index]))
    return out, changes


# --------------------------------------------------------------------------------- the guard


def performance_view(docs: Sequence[Any], file_type: str) -> dict[str, Any]:
    """What the procedure calls performance settings, as the pods will run them: per component its
    type, replicas, nodes per replica, GPUs, image tag, command, arguments and environment (the
    engine, routing and the model are spoken there), the frontend sidecar's too, and the graph's
    environment and backend; for a support Job each container's command, arguments and environment
    (the model it downloads or validates). Registries, scheduling, storage and metadata are not in
    it: those are the Kubernetes-only compatibility fixes the procedure allows."""
    if file_type == "deploy":
        try:
            dgd = from_documents(docs, "deploy.yaml")
        except InputError as exc:
            return {"unreadable": exc.problem}
        return _dgd_view(dgd)
    view: dict[str, Any] = {}
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        name = f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
        template = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
        for c in [*(template.get("initContainers") or []), *(template.get("containers") or [])]:
            if isinstance(c, dict):
                view[f"{name} container {c.get('name')}"] = {k: c.get(k) for k in ("command", "args", "env")}
    return view


def _dgd_view(dgd: Dgd) -> dict[str, Any]:
    view: dict[str, Any] = {"backendFramework": dgd.backend_framework,
                            "env": sorted((e.name, e.value) for e in dgd.env)}
    for c in dgd.components:
        view[f"component {c.name}"] = {
            "type": c.type, "replicas": c.replicas, "nodes per replica": c.node_count,
            "GPUs per pod": c.gpus_per_pod, "GPU resource": c.gpu_resource,
            "image tag": _release(c.image),
            "command and arguments": list(c.tokens), "environment": sorted((e.name, e.value) for e in c.env),
            "environment from": sorted((e.kind, e.name, e.prefix) for e in c.env_from),
            "frontend sidecar": None if c.frontend_sidecar is None else {
                "image tag": _release(c.frontend_sidecar.image),
                "command and arguments": list(c.frontend_sidecar.tokens),
                "environment": sorted((e.name, e.value) for e in c.frontend_sidecar.env)},
        }
    return view


def _release(image: str | None) -> str | None:
    """An image's tag and digest: the release it runs. A registry or repository move (a mirror) is
    a compatibility fix; another tag or digest is another candidate."""
    if not image:
        return None
    return image_tag(image) + (f"@{image.split('@', 1)[1]}" if "@" in image else "")


def _difference(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    for key in sorted(set(before) | set(after)):
        if key not in before or key not in after:
            return f"{key} {'added' if key not in before else 'removed'}"
        if before[key] != after[key]:
            if isinstance(before[key], Mapping) and isinstance(after[key], Mapping):
                inner = [k for k in before[key] if before[key].get(k) != after[key].get(k)]
                return f"{key}: {', '.join(inner)}"
            return key
    return ""


# --------------------------------------------------------------------------------- handed over


def read_handed(path: Path, input_name: str, types: Mapping[str, str]) -> Proposal:
    """A caller's patch file: ``reason``, ``file`` (a run-scoped file name or type), ``operations``
    (RFC 6902) and optionally ``document: Kind/name``. ``types`` maps stable file names to types."""
    raw = path.read_bytes()
    docs = load_yaml_documents(path, input_name, PATCH_FIX)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise InputError(input_name, "must be one YAML mapping", PATCH_FIX)
    doc: Mapping[str, Any] = docs[0]
    unknown = sorted(set(doc) - {"reason", "file", "operations", "document"})
    if unknown:
        raise InputError(input_name, f"has unknown key(s) {', '.join(map(str, unknown))}", PATCH_FIX)
    reason = doc.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise InputError(input_name, "has no reason (why the cluster needs this change)", PATCH_FIX)
    by_name = {**{t: t for t in types.values()}, **types}
    file_type = by_name.get(str(doc.get("file", "deploy.yaml")))
    if file_type is None:
        raise InputError(input_name, f"names file {doc.get('file')!r}, which is no run-scoped copy",
                         f"name one of {', '.join(types)}")
    operations = doc.get("operations")
    if not isinstance(operations, list) or not operations:
        raise InputError(input_name, "has no operations", PATCH_FIX)
    for n, op in enumerate(operations, 1):
        if not isinstance(op, dict) or op.get("op") not in _OPS or not isinstance(op.get("path"), str):
            raise InputError(input_name, f"operation {n} is not an RFC 6902 operation "
                             f"(op one of {', '.join(sorted(_OPS))} and a string path)", PATCH_FIX)
    document = doc.get("document")
    return Proposal(file_type, tuple(operations), reason.strip(), source=HANDED_OVER,
                    document=str(document) if document else None, patch_sha256=hashlib.sha256(raw).hexdigest())
