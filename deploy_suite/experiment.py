"""What the experiment tree says beyond this iteration: manifest.yaml's cluster context, other live
DGDs of the experiment (for ``resources.gpu_ceiling``) and the failed-deploy budget.

``manifest.yaml`` key names are unspecified upstream; ours (documented in the README) are
``cluster_context`` and an append-only ``cluster_context_history`` of ``{from, to, changed_at,
changed_by}``. The update keeps every other key and is atomic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy_suite import clock, yamlio
from deploy_suite.ledger import atomic_write_text

MANIFEST_KEY = "cluster_context"
HISTORY_KEY = "cluster_context_history"


def update_manifest_context(exp_root: Path, context: str, changed_by: str = "recipe-deployer") -> dict[str, Any] | None:
    """Record the effective context in <EXP_ROOT>/manifest.yaml when it differs; returns the
    change made (None when nothing changed). Called before the first mutation of a run."""
    path = exp_root / "manifest.yaml"
    data: dict[str, Any] = {}
    if path.is_file():
        loaded = yamlio.load_one(path, "<EXP_ROOT>/manifest.yaml",
                                 "fix the YAML of manifest.yaml (one mapping, written by user-interviewer)")
        data = loaded if isinstance(loaded, dict) else {}
    before = data.get(MANIFEST_KEY)
    if before == context:
        return None
    change = {"from": before, "to": context, "changed_at": clock.iso_now(), "changed_by": changed_by}
    data[MANIFEST_KEY] = context
    history = data.get(HISTORY_KEY)
    data[HISTORY_KEY] = [*(history if isinstance(history, list) else []), change]
    atomic_write_text(path, yamlio.dump(data))
    return change


@dataclass(frozen=True)
class LedgerSummary:
    path: Path
    deploy_id: str
    status: str | None
    dgd_name: str | None
    gpus_requested: int
    torn_down_at: str | None
    failed_attempts: int


def ledgers(exp_root: Path) -> list[LedgerSummary]:
    out = []
    for path in sorted((exp_root / "artifacts").glob("deploy-iter-*/deployment_ledger.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        out.append(LedgerSummary(path, path.parent.name, data.get("status"), data.get("dgd_name"),
                                 int(data.get("gpus_requested") or 0), data.get("torn_down_at"),
                                 len(data.get("failed_attempts") or [])))
    return out


def other_live_gpus(exp_root: Path, current_root: Path, retiring_root: Path | None) -> tuple[int, list[str]]:
    """GPUs still held by this experiment's other live DGDs (ready, not torn down), except the one
    step 3 retires before the apply."""
    total, names = 0, []
    for led in ledgers(exp_root):
        root = led.path.parent.resolve()
        if root == current_root.resolve() or (retiring_root is not None and root == retiring_root.resolve()):
            continue
        if led.status == "ready" and led.torn_down_at is None:
            total += led.gpus_requested
            names.append(f"{led.deploy_id}:{led.dgd_name}")
    return total, names


def failed_attempts_so_far(exp_root: Path) -> int:
    """Every failed_attempts entry of every ledger of the experiment counts against the budget."""
    return sum(led.failed_attempts for led in ledgers(exp_root))
