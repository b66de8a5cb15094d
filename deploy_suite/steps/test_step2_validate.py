"""Step 2: read-only validation gates and GPU capacity (``deploy_suite.procedure.validate.preflight``).

Nothing is mutated on the cluster; compatibility patches touch only the run-scoped copies and
are recorded with their reason. Any blocker stops the run before step 3.
"""

from __future__ import annotations

from deploy_suite.access.kube import Kube
from deploy_suite.procedure import validate
from deploy_suite.procedure.context import StepContext


def test_step2_validate(run: StepContext, kube: Kube) -> None:
    """Namespace, CRDs, platform, dry-run (as the create step 5 makes), secrets by name, PVCs, images, pinned
    knobs, GPU ceiling, capacity, SKU, ownership, budgets."""
    run.record(validate.preflight(run, kube))
