"""What the experiment tree says beyond this iteration: manifest.yaml's cluster context and session
start, the experiment's ledgers (other live DGDs for ``resources.gpu_ceiling``; what ``budget``
sums: failed deploys and allocation intervals) and the experiment id.

``manifest.yaml`` key names are unspecified upstream; ours (docs/procedure.md, "The experiment page") are
``cluster_context`` and an append-only ``cluster_context_history`` of ``{from, to, changed_at,
changed_by}``. The update keeps every other key and is atomic.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy_suite import clock, yamlio
from deploy_suite.record.ledger import LEDGER_NAME, atomic_write_text
from deploy_suite.vocab import RunStatus

MANIFEST_NAME = "<EXP_ROOT>/manifest.yaml"
MANIFEST_FIX = "fix the YAML of manifest.yaml (one mapping, written by user-interviewer)"
MANIFEST_KEY = "cluster_context"
HISTORY_KEY = "cluster_context_history"
# The wall-clock budget's origin (contracts: "session start"); created_at is the older spelling.
SESSION_START_KEYS = ("session_started_at", "created_at")


def experiment_id(exp_root: Path) -> str:
    """EXP_ID: the name of the EXP_ROOT directory (``runs/<EXP_ID>/``), never reused."""
    return exp_root.resolve().name


def _read_manifest(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    loaded = yamlio.load_one(path, MANIFEST_NAME, MANIFEST_FIX)
    return loaded if isinstance(loaded, dict) else {}


def session_started_at(exp_root: Path) -> tuple[str | None, _dt.datetime | None]:
    """The key of manifest.yaml holding the session start and its time (None, None without one)."""
    data = _read_manifest(exp_root / "manifest.yaml")
    for key in SESSION_START_KEYS:
        if key in data:
            return key, clock.parse_iso(data[key])
    return None, None


def update_manifest_context(exp_root: Path, context: str, changed_by: str = "recipe-deployer") -> dict[str, Any] | None:
    """Record the effective context in <EXP_ROOT>/manifest.yaml when it differs; returns the
    change made (None when nothing changed). Called before the first mutation of a run.

    Only the two keys change: the file is user-interviewer's, its other keys and comments stay as
    written (``yamlio.edit_mapping_file``); the write is atomic."""
    path = exp_root / "manifest.yaml"
    data = _read_manifest(path)
    before = data.get(MANIFEST_KEY)
    if before == context:
        return None
    change = {"from": before, "to": context, "changed_at": clock.iso_now(), "changed_by": changed_by}

    def edit(doc: MutableMapping[str, Any]) -> None:
        doc[MANIFEST_KEY] = yamlio.quoted(context)
        history = doc.get(HISTORY_KEY)
        if isinstance(history, list) and history:
            history.append(yamlio.quoted(change))  # in the list's own style, after its comments
        else:
            doc[HISTORY_KEY] = [yamlio.quoted(change)]

    atomic_write_text(path, yamlio.edit_mapping_file(path, edit, MANIFEST_NAME, MANIFEST_FIX))
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
    allocated_at: str | None = None
    # Runs of this directory that ended failed: the status now, and each earlier run a rerun kept
    # in ``resumes`` (a rerun rewrites ``status``).
    failed_runs: int = 0
    # The ledger's ``allocations`` as written ({allocated_at, released_at}, deploy_suite/record/resume.py);
    # empty for a ledger older than them (its one interval is allocated_at .. torn_down_at).
    allocations: tuple[dict[str, Any], ...] = ()


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def summarize(path: Path, data: dict[str, Any]) -> LedgerSummary:
    resumes = [r for r in data.get("resumes") or [] if isinstance(r, dict)]
    failed_runs = (data.get("status") == RunStatus.FAILED) + sum(r.get("previous_status") == RunStatus.FAILED
                                                              for r in resumes)
    spans = tuple(dict(a) for a in data.get("allocations") or [] if isinstance(a, dict))
    return LedgerSummary(path, path.parent.name, data.get("status"), data.get("dgd_name"),
                         _int(data.get("gpus_requested")), data.get("torn_down_at"),
                         len(data.get("failed_attempts") or []), data.get("allocated_at"), failed_runs, spans)


def ledger_documents(exp_root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every readable ledger of the experiment with its path, in iteration order (an unreadable one
    is left out: it is not this module's to judge)."""
    out = []
    for path in sorted((exp_root / "artifacts").glob("deploy-iter-*/deployment_ledger.json"),
                       key=lambda p: (len(p.parent.name), p.parent.name)):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            out.append((path, data))
    return out


def ledgers(exp_root: Path) -> list[LedgerSummary]:
    return [summarize(path, data) for path, data in ledger_documents(exp_root)]


def other_live_gpus(exp_root: Path, current_root: Path, retiring_root: Path | None,
                    summaries: Sequence[LedgerSummary] | None = None) -> tuple[int, list[str]]:
    """GPUs still held by this experiment's other live DGDs (ready, not torn down), except the one
    step 3 retires before the apply; ``summaries``: the experiment's ledgers, when already read."""
    total, names = 0, []
    for led in ledgers(exp_root) if summaries is None else summaries:
        root = led.path.parent.resolve()
        if root == current_root.resolve() or (retiring_root is not None and root == retiring_root.resolve()):
            continue
        if led.status == RunStatus.READY and led.torn_down_at is None:
            total += led.gpus_requested
            names.append(f"{led.deploy_id}:{led.dgd_name}")
    return total, names


def failed_deploys(led: LedgerSummary) -> int:
    """What one ledger counts against ``budgets.max_failed_deploys``, the one rule of the budget,
    the pages and ``deploy-suite status`` (docs/procedure.md, "Outcomes"): its ``failed_attempts``
    entries (run-artifacts.md), nothing else. A run ends ``failed`` only by a failed attempt, so a
    failed run is its attempt, one failure, not two (optimize-loop.md counts ledgers marked failed).

    The reader rule for old ledgers: a ledger written before that rule may hold runs that ended
    ``failed`` without an attempt (a dependency, no progress, a support Job, a smoke gate), now or
    in ``resumes``; each still counts one, as it did when it was written."""
    return max(led.failed_attempts, led.failed_runs)


def failed_deploys_in(data: Mapping[str, Any]) -> int:
    """:func:`failed_deploys` of one ledger document (a page or ``deploy-suite status`` reading it)."""
    return failed_deploys(summarize(Path(LEDGER_NAME), dict(data)))
