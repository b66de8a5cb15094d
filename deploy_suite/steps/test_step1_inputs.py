"""Step 1: judge the handed-off inputs and create <EXP_ROOT>/artifacts/deploy-iter-NNN/.

``deploy_suite.procedure.inputs.prepare`` applies every rule (the workload schema, the manifest checks, the
deployment directory); a refused input raises ``InputError``, which the ledger plugin turns into
one line, a ``blocked`` step and (where the directory exists) a blocked ledger. Nothing here
talks to a cluster.
"""

from __future__ import annotations

from deploy_suite.procedure import inputs
from deploy_suite.procedure.context import StepContext
from deploy_suite.procedure.inputs import OnDirectory


def test_step1_inputs(run: StepContext, on_directory: OnDirectory) -> None:
    """Workload and DGD hashes recomputed, contract checked, run-scoped copies made."""
    run.record(inputs.prepare(run.settings, on_directory=on_directory))
