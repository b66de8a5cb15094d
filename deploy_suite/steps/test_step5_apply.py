"""Step 5: apply only applied_manifests/deploy.yaml (all its documents).

All rules live in ``deploy_suite.procedure.apply.apply``: a spent failed-deploy budget blocks the apply.
"""

from __future__ import annotations

from deploy_suite.access.kube import Kube
from deploy_suite.procedure import apply
from deploy_suite.procedure.context import StepContext


def test_step5_apply(run: StepContext, kube: Kube) -> None:
    """Apply the run-scoped DGD; record gpus_requested and the cleanup command."""
    run.record(apply.apply(run, kube))
