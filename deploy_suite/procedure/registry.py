"""The ordered step registry: the seven steps of the procedure by name, number and test module.

Steps are the seven steps of the procedure (CONTRIBUTING.md, "Where each rule lives"), one test
module each in ``deploy_suite/steps``. Their order and names live here (``STEPS``) so that the
machinery, the ledger and the report know all seven even when a module does not exist yet: a
missing module is simply ``not_run``, and, because the procedure's order is a safety order
(validate before mutate), every later step is then skipped (``deploy_suite.plugins.lifecycle``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class StepSpec:
    name: str
    number: int
    title: str

    @property
    def module(self) -> str:
        """File name of the step's test module in deploy_suite/steps."""
        return f"test_{self.name}.py"


STEPS: tuple[StepSpec, ...] = (
    StepSpec("step1_inputs", 1, "inputs and deployment directory"),
    StepSpec("step2_validate", 2, "validate the assigned DGD (read-only)"),
    StepSpec("step3_retire_previous", 3, "retire the previous iteration"),
    StepSpec("step4_support_manifests", 4, "apply support manifests"),
    StepSpec("step5_apply", 5, "apply the assigned DGD"),
    StepSpec("step6_readiness", 6, "wait for readiness"),
    StepSpec("step7_smoke", 7, "smoke test"),
)
STEP_NAMES: tuple[str, ...] = tuple(s.name for s in STEPS)
_BY_MODULE = {s.module: s for s in STEPS}


def step_for_module(filename: str) -> StepSpec | None:
    return _BY_MODULE.get(os.path.basename(filename))
