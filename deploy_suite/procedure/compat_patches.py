"""Step 2's compatibility patches: what the cluster's own objects justify (``deploy_suite.judges.compat``)
and what the caller hands over (``--compat-patch``), applied only to the run-scoped copies and recorded
in the ledger with the file, each JSON pointer's before and after, the reason and its evidence
(docs/procedure.md, "Compatibility patches")."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy_suite import clock
from deploy_suite.access.kube import Kube, Obj
from deploy_suite.constants import DGD_KIND
from deploy_suite.errors import Forbidden, InputError
from deploy_suite.judges import compat, sku
from deploy_suite.model import patches
from deploy_suite.model.dgd import Dgd
from deploy_suite.model.files import display
from deploy_suite.procedure.workspace import STABLE_NAMES
from deploy_suite.record.ledger import atomic_write_text
from deploy_suite.vocab import BlockerClass
from deploy_suite.yamlio import dump_all, load_all

# Storage classes that are clearly a recipe's placeholder. "" is none: it asks for a pre-provisioned
# volume (Patcher._pre_provisioned).
_PLACEHOLDER_CLASS = re.compile(r"(\$\{?[A-Za-z_]+\}?|<[^>]*>|your-storage-class|storage-class-name|changeme)",
                                re.IGNORECASE)


@dataclass
class Finding:
    category: BlockerClass
    message: str
    fix: str = ""

    def as_dict(self, step: str) -> dict[str, str]:
        return {"step": step, "class": self.category, "message": self.message, "fix": self.fix}


@dataclass
class Patch:
    """A compatibility patch as the ledger records it: the file, each change (JSON pointer, before,
    after), the reason with its evidence, and whose it is (the harness's or the caller's)."""

    file: str
    change: str
    reason: str
    at: str = field(default_factory=clock.iso_now)
    changes: list[dict[str, Any]] = field(default_factory=list)
    evidence: Mapping[str, Any] = field(default_factory=dict)
    source: str = patches.AUTOMATIC
    handed: Mapping[str, Any] = field(default_factory=dict)  # a handed-over patch: its operations, file, hash

    @classmethod
    def of(cls, file: str, proposal: patches.Proposal, changes: list[patches.Change]) -> Patch:
        said = "; ".join(f"{c.op} {c.pointer}: {c.before!r} -> {c.after!r}" for c in changes)
        handed = {} if proposal.source != patches.HANDED_OVER else {
            "operations": [dict(o) for o in proposal.operations], "document": proposal.document,
            "patch_file": proposal.patch_file or "", "patch_sha256": proposal.patch_sha256 or ""}
        return cls(file, said, proposal.reason, changes=[c.as_dict() for c in changes],
                   evidence=dict(proposal.evidence), source=proposal.source, handed=handed)

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "change": self.change, "reason": self.reason, "at": self.at,
                "changes": self.changes, "evidence": dict(self.evidence), "source": self.source, **self.handed}


@dataclass
class Outcome:
    """What the patcher did and found: patches made, and blockers, warnings, limitations, evidence."""

    patches: list[Patch] = field(default_factory=list)
    blockers: list[Finding] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    limitations: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)

    def block(self, category: BlockerClass, message: str, fix: str) -> None:
        self.blockers.append(Finding(category, message, fix))

    def merge(self, other: Outcome) -> None:
        """Add ``other``'s findings to these (one step's report gathering its helpers')."""
        self.patches += other.patches
        self.blockers += other.blockers
        self.warnings += other.warnings
        self.limitations += other.limitations
        self.evidence.update(other.evidence)


class Patcher:
    """The automatic patches of one step 2, from what it read (None: not readable by this identity)."""

    def __init__(self, kube: Kube, namespace: str, workload: Mapping[str, Any],
                 storage_classes: list[Obj] | None, nodes: list[Obj] | None) -> None:
        self.kube = kube
        self.namespace = namespace
        self.workload = workload
        self.storage_classes = storage_classes
        self.nodes = nodes
        self.out = Outcome()

    def _class_names(self) -> set[str] | None:
        return None if self.storage_classes is None else {sc["metadata"]["name"] for sc in self.storage_classes}

    def _default_class(self) -> str | None:
        for sc in self.storage_classes or []:
            if (sc["metadata"].get("annotations") or {}).get("storageclass.kubernetes.io/is-default-class") == "true":
                return str(sc["metadata"]["name"])
        return None

    def patch(self, dgd: Dgd, docs: dict[str, list[Obj]], paths: Mapping[str, Path], root: Path) -> Outcome:
        """Cluster-only fixes the cluster's own objects justify, applied to ``docs`` and written to the
        run-scoped copies at ``paths``, each recorded with its evidence; never engine args, GPUs,
        replicas, routing: the guard of ``patches.apply`` refuses those."""
        proposals = self._claim_classes(dgd, docs)
        dgd_doc = next((d for d in docs["deploy"] if d.get("kind") == DGD_KIND), None)
        if self.nodes and dgd_doc is not None:
            gpu_types = sku.expected_types(self.workload)
            pointers = patches.pod_spec_pointers(dgd_doc)
            proposals += compat.gpu_pool_tolerations(dgd, dgd_doc, self.nodes, gpu_types, pointers)
            proposals += compat.retarget_gpu_selectors(dgd, dgd_doc, self.nodes, gpu_types, pointers)
        touched: set[str] = set()
        for proposal in proposals:
            try:
                docs[proposal.file_type], changes = patches.apply(docs[proposal.file_type], proposal)
            except patches.PatchRefused as exc:  # a proposal of ours that does not apply: said, never forced
                self.out.warnings.append(f"compatibility patch not applied: {exc}")
                continue
            touched.add(proposal.file_type)
            self.out.patches.append(Patch.of(display(paths[proposal.file_type], root),
                                                proposal, changes))
        for kind in touched:
            atomic_write_text(paths[kind], dump_all(docs[kind]))
        return self.out

    def _claim_classes(self, dgd: Dgd, docs: dict[str, list[Obj]]) -> list[patches.Proposal]:
        """Storage classes of the claims the copies create: a placeholder or a class the cluster lacks,
        and a claim without a class on a cluster with no default class, get the contract's class
        (none given: blocked before any mutation). ``storageClassName: ""`` asks for a pre-provisioned
        volume (Kubernetes: "" disables dynamic provisioning) and is never rewritten."""
        classes = self._class_names()
        wanted = str((self.workload.get("kubernetes") or {}).get("storage_class") or "")
        usable = bool(wanted) and (classes is None or wanted in classes)
        no_default = classes is not None and self._default_class() is None
        out: list[patches.Proposal] = []
        fix = ("set kubernetes.storage_class in user_workload.yaml (or pass --storage-class) to a storage class of "
               "the target cluster")
        for kind, kind_docs in docs.items():
            for doc in kind_docs:
                if doc.get("kind") != "PersistentVolumeClaim":
                    continue
                name = doc["metadata"]["name"]
                current = (doc.get("spec") or {}).get("storageClassName")
                if current == "":
                    self._pre_provisioned(name, doc)
                    continue
                why = self._class_problem(current, classes, no_default)
                if why is None:
                    continue
                if not usable:
                    self.out.block(BlockerClass.STORAGE_CLASS, f"PVC {name} in {kind}.yaml {why}", fix)
                    continue
                out.append(patches.Proposal(
                    kind, ({"op": "add", "path": "/spec/storageClassName", "value": wanted},),
                    f"PVC {name} {why}; kubernetes.storage_class from user_workload.yaml is used",
                    {"storage_classes": sorted(classes) if classes is not None else "unreadable",
                     "default_class": self._default_class()}, document=f"PersistentVolumeClaim/{name}"))
        dgd_doc = next((d for d in docs["deploy"] if d.get("kind") == DGD_KIND), None)
        for i, pvc in enumerate(dgd.pvcs):
            if not (pvc.create and not pvc.storage_class and no_default) or dgd_doc is None:
                continue
            if not usable:
                self.out.block(BlockerClass.STORAGE_CLASS, f"spec.pvcs {pvc.name} is created by the operator "
                                  "without a storage class and the cluster has no default class", fix)
                continue
            out.append(patches.Proposal(
                "deploy", ({"op": "add", "path": f"/spec/pvcs/{i}/storageClass", "value": wanted},),
                f"spec.pvcs {pvc.name} is created by the operator without a storage class and the cluster has no "
                "default class; kubernetes.storage_class from user_workload.yaml is used",
                {"storage_classes": sorted(classes or []), "default_class": None}))
        return out

    def _class_problem(self, current: Any, classes: set[str] | None, no_default: bool) -> str | None:
        """What is wrong with a claim's storage class here (None: nothing)."""
        if current is None:
            return "names no storage class and the cluster has no default class" if no_default else None
        if _PLACEHOLDER_CLASS.search(str(current)):
            return "names a placeholder storage class"
        if classes is not None and current not in classes:
            return f"names storage class {current!r}, which does not exist on {self.kube.context}"
        return None

    def _pre_provisioned(self, name: str, doc: Obj) -> None:
        """A claim with ``storageClassName: ""`` binds only a pre-provisioned volume: it must exist
        bound, or an Available volume without a class must be able to take it; else blocked now."""
        ns = self.namespace
        try:
            live = self.kube.get_or_none("PersistentVolumeClaim", name, ns)
        except Forbidden:
            self.out.limitations.append(f"PVC {name}: read forbidden; its pre-provisioned volume is unverified")
            return
        if live is not None and (live.get("status") or {}).get("phase") == "Bound":
            self.out.evidence.setdefault("pre_provisioned", {})[name] = "bound"
            return
        try:
            volumes = self.kube.list_items("PersistentVolume")[0]
        except Forbidden:
            self.out.limitations.append(f"PVC {name} (storageClassName \"\"): persistentvolume list forbidden; "
                                           "its pre-provisioned volume is unverified")
            return
        bindable = [v["metadata"]["name"] for v in volumes if compat.binds(doc, v)]
        self.out.evidence.setdefault("pre_provisioned", {})[name] = bindable or "none"
        if not bindable:
            self.out.block(BlockerClass.PVC, f"PVC {name} sets storageClassName \"\" (a pre-provisioned volume "
                              "only) and no Available PersistentVolume without a class can take it",
                              "create the PersistentVolume it should bind (or bind it first), or name a storage "
                              "class in the claim")


# --------------------------------------------------------------------------------- handed over

HANDED_FIX = ("hand over only Kubernetes-only changes (scheduling, tolerations, storage, metadata, registry); a "
              "change to performance settings is a new candidate from hypothesis-challenger")


def apply_handed(patch_file: Path | None, copies: Mapping[str, Path], recopied: set[str],
                 earlier: list[Mapping[str, Any]], exp_root: Path) -> tuple[list[Patch], list[str]]:
    """Step 1: the caller's ``--compat-patch`` (and, in a copy made again from its source, the
    handed-over patches an earlier run recorded for it, in their order), applied in place to the
    run-scoped copies ``copies`` (type -> path). Returns the patches to record and what was skipped.

    A patch file already recorded for a copy that was kept is not applied twice (a rerun with the
    same command is idempotent). A refused operation raises :class:`InputError` naming it, and no
    copy is written."""
    types = {name: kind for kind, name in STABLE_NAMES.items() if kind in copies}
    todo: list[patches.Proposal] = []
    for entry in earlier:
        if entry.get("source") == patches.HANDED_OVER and Path(str(entry.get("file", ""))).name in recopied:
            todo.append(patches.Proposal(
                types[Path(str(entry["file"])).name], tuple(entry.get("operations") or ()), str(entry.get("reason")),
                source=patches.HANDED_OVER, document=entry.get("document"),
                patch_file=str(entry.get("patch_file") or ""), patch_sha256=str(entry.get("patch_sha256") or "")))
    skipped: list[str] = []
    if patch_file is not None:
        name = f"--compat-patch {patch_file}"
        proposal = patches.read_handed(patch_file, name, types)
        shown = display(patch_file, exp_root)
        proposal = patches.Proposal(proposal.file_type, proposal.operations, proposal.reason,
                                    {"patch_file": shown}, patches.HANDED_OVER, proposal.document, shown,
                                    proposal.patch_sha256)
        done = any(e.get("patch_sha256") == proposal.patch_sha256 and Path(str(e.get("file", ""))).name
                   == STABLE_NAMES[proposal.file_type] for e in earlier)
        if done and STABLE_NAMES[proposal.file_type] not in recopied:
            skipped.append(f"{shown}: already applied to {STABLE_NAMES[proposal.file_type]} (SHA-256 "
                           f"{proposal.patch_sha256})")
        elif not done:
            todo.append(proposal)
    made: list[Patch] = []
    written: dict[str, list[Any]] = {}
    for proposal in todo:
        path = copies[proposal.file_type]
        docs = written.get(proposal.file_type)
        if docs is None:
            docs = [d for d in load_all(path, display(path, exp_root)) if d]
        try:
            docs, changes = patches.apply(docs, proposal)
        except patches.PatchRefused as exc:
            raise InputError(f"--compat-patch {proposal.patch_file}", f"refused: {exc}", HANDED_FIX) from exc
        written[proposal.file_type] = docs
        made.append(Patch.of(display(path, exp_root), proposal, changes))
    for kind, docs in written.items():
        atomic_write_text(copies[kind], dump_all(docs))
    return made, skipped
