"""The experiment's budgets (``budgets`` of user_workload.yaml), judged in step 2 before any mutation.

Three grants, each ``null`` = ungated (contracts.md, section 2), each judged from files only:

* ``max_failed_deploys``: failed attempts summed over the experiment's ledgers, nothing else (a
  blocked run is never charged; a ledger older than that rule also counts each run it says ended
  ``failed``: :func:`deploy_suite.record.experiment.failed_deploys`); spent when the sum reaches the grant;
* ``gpu_hours``: for every ledger, ``gpus_requested`` x its allocation intervals (``allocations``:
  ``allocated_at`` .. ``released_at``, the last open one .. ``torn_down_at`` or now while the DGD
  is live; :func:`deploy_suite.record.resume.gpu_hours`); spent when the sum reaches the grant, so that a
  candidate requesting GPUs could only exceed it;
* ``wall_clock_hours``: hours since the session start in ``<EXP_ROOT>/manifest.yaml``
  (``session_started_at``, or ``created_at``); spent when they reach the grant. The contracts leave
  the manifest's key names open: a session start the harness cannot read (another key, no
  timestamp, no manifest) makes the wall-clock budget unknown, a limitation of the run, never a
  blocker of every iteration (docs/procedure.md, "Budgets").

A spent budget blocks step 2, so step 3 never retires the last working deployment for an attempt
the budget does not allow. :class:`BudgetState` is the ledger's ``budget`` section.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy_suite import clock
from deploy_suite.record import experiment, resume
from deploy_suite.vocab import BlockerClass

FIX = "ask the user for more budget (user_workload.yaml budgets, via user-interviewer) or stop the experiment"


@dataclass(frozen=True)
class Usage:
    """One budget: what was used, the grant (None = ungated), and how it was counted."""

    used: float
    limit: float | None
    counted: list[str] = field(default_factory=list)

    @property
    def spent(self) -> bool:
        return self.limit is not None and self.used >= self.limit

    def as_dict(self) -> dict[str, Any]:
        remaining = None if self.limit is None else round(max(0.0, self.limit - self.used), 4)
        return {"used": round(self.used, 4), "limit": self.limit, "remaining": remaining, "spent": self.spent,
                "counted": list(self.counted)}


@dataclass(frozen=True)
class BudgetState:
    """Used vs granted for each budget at ``at``; ``blockers`` are (class, message, fix)."""

    failed_deploys: Usage
    gpu_hours: Usage
    wall_clock_hours: Usage
    session_started_at: str | None
    at: str
    blockers: list[tuple[BlockerClass, str, str]] = field(default_factory=list)
    limitations: list[str] = field(default_factory=list)  # what could not be counted, and why

    def as_dict(self) -> dict[str, Any]:
        return {"at": self.at, "session_started_at": self.session_started_at,
                "max_failed_deploys": self.failed_deploys.as_dict(), "gpu_hours": self.gpu_hours.as_dict(),
                "wall_clock_hours": self.wall_clock_hours.as_dict(), "blocked": [b[0] for b in self.blockers]}


def gpu_hours_of(led: experiment.LedgerSummary, now: _dt.datetime) -> float:
    """GPUs x the sum of one ledger's allocation intervals (its ``allocations``, docs/procedure.md, "Resume"),
    by :func:`deploy_suite.record.resume.gpu_hours`: the same figure as the report's."""
    return resume.gpu_hours({"gpus_requested": led.gpus_requested, "allocated_at": led.allocated_at,
                             "torn_down_at": led.torn_down_at, "allocations": list(led.allocations)}, now=now)


def _limit(budgets: Mapping[str, Any], name: str) -> float | None:
    value = budgets.get(name)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def assess(exp_root: Path, budgets: Mapping[str, Any] | None, candidate_gpus: int,
           now: _dt.datetime | None = None,
           summaries: Sequence[experiment.LedgerSummary] | None = None) -> BudgetState:
    """The budget state of the experiment at ``now`` (default: the clock's now), and a blocker for
    each spent budget. The experiment page passes its last ledger write, so an archived experiment
    reads the same tomorrow; ``summaries``: the experiment's ledgers, when the caller read them."""
    budgets = budgets or {}
    now = now or clock.now()
    failed, gpu_hours, failed_notes, gpu_notes = 0, 0.0, [], []
    for led in experiment.ledgers(exp_root) if summaries is None else summaries:
        count = experiment.failed_deploys(led)
        if count:
            failed += count
            failed_notes.append(f"{led.deploy_id}: {count}")
        hours = gpu_hours_of(led, now)
        if hours:
            gpu_hours += hours
            gpu_notes.append(f"{led.deploy_id}: {led.gpus_requested} GPU(s), {hours:.3f} GPU-h"
                             f"{'' if led.torn_down_at else ' (live)'}")
    key, started = experiment.session_started_at(exp_root)
    elapsed = max(0.0, (now - started).total_seconds() / 3600.0) if started is not None else 0.0
    wall_limit = _limit(budgets, "wall_clock_hours")
    unknown = _unknown_start(key) if wall_limit is not None and started is None else None
    state = BudgetState(
        Usage(failed, _limit(budgets, "max_failed_deploys"), failed_notes),
        Usage(gpu_hours, _limit(budgets, "gpu_hours"), gpu_notes),
        Usage(elapsed, wall_limit, [f"manifest.yaml {key}"] if started is not None else
              [f"unknown: {unknown}"] if unknown else []),
        clock.iso(started) if started is not None else None,
        clock.iso(now))
    state.blockers.extend(_blockers(state, candidate_gpus))
    if unknown:
        state.limitations.append(f"wall-clock budget unknown (budgets.wall_clock_hours is {wall_limit:g}): {unknown}; "
                                 "not gated by this run")
    return state


def _unknown_start(key: str | None) -> str:
    """Why the session start cannot be read from manifest.yaml, naming the keys the harness reads."""
    keys = " or ".join(experiment.SESSION_START_KEYS)
    if key:
        return f"<EXP_ROOT>/manifest.yaml's {key} is not a timestamp"
    return f"<EXP_ROOT>/manifest.yaml has no session start under {keys} (the key names are the session's own)"


def _blockers(state: BudgetState, candidate_gpus: int) -> list[tuple[BlockerClass, str, str]]:
    out = []
    failed, gpu, wall = state.failed_deploys, state.gpu_hours, state.wall_clock_hours
    if failed.spent:
        out.append((BlockerClass.BUDGET,
                    f"failed-deploy budget spent: {failed.used:g} failed deploy(s) recorded in the "
                    f"experiment's ledgers ({', '.join(failed.counted)}), budgets.max_failed_deploys is "
                    f"{failed.limit:g}; nothing was retired or applied", FIX))
    if gpu.spent and candidate_gpus > 0:
        out.append((BlockerClass.BUDGET, f"GPU-hour budget spent: {gpu.used:.2f} GPU-hours used of budgets.gpu_hours "
                    f"{gpu.limit:g}; the candidate's {candidate_gpus} GPU(s) would exceed it; nothing was retired "
                    "or applied", FIX))
    if wall.spent and state.session_started_at is not None:
        out.append((BlockerClass.BUDGET, f"wall-clock budget spent: {wall.used:.2f} hours since the session started at "
                    f"{state.session_started_at}, budgets.wall_clock_hours is {wall.limit:g}; nothing was retired "
                    "or applied", FIX))
    return out
