"""Step 6: readiness, with pending-pod triage while waiting.

All rules live in ``deploy_suite.procedure.readiness.readiness``, including the teardown policy on failure
(the DGD is deleted unless ``--keep-on-failure``) and the failed-attempt record.
"""

from __future__ import annotations

from deploy_suite.access.kube import Kube
from deploy_suite.procedure import readiness
from deploy_suite.procedure.context import StepContext


def test_step6_readiness(run: StepContext, kube: Kube) -> None:
    """DGD Ready + successful + observedGeneration; every pod ready; frontend Service exists."""
    run.record(readiness.readiness(run, kube))
