"""Step 5: apply only the run-scoped DGD with the experiment's field manager, after re-checking it
is not foreign; record its uid at once (what step 3 of the next iteration and a rerun trust)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deploy_suite import clock, yamlio
from deploy_suite.access.kube import Kube, Obj
from deploy_suite.constants import DGD_KIND
from deploy_suite.errors import PlatformFault, StepBlocked
from deploy_suite.model.dgd import Dgd, from_documents
from deploy_suite.procedure import owner
from deploy_suite.procedure.runstate import RunState
from deploy_suite.record import resume
from deploy_suite.record.ledger import Ledger


@dataclass
class Applied:
    """Step 5: the objects applied from deploy.yaml, the GPUs they request, how to clean up, and
    whose the DGD was just before the apply (``absent`` or ``ours``)."""

    applied: list[str]
    gpus_requested: int
    cleanup_command: str
    owner_before: str = "absent"

    def record(self, ledger: Ledger) -> Mapping[str, Any]:
        ledger.set_section("gpus_requested", self.gpus_requested)
        ledger.add_cleanup_command(self.cleanup_command)
        return {"applied": self.applied, "gpus_requested": self.gpus_requested, "dgd_before": self.owner_before}


def apply(run: RunState, kube: Kube) -> Applied:
    """Apply every document of applied_manifests/deploy.yaml (and nothing else). The budgets were
    judged in step 2; the DGD's ownership is read again right before the apply, so a same-named
    DGD someone created since step 2 is still never applied over."""
    path = run.manifests["deploy"]
    docs = yamlio.load_all(path, str(path))
    dgd = from_documents(docs, str(path))
    before = owner.require_not_foreign(kube, run.namespace, dgd.name, "step 5 refuses to apply over it")
    try:
        applied = kube.apply_documents(docs, run.namespace, run.rel(path))
    except PlatformFault as exc:
        raise platform_blocked(exc, "the apply") from exc
    _record_own_apply(run, kube, dgd, applied)
    return Applied([f"{o.get('kind')}/{o.get('metadata', {}).get('name')}" for o in applied], dgd.total_gpus(),
                   f"kubectl --context {kube.context} delete dynamographdeployment {dgd.name} -n {run.namespace}",
                   before.state)


def _record_own_apply(run: RunState, kube: Kube, dgd: Dgd, applied: Sequence[Obj]) -> None:
    """Saved at once, before the step ends: a rerun after a kill must recognise this DGD as its own
    (deploy_suite/record/resume.py). A re-apply after a teardown resets ``torn_down_at`` and closes the
    allocation interval it ended; the next bound GPU pod opens a new one (step 6)."""
    obj = next((o for o in applied if o.get("kind") == DGD_KIND and (o.get("metadata") or {}).get("name") == dgd.name),
               None)
    data = run.ledger.data
    if obj is not None:
        run.ledger.set_section("applied_dgd", resume.applied_record(obj, kube.context, clock.iso_now(),
                                                                    kube.field_manager))
    reset = resume.reopen(data)
    if reset is not None:
        data["reapplies"].append({"at": clock.iso_now(), "dgd": dgd.name, "reason": "re-applied after a teardown",
                                  "torn_down_at": reset})
    run.save()


def platform_blocked(exc: PlatformFault, during: str, result: object | None = None) -> StepBlocked:
    """An unreachable webhook of the operator blocks the run: the platform's fault, not the
    candidate's, so no failed attempt is recorded (docs/operator-generations.md, "Platform faults")."""
    return StepBlocked("platform", f"{during} met a platform fault: {exc}",
                       "the Dynamo operator's webhook is unreachable: check the operator's pod and its webhook "
                       "Service, then rerun this iteration", result)


