"""Measurements the tests hand to the figure scripts (docs/security.md, docs/reliability.md).

``bench/security_figures.py`` sets ``DEPLOY_SUITE_SECURITY_FIGURES`` and ``bench/reliability_figures.py``
sets ``DEPLOY_SUITE_FAULT_LOG`` to a scratch file; the tests append one JSON line per measurement.
Without the variable nothing is written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIGURES_ENV = "DEPLOY_SUITE_SECURITY_FIGURES"
FAULT_LOG_ENV = "DEPLOY_SUITE_FAULT_LOG"


def _append(env: str, lines: Sequence[str]) -> None:
    target = os.environ.get(env)
    if target and lines:
        with Path(target).open("a", encoding="utf-8") as handle:
            handle.write("".join(f"{line}\n" for line in lines))


def record_figure(kind: str, **values: Any) -> None:
    """One measurement of a security test."""
    _append(FIGURES_ENV, [json.dumps({"kind": kind, **values})])


@dataclass
class FaultRecord:
    """One injected fault: what, where, and how long until things were well again."""

    scenario: str
    fault: str
    step: str
    recovery_s: float
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self, survived: bool) -> dict[str, Any]:
        return {"scenario": self.scenario, "fault": self.fault, "step": self.step,
                "recovery_s": round(self.recovery_s, 3), "survived": survived, **self.detail}


def record_faults(test: str, scenario: str, records: Sequence[FaultRecord], survived: bool) -> None:
    """The faults a test injected, survived if the test passed. A test that failed before it could
    record one still counts as one fault, not survived."""
    lines = [json.dumps({"test": test, **r.as_dict(survived)}) for r in records]
    if not lines and not survived:
        lines = [json.dumps({"test": test, "scenario": scenario, "fault": "?", "step": "?", "recovery_s": None,
                             "survived": False})]
    _append(FAULT_LOG_ENV, lines)
