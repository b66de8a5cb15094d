"""Step 2: read-only validation of the assigned DGD before anything is mutated.

Checks run in the order of docs/procedure.md (step 2), pinned to the workload's context through
:class:`Kube`: namespace, CRD gate, advisory storage-class and node reads, cluster-compatibility
patches of the run-scoped copies, a server-side dry-run of every document, secrets (by name,
metadata only), PVCs, storage classes, image tags (what the manifests name:
``deploy_suite.model.references``), the workload's policy (``resources.pinned``,
``resources.gpu_ceiling``), capacity over every resource the pods ask for
(``deploy_suite.procedure.capacity_gate``), the GPU SKU (``deploy_suite.judges.sku``), the ownership of the
DGDs steps 3 and 5 would touch (``deploy_suite.judges.ownership``) and, last, the experiment's budgets
(``deploy_suite.record.budget``). Every failed gate becomes a blocker; ``Forbidden`` on an advisory
cluster-scope read becomes a run limitation. Nothing here creates, updates or deletes a cluster
object: the only writes are to the run-scoped copies under ``applied_manifests/`` (compatibility
patches docs/procedure.md allows ("Compatibility patches"), recorded with their reason).

:func:`preflight` is step 2 as a whole: it gathers the run's inputs (baseline DGD, the
experiment's other live GPUs, the ``--storage-class`` override, what step 3 will retire), runs
every gate and returns a :class:`Preflight`, the typed result later steps read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy_suite.access.kube import DGD, Kube, Obj
from deploy_suite.constants import (
    DGD_GROUP,
    DGD_KIND,
    DGD_PLURAL,
)
from deploy_suite.errors import Forbidden, NotFound, StepBlocked
from deploy_suite.judges import ownership, placement, sku
from deploy_suite.model import knobs
from deploy_suite.model.dgd import Dgd, from_documents
from deploy_suite.model.files import display, sha256_file
from deploy_suite.model.references import image_tag, referenced_claims, referenced_secrets, walk
from deploy_suite.model.workload import contract_dgd_candidates
from deploy_suite.procedure import capacity_gate, compat_patches, dryrun, platform, retire
from deploy_suite.procedure.compat_patches import Outcome
from deploy_suite.procedure.context import StepContext
from deploy_suite.record import budget, experiment, resume
from deploy_suite.record.ledger import Ledger
from deploy_suite.vocab import BlockerClass
from deploy_suite.yamlio import load_all

DGD_CRD = f"{DGD_PLURAL}.{DGD_GROUP}"
STEP = "step2_validate"
# Image tags that are clearly not a release: unresolved templating or documentation placeholders.
_PLACEHOLDER_TAG = re.compile(r"(\$\{?[A-Za-z_]+\}?|<[^>]*>|^my-tag$|^your-tag$|^TAG$|^tag$|^placeholder$)")


@dataclass
class ValidationReport(Outcome):
    """Every step-2 gate's findings (blockers, warnings, limitations, patches, evidence), and what
    later steps read of the DGD."""

    capacity: dict[str, Any] | None = None
    gpus_requested: int = 0
    dgd_name: str = ""
    frontend_service: str | None = None
    served_model: str | None = None

    @property
    def ok(self) -> bool:
        return not self.blockers


@dataclass(frozen=True)
class ValidationInputs:
    """What step 2 needs, all already verified by step 1."""

    namespace: str
    deploy_path: Path  # run-scoped copy applied_manifests/deploy.yaml
    support_paths: Mapping[str, Path]  # type -> run-scoped copy
    baseline_dgd_path: Path | None  # where deployment.dgd_path resolved (None: no file), for resources.pinned
    workload: Mapping[str, Any]
    display_root: Path  # paths in findings are shown relative to this (EXP_ROOT)
    retiring: tuple[str, str] | None = None  # (namespace, dgd) that step 3 will delete first
    own: tuple[str, str] | None = None  # (namespace, dgd) of this iteration's own live DGD (a rerun)
    own_uid: str | None = None  # the uid this iteration's step 5 recorded (a rerun)
    retiring_uid: str | None = None  # the uid the retiring DGD's ledger recorded
    other_live_gpus: int = 0  # GPUs held by this experiment's other live DGDs


def _load_docs(path: Path, display: str) -> list[Obj]:
    return [d for d in load_all(path, display, "fix the manifest syntax") if d]


class Validator:
    def __init__(self, kube: Kube, inputs: ValidationInputs) -> None:
        self.kube = kube
        self.inp = inputs
        self.report = ValidationReport()
        self.ev = self.report.evidence
        self.storage_classes: list[Obj] | None = None
        self.nodes: list[Obj] | None = None
        self.crd: Obj | None = None

    # ------------------------------------------------------------------ entry point
    def run(self) -> ValidationReport:
        inp, rep = self.inp, self.report
        deploy_display = display(inp.deploy_path, inp.display_root)
        # The deploy copy is read once: the model, the patches and the dry-run share the documents.
        docs = {"deploy": _load_docs(inp.deploy_path, deploy_display)}
        dgd = from_documents(docs["deploy"], deploy_display)
        rep.dgd_name = dgd.name
        rep.gpus_requested = dgd.total_gpus()
        rep.served_model = next((c.served_model for c in dgd.components if c.is_worker and c.served_model), None)
        rep.frontend_service = dgd.frontend_service
        if not self.check_namespace():
            return rep  # every later check reads inside the namespace
        self.check_crd()
        self.advisory_reads()
        dgd_doc = next((d for d in docs["deploy"] if d.get("kind") == DGD_KIND), {})
        self._merge(platform.check_platform(self.kube, dgd, dgd_doc, self.crd, self.nodes), "platform")
        for kind, path in inp.support_paths.items():
            docs[kind] = _load_docs(path, display(path, inp.display_root))
        self.compatibility_patches(dgd, docs)
        dgd = from_documents(docs["deploy"], deploy_display)  # the patched documents, as written
        self.dry_run(docs)
        self.check_secrets(docs)
        self.check_claims(docs, dgd)
        self.check_images(docs)
        self.check_pinned(dgd)
        self.check_ceiling(dgd)
        self.check_capacity(dgd, docs)
        self.check_sku(dgd)
        self.check_ownership(dgd)
        return rep

    # ------------------------------------------------------------------ gates
    def check_namespace(self) -> bool:
        ns = self.inp.namespace
        try:
            self.kube.get("Namespace", ns)
        except NotFound:
            self.report.block(BlockerClass.NAMESPACE, f"namespace {ns} does not exist on context {self.kube.context}",
                              "create the namespace (the harness never creates namespaces) or fix "
                              "kubernetes.namespace in user_workload.yaml")
            self.ev["namespace"] = "missing"
            return False
        except Forbidden:
            # A namespace-scoped identity may not read Namespace objects; a namespaced read
            # still proves the namespace is usable (RBAC bindings only exist in real namespaces).
            self.report.limitations.append(f"get namespace {ns} forbidden for this identity; "
                                           "existence inferred from a namespaced read")
            # Any namespaced list does: an identity may list pods (step 6 must) but not claims (step 3 copes).
            for kind in ("Pod", "PersistentVolumeClaim", DGD):
                try:
                    self.kube.list_items(kind, ns, page_size=1)
                except Forbidden:
                    continue
                self.ev["namespace"] = "present (inferred)"
                return True
            self.report.block(BlockerClass.NAMESPACE, f"namespace {ns}: this identity can neither read it nor list "
                              "inside it", "grant namespaced read access (get/list) in the namespace")
            return False
        self.ev["namespace"] = "present"
        return True

    def check_crd(self) -> None:
        try:
            self.crd = self.kube.get("CustomResourceDefinition", DGD_CRD)
            self.ev["crd"] = "present"
        except Forbidden:
            self.report.warnings.append("cluster-scope CRD read forbidden for this identity; deferring to the "
                                        "server dry-run")
            self.report.limitations.append("CRD read forbidden")
            self.ev["crd"] = "forbidden (deferred to dry-run)"
        except NotFound:
            self.report.block(BlockerClass.CRD, f"Dynamo CRDs missing: {DGD_CRD} is not installed on "
                              f"{self.kube.context}", "install the Dynamo platform (operator and CRDs) on the cluster")
            self.ev["crd"] = "missing"

    def advisory_reads(self) -> None:
        try:
            self.storage_classes = self.kube.list_items("StorageClass")[0]
            self.ev["storage_classes"] = sorted(sc["metadata"]["name"] for sc in self.storage_classes)
        except Forbidden:
            self.report.limitations.append("storageclass list forbidden for this identity")
            self.ev["storage_classes"] = "forbidden"
        try:
            self.nodes = self.kube.list_items("Node", slim=placement.slim_node)[0]
            self.ev["nodes"] = len(self.nodes)
        except Forbidden:
            self.report.limitations.append("node list forbidden for this identity: GPU capacity cannot be checked")
            self.ev["nodes"] = "forbidden"

    def compatibility_patches(self, dgd: Dgd, docs: dict[str, list[Obj]]) -> None:
        """Cluster-only fixes the cluster's own objects justify, in the run-scoped copies, recorded
        (``deploy_suite.procedure.compat_patches``)."""
        patcher = compat_patches.Patcher(self.kube, self.inp.namespace, self.inp.workload, self.storage_classes,
                                         self.nodes)
        out = patcher.patch(dgd, docs, {"deploy": self.inp.deploy_path, **self.inp.support_paths},
                            self.inp.display_root)
        self.report.merge(out)

    def dry_run(self, docs: dict[str, list[Obj]]) -> None:
        """Every document; the DGD as the create step 5 will make (``deploy_suite.procedure.dryrun``)."""
        paths = {"deploy": self.inp.deploy_path, **self.inp.support_paths}
        inp = self.inp
        self._merge(dryrun.dry_run_all(self.kube, docs, {k: display(paths[k], inp.display_root) for k in docs},
                                       inp.namespace, inp.retiring, inp.own_uid, inp.retiring_uid), None)

    def _merge(self, found: platform.Verdicts, key: str | None) -> None:
        """A group of checks' verdicts into the report; its evidence under ``key`` (None: at the top)."""
        for category, message, fix in found.blockers:
            self.report.block(category, message, fix)
        self.report.warnings.extend(found.warnings)
        self.report.limitations.extend(found.limitations)
        self.ev.update({key: found.evidence} if key else found.evidence)

    def check_secrets(self, docs: dict[str, list[Obj]]) -> None:
        names = sorted(referenced_secrets([d for ds in docs.values() for d in ds]))
        found: dict[str, str] = {}
        for name in names:
            try:
                found[name] = "present" if self.kube.secret_exists(name, self.inp.namespace) else "missing"
            except Forbidden:
                found[name] = "unverified (forbidden)"
                self.report.limitations.append(f"secret {name}: metadata read forbidden; existence not verified")
                continue
            if found[name] == "missing":
                self.report.block(BlockerClass.SECRET, f"secret {name} referenced by the manifests does not exist in "
                                  f"namespace {self.inp.namespace}", f"create secret {name} in the namespace "
                                  "yourself (the harness checks secrets by name only and never creates or reads them)")
        self.ev["secrets"] = found

    def check_claims(self, docs: dict[str, list[Obj]], dgd: Dgd) -> None:
        created = {d["metadata"]["name"] for ds in docs.values() for d in ds
                   if d.get("kind") == "PersistentVolumeClaim"}
        created |= {p.name for p in dgd.pvcs if p.create}
        claims = sorted(referenced_claims([d for ds in docs.values() for d in ds], dgd))
        state: dict[str, str] = {}
        for claim in claims:
            if claim in created:
                state[claim] = "created by a handed-over manifest"
                continue
            try:
                pvc = self.kube.get_or_none("PersistentVolumeClaim", claim, self.inp.namespace)
            except Forbidden:
                state[claim] = "unverified (forbidden)"
                self.report.limitations.append(f"PVC {claim}: read forbidden")
                continue
            if pvc is None:
                state[claim] = "missing"
                self.report.block(BlockerClass.PVC, f"PVC {claim} is referenced by the DGD but neither exists in "
                                  f"{self.inp.namespace} nor is created by a handed-over support manifest",
                                  "hand over the model-cache manifest that creates it (--support model-cache=PATH) "
                                  "or create the PVC")
            else:
                state[claim] = f"exists ({(pvc.get('status') or {}).get('phase', 'unknown')})"
        self.ev["pvcs"] = state

    def check_images(self, docs: dict[str, list[Obj]]) -> None:
        images = sorted({str(v) for ds in docs.values() for d in ds for k, v in walk(d)
                         if k == "image" and isinstance(v, str)})
        bad = [i for i in images if _PLACEHOLDER_TAG.search(image_tag(i)) or "${" in i]
        for image in bad:
            self.report.block(BlockerClass.IMAGE, f"image {image} has a placeholder tag",
                              "replace it with a released image tag (e.g. the Dynamo runtime version you run)")
        self.ev["images"] = images

    def check_pinned(self, dgd: Dgd) -> None:
        # The baseline is read (and its SHA-256 verified) only when a known knob is pinned.
        deployment, inp = self.inp.workload.get("deployment") or {}, self.inp
        pinned = [str(p) for p in ((inp.workload.get("resources") or {}).get("pinned") or [])]
        verdict = knobs.judge_pinned(pinned, lambda: knobs.read_baseline(
            inp.baseline_dgd_path, str(deployment.get("dgd_path")), deployment.get("dgd_sha256"), inp.display_root),
            dgd)
        for message, fix in verdict.blockers:
            self.report.block(BlockerClass.PINNED, message, fix)
        self.report.limitations.extend(verdict.limitations)  # a knob the table does not know: never a dead end
        self.ev["pinned"] = verdict.evidence

    def check_ceiling(self, dgd: Dgd) -> None:
        ceiling = (self.inp.workload.get("resources") or {}).get("gpu_ceiling")
        total = dgd.total_gpus() + self.inp.other_live_gpus
        self.ev["gpu_ceiling"] = {"ceiling": ceiling, "candidate": dgd.total_gpus(),
                                  "other_live": self.inp.other_live_gpus, "total": total}
        if ceiling is not None and total > int(ceiling):
            self.report.block(BlockerClass.GPU_CEILING, f"the candidate needs {dgd.total_gpus()} GPUs and "
                              f"this experiment's other live DGDs hold {self.inp.other_live_gpus}: {total} > "
                              f"resources.gpu_ceiling {ceiling}",
                              "reduce the candidate's GPU footprint or retire other DGDs first")

    def check_ownership(self, dgd: Dgd) -> None:
        """The candidate's DGD (step 5 applies over it) and the one step 3 retires: each absent or
        this experiment's (``deploy_suite.judges.ownership``); a foreign one is never changed or deleted."""
        targets = {(self.inp.namespace, dgd.name): "step 5 would apply over it"}
        if self.inp.retiring is not None:
            targets.setdefault(self.inp.retiring, "step 3 would delete it as the previous iteration's")
        seen = []
        for (ns, name), what in targets.items():
            # The DGD step 3 retires is the experiment's when its ledger names it exactly, whoever applied it.
            named = ownership.LedgerName(name, ns, self.kube.context, self.inp.retiring_uid) \
                if (ns, name) == self.inp.retiring else None
            try:
                found = ownership.judge(self.kube.get_or_none(DGD, name, ns), name, ns, self.kube.field_manager,
                                        ledger=named, kube_context=self.kube.context)
            except Forbidden:
                self.report.block(BlockerClass.OWNERSHIP, f"DGD {ns}/{name}: get forbidden, so who created it is "
                                  "unknown", "grant get on dynamographdeployments in the namespace")
                continue
            seen.append(found.as_dict())
            if found.foreign:
                stop = found.blocked(f"{what}: refused before any change")
                self.report.block(stop.category, stop.message, stop.fix)
        self.ev["ownership"] = seen

    def check_capacity(self, dgd: Dgd, docs: dict[str, list[Obj]] | None = None) -> None:
        """Every resource the pods ask for (``deploy_suite.procedure.capacity_gate``). Step 3 deletes the
        previous iteration's DGD before the apply: its GPUs will be free. A rerun's own live DGD
        (deploy_suite/record/resume.py) is re-applied in place: its pods are the demand itself."""
        excluded = [x for x in (self.inp.retiring, self.inp.own) if x is not None]
        self.report.capacity, found = capacity_gate.check(self.kube, dgd, (docs or {}).get("deploy", []),
                                                          self.nodes, namespace=self.inp.namespace, excluded=excluded)
        self._merge(found, None)

    def check_sku(self, dgd: Dgd) -> None:
        """The nodes that can take the GPU pods against ``hardware[].gpu_type`` (``deploy_suite.judges.sku``)."""
        if self.nodes is None:
            return  # the node list is forbidden: recorded as a limitation by advisory_reads
        result = sku.check_sku(dgd, self.nodes, sku.expected_types(self.inp.workload), self.inp.namespace)
        self.ev["gpu_sku"] = result.to_dict()
        self.report.warnings.extend(result.warnings)
        for message in result.blockers:
            self.report.block(BlockerClass.GPU_SKU, message, sku.SKU_FIX)


def _component_pod_spec(doc: Obj, name: str) -> dict[str, Any] | None:
    spec = doc.get("spec") or {}
    services = spec.get("services")
    if isinstance(services, dict) and name in services:
        return services[name].setdefault("extraPodSpec", {})  # type: ignore[no-any-return]
    for comp in spec.get("components") or []:
        if comp.get("name") == name:
            return comp.setdefault("podTemplate", {}).setdefault("spec", {})  # type: ignore[no-any-return]
    return None


def validate(kube: Kube, inputs: ValidationInputs) -> ValidationReport:
    """Run every step-2 gate; the report's blockers decide whether the run may mutate anything."""
    return Validator(kube, inputs).run()


# --------------------------------------------------------------------------------------------
# Step 2 as a whole: the run's inputs in, a typed result out
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Preflight:
    """Step 2's result: the validation report, and what later steps read of it.

    ``served_model`` is ``--served-model`` when given, else the workers' served model name;
    ``frontend_service`` is the Service the operator creates for the frontend (None without one).
    """

    report: ValidationReport
    served_model: str | None
    frontend_service: str | None
    other_live_dgds: list[str]
    step: str = STEP
    budget: dict[str, Any] | None = None  # budget.BudgetState.as_dict(): the ledger's budget section
    # The run-scoped copies' SHA-256 by type after the compatibility patches: step 1 hashed them before.
    copy_sha256: dict[str, str] = field(default_factory=dict)

    def record(self, ledger: Ledger) -> dict[str, Any]:
        """Patches, limitations and the step-2 sections; every blocker but the last, which stops the
        step (:meth:`blocked`) and is recorded with it."""
        rep = self.report
        for patch in rep.patches:
            ledger.add_patch(patch.as_dict())
        ledger.set_copy_sha256(self.copy_sha256)
        for limitation in rep.limitations:
            ledger.add_limitation(limitation)
        capacity = (rep.capacity or {}).get("capacity")
        ledger.set_section("gpus_requested", rep.gpus_requested)
        ledger.set_section("frontend_service", self.frontend_service)
        ledger.set_section("served_model", self.served_model)
        ledger.set_section("capacity", rep.capacity)
        ledger.set_section("budget", self.budget)
        ledger.set_section("preflight", {
            **rep.evidence, "warnings": rep.warnings, "limitations": rep.limitations,
            "other_live_dgds": self.other_live_dgds, "capacity": capacity,
            "pinned_ok": not any(b.category == BlockerClass.PINNED for b in rep.blockers),
            "blockers": [b.category for b in rep.blockers]})
        for blocker in rep.blockers[:-1]:
            ledger.add_blocker(self.step, blocker.category, blocker.message, blocker.fix)
        return {"capacity": capacity, "blockers": len(rep.blockers), "patches": len(rep.patches),
                "warnings": rep.warnings}

    def blocked(self) -> StepBlocked | None:
        """The error that stops the run when a gate failed: the last blocker, counting the others."""
        if not self.report.blockers:
            return None
        last, more = self.report.blockers[-1], len(self.report.blockers) - 1
        message = last.message if not more else f"{last.message} (and {more} more blocker(s) in the ledger)"
        return StepBlocked(last.category, message, last.fix, result=self)


def own_live_dgd(run: StepContext, kube: Kube) -> tuple[str, str] | None:
    """(namespace, name) of this iteration's own DGD when it is live: its uid is the one an earlier
    run's step 5 recorded (a rerun). Read-only."""
    own = run.carried.applied_dgd or {}
    uid = run.carried.uid
    if uid is None or own.get("kube_context") != kube.context:
        return None
    try:
        live = kube.get_or_none(DGD, str(own.get("name")), str(own.get("namespace")))
    except Forbidden:
        return None
    return (str(own["namespace"]), str(own["name"])) if resume.whose(live, uid, None) == "mine" else None


def preflight(run: StepContext, kube: Kube) -> Preflight:
    """Step 2: every read-only gate against the run's inputs; raises :class:`StepBlocked` (carrying
    the :class:`Preflight`, which the ledger plugin records) when any gate failed."""
    # A rerun whose own DGD is gone (its teardown stopped in the pods-gone wait) stops counting its
    # GPUs first: the budgets below read this ledger's GPU-hours, the capacity gate its pods.
    finished = retire.finish_own_teardown(run, kube)
    if finished is not None:
        run.record(finished)
    prev = run.previous
    baseline = next((p for p in contract_dgd_candidates(run.workload.dgd_path, run.exp_root) if p.is_file()), None)
    summaries = experiment.ledgers(run.exp_root)  # read once: the live GPUs and the budgets
    live, live_names = experiment.other_live_gpus(run.exp_root, run.deploy_root, prev.root if prev else None,
                                                  summaries)
    workload = dict(run.workload.data)
    if run.settings.storage_class:  # --storage-class overrides the workload's
        workload["kubernetes"] = {**(workload.get("kubernetes") or {}), "storage_class": run.settings.storage_class}
    manifests = run.manifests
    report = validate(kube, ValidationInputs(
        namespace=run.namespace, deploy_path=manifests["deploy"],
        support_paths={k: v for k, v in manifests.items() if k != "deploy"},
        baseline_dgd_path=baseline, workload=workload, display_root=run.exp_root,
        # Only a DGD on this same cluster frees GPUs here when step 3 deletes it.
        retiring=(prev.namespace, prev.dgd_name) if prev and prev.kube_context == kube.context else None,
        own=own_live_dgd(run, kube), other_live_gpus=live, own_uid=run.carried.uid,
        retiring_uid=prev.applied_uid if prev else None))
    # Budgets last: a spent one is the line the step stops with, before step 3 retires anything.
    spent = budget.assess(run.exp_root, run.workload.data.get("budgets"), report.gpus_requested,
                          summaries=summaries)
    for category, message, fix in spent.blockers:
        report.block(category, message, fix)
    report.limitations.extend(spent.limitations)  # a budget that cannot be counted: never a dead end
    copies = {kind: sha256_file(path) for kind, path in run.manifests.items()}
    unchanged = _unchanged_retry(run.carried.last_failure, copies, run.settings.retry_reason)
    if unchanged is not None:
        report.block(BlockerClass.INPUT, *unchanged)
    result = Preflight(report, run.settings.served_model or report.served_model, report.frontend_service,
                       live_names, run.step or STEP, spent.as_dict(), copies)
    stop = result.blocked()
    if stop is not None:
        raise stop
    return result


def _unchanged_retry(last: Mapping[str, Any] | None, copies: Mapping[str, str],
                     retry_reason: str | None) -> tuple[str, str] | None:
    """The procedure's "do not loop blindly": after a failed attempt, the same copies (after every
    patch this run made) are deployed again only with a reason naming a fix made on the cluster."""
    if last is None or retry_reason or dict(last.get("manifests") or {}) != dict(copies):
        return None
    return (f"the run-scoped copies are those of the failed attempt of {last.get('at')} "
            f"({last.get('diagnosis')}); retry only after a concrete fix",
            "hand over a Kubernetes-only fix with --compat-patch FILE, or, after fixing the cluster itself, pass "
            "--retry-reason TEXT naming that fix; a change to the candidate is a new candidate")

