"""Step 3: retire the previous iteration's DGD (iteration > 0), by exact name, namespace, context.

All rules live in ``deploy_suite.procedure.retire.retire``; at iteration 0 there is nothing to retire and
the step is skipped (after manifest.yaml records the effective context).
"""

from __future__ import annotations

import pytest

from deploy_suite.access.kube import Kube
from deploy_suite.procedure import retire
from deploy_suite.procedure.context import StepContext


def test_step3_retire_previous(run: StepContext, kube: Kube) -> None:
    """Delete only the previous DGD, wait for it and its pods to go, write torn_down_at there."""
    retired = run.record(retire.retire(run, kube))
    if retired.retired is None:
        pytest.skip("iteration 0: no previous iteration to retire")
