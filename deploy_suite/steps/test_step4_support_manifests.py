"""Step 4: model-cache, then model-download, then model-validate (when handed over).

All rules live in ``deploy_suite.procedure.support.support``; a failed Job's diagnostic (with its last log
lines) is recorded from the partial result the failure carries.
"""

from __future__ import annotations

import pytest

from deploy_suite.access.kube import Kube
from deploy_suite.procedure import support as step4
from deploy_suite.procedure.context import StepContext


def test_step4_support_manifests(run: StepContext, kube: Kube) -> None:
    """Apply support manifests in order; Jobs named from metadata.name; PVCs reach Bound."""
    support = run.record(step4.support(run, kube))
    if not support.applied:
        pytest.skip("no support manifests handed over")
