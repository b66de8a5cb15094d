"""Step 5: apply only the run-scoped DGD with the experiment's field manager, after re-checking it
is not foreign; record its uid at once (what step 3 of the next iteration and a rerun trust)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deploy_suite import clock, yamlio
from deploy_suite.access.kube import DGD, Kube, Obj
from deploy_suite.constants import DGD_KIND
from deploy_suite.errors import PartialResult, PlatformFault, StepBlocked
from deploy_suite.judges import ownership
from deploy_suite.model.dgd import Dgd, from_documents
from deploy_suite.procedure.context import StepContext
from deploy_suite.procedure.retire import OwnTeardown
from deploy_suite.record import resume
from deploy_suite.record.ledger import Ledger
from deploy_suite.vocab import BlockerClass


@dataclass
class OwnApply:
    """The DGD as the apiserver returned it (``dgd``: name, namespace, context, ``uid``: what step 3
    of the next iteration and a rerun trust) and the allocation record step 6 goes on from (a
    re-apply after a teardown closed its interval: ``reapply``). Recorded inside step 5, at once:
    a rerun after a kill must recognise this DGD as its own (deploy_suite/record/resume.py)."""

    dgd: dict[str, Any] | None
    allocations: resume.Allocations
    reapply: dict[str, Any] | None = None

    @property
    def uid(self) -> str | None:
        return resume.recorded_uid({"applied_dgd": self.dgd})

    def record(self, ledger: Ledger) -> Mapping[str, Any]:
        if self.dgd is not None:
            ledger.set_section("applied_dgd", self.dgd)
        if self.reapply is not None:
            self.allocations.record(ledger)
            ledger.add_reapply(self.reapply)
        return {}


@dataclass
class Applied:
    """Step 5: the objects applied from deploy.yaml, the GPUs they request, how to clean up, and
    whose the DGD was just before the apply (``absent`` or ``ours``); the DGD's uid and allocation
    record (``own``)."""

    applied: list[str]
    gpus_requested: int
    cleanup_command: str
    owner_before: str = "absent"
    own: OwnApply = field(default_factory=lambda: OwnApply(None, resume.Allocations()))

    @property
    def uid(self) -> str | None:
        return self.own.uid

    @property
    def allocations(self) -> resume.Allocations:
        return self.own.allocations

    def record(self, ledger: Ledger) -> Mapping[str, Any]:
        ledger.set_section("gpus_requested", self.gpus_requested)
        ledger.add_cleanup_command(self.cleanup_command)
        return {"applied": self.applied, "gpus_requested": self.gpus_requested, "dgd_before": self.owner_before}


def apply(run: StepContext, kube: Kube) -> Applied:
    """Apply every document of applied_manifests/deploy.yaml (and nothing else). The budgets were
    judged in step 2; the DGD's ownership is read again right before the apply, so a same-named
    DGD someone created since step 2 is still never applied over."""
    path = run.manifests["deploy"]
    docs = yamlio.load_all(path, str(path))
    dgd = from_documents(docs, str(path))
    before = require_not_foreign(kube, run.namespace, dgd.name, "step 5 refuses to apply over it")
    try:
        applied = kube.apply_documents(docs, run.namespace, run.rel(path))
    except PlatformFault as exc:
        raise platform_blocked(exc, "the apply") from exc
    # The allocation record as step 2 left it when it found this iteration's DGD gone (torn_down_at written).
    gone = run.result(OwnTeardown)
    own = run.record(_own_apply((gone.allocations if gone else run.carried.allocations).copy(), kube, dgd, applied))
    return Applied([f"{o.get('kind')}/{o.get('metadata', {}).get('name')}" for o in applied], dgd.total_gpus(),
                   f"kubectl --context {kube.context} delete dynamographdeployment {dgd.name} -n {run.namespace}",
                   before.state, own)


def require_not_foreign(kube: Kube, namespace: str, name: str, what: str) -> ownership.Ownership:
    """Read the DGD (one GET; the judge reads only the object) and stop (:class:`StepBlocked`, ``what``
    ending its message) when it exists and is not this experiment's (``deploy_suite.judges.ownership``)."""
    found = ownership.judge(kube.get_or_none(DGD, name, namespace), name, namespace, kube.field_manager,
                            kube_context=kube.context)
    if found.foreign:
        raise found.blocked(what)
    return found

def _own_apply(allocations: resume.Allocations, kube: Kube, dgd: Dgd, applied: Sequence[Obj]) -> OwnApply:
    """The DGD's uid as applied; a re-apply after a teardown resets ``torn_down_at`` and closes the
    allocation interval it ended; the next bound GPU pod opens a new one (step 6)."""
    obj = next((o for o in applied if o.get("kind") == DGD_KIND and (o.get("metadata") or {}).get("name") == dgd.name),
               None)
    record = resume.applied_record(obj, kube.context, clock.iso_now(), kube.field_manager) if obj is not None else None
    reset = allocations.reopened()
    return OwnApply(record, allocations, None if reset is None else {
        "at": clock.iso_now(), "dgd": dgd.name, "reason": "re-applied after a teardown", "torn_down_at": reset})


def platform_blocked(exc: PlatformFault, during: str, result: PartialResult | None = None) -> StepBlocked:
    """An unreachable webhook of the operator blocks the run: the platform's fault, not the
    candidate's, so no failed attempt is recorded (docs/operator-generations.md, "Platform faults")."""
    return StepBlocked(BlockerClass.PLATFORM, f"{during} met a platform fault: {exc}",
                       "the Dynamo operator's webhook is unreachable: check the operator's pod and its webhook "
                       "Service, then rerun this iteration", result)


