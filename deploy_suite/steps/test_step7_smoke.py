"""Step 7: the OpenAI-compatible smoke test through a port-forward we own (``deploy_suite.procedure.smoke``)."""

from __future__ import annotations

from deploy_suite.access.kube import Kube
from deploy_suite.procedure import smoke
from deploy_suite.procedure.context import StepContext


def test_step7_smoke(run: StepContext, kube: Kube) -> None:
    """Reachability, model listed, one chat completion; smoke_test_artifact.json written."""
    plan = smoke.plan(run, kube)
    run.record(smoke.run(run, kube, plan))
