"""Step 6: readiness, with pending-pod triage before waiting."""

from __future__ import annotations

from pathlib import Path

from deploy_suite import clock, rollout
from deploy_suite.dgd import load_dgd
from deploy_suite.errors import StepFailure
from deploy_suite.kube import DGD, Kube
from deploy_suite.runstate import RunState


def test_step6_readiness(run: RunState, kube: Kube, namespace: str, manifests: dict[str, Path]) -> None:
    """DGD Ready + successful + observedGeneration; every pod ready; frontend Service exists."""
    dgd = load_dgd(manifests["deploy"])

    def allocated(at: str) -> None:
        if not run.ledger.data.get("allocated_at"):
            run.ledger.set_section("allocated_at", at)
            run.save()

    try:
        ready = rollout.wait_ready(
            kube, namespace, dgd, run.settings.timeouts.readiness_s,
            frontend_expected=any(c.type == "frontend" for c in dgd.components),
            on_progress=run.progress, on_allocated=allocated)
    except StepFailure as exc:
        run.ledger.set_section("readiness", {"state": exc.category, "diagnosis": str(exc), "evidence": exc.evidence})
        if exc.failed_attempt or exc.category == "crash":
            run.ledger.add_failed_attempt("step6_readiness", exc.category, exc.evidence, str(exc))
        if not run.settings.keep_on_failure:
            # Free the GPUs of an attempt that cannot succeed; --keep-on-failure keeps it to debug.
            kube.delete(DGD, dgd.name, namespace)
            run.ledger.set_section("torn_down_at", clock.iso_now())
        raise
    run.ledger.set_section("readiness", ready.as_dict())
    for evidence in rollout.config_engagement(kube, namespace, dgd):
        run.ledger.add_config_engagement(evidence)
    run.add_evidence(state=ready.state, seconds=ready.seconds, contention=len(ready.contention))
