"""The budget arithmetic of step 2 (deploy_suite.record.budget): failed deploys, GPU-hours over allocation
intervals, wall clock since manifest.yaml's session start; each spent budget a blocker."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_suite import clock
from deploy_suite.record import budget, experiment, ledger

NOW = dt.datetime(2026, 6, 1, 18, 0, tzinfo=dt.UTC)  # six hours after the session start below


@pytest.fixture(autouse=True)
def fake_clock() -> Iterator[clock.FakeClock]:
    fake = clock.FakeClock(NOW)
    previous = clock.install(fake)
    yield fake
    clock.install(previous)


def write(exp: Path, iteration: int, **fields: Any) -> None:
    root = exp / "artifacts" / f"deploy-iter-{iteration:03d}"
    root.mkdir(parents=True, exist_ok=True)
    data = {"status": "ready", "dgd_name": "demo", "gpus_requested": 0, "allocated_at": None, "torn_down_at": None,
            "failed_attempts": [], "resumes": [], **fields}
    (root / ledger.LEDGER_NAME).write_text(json.dumps(data))


def manifest(exp: Path, text: str = 'session_started_at: "2026-06-01T12:00:00Z"\n') -> None:
    (exp / "manifest.yaml").write_text(text)


def grants(failed: float | None = None, gpu_hours: float | None = None, wall: float | None = None) -> dict[str, Any]:
    return {"max_failed_deploys": failed, "gpu_hours": gpu_hours, "wall_clock_hours": wall}


def test_gpu_hours_sum_gpus_times_intervals_torn_down_or_live_until_now(tmp_path: Path) -> None:
    write(tmp_path, 0, gpus_requested=8, allocated_at="2026-06-01T12:00:00Z", torn_down_at="2026-06-01T13:30:00Z")
    write(tmp_path, 1, gpus_requested=4, allocated_at="2026-06-01T17:00:00Z")  # live: until now
    write(tmp_path, 2, gpus_requested=2, status="blocked")  # never allocated: nothing
    # A rerun that re-applied (docs/procedure.md, "Resume"): allocations lists both intervals, allocated_at stays the
    # first start, torn_down_at closes the open one; 1 h + 0.25 h, not 2.75 h from the first start.
    write(tmp_path, 3, gpus_requested=1, allocated_at="2026-06-01T15:00:00Z", torn_down_at="2026-06-01T17:45:00Z",
          allocations=[{"allocated_at": "2026-06-01T15:00:00Z", "released_at": "2026-06-01T16:00:00Z"},
                       {"allocated_at": "2026-06-01T17:30:00Z", "released_at": None}])
    state = budget.assess(tmp_path, grants(gpu_hours=100), candidate_gpus=1)
    assert state.gpu_hours.used == pytest.approx(8 * 1.5 + 4 * 1.0 + 1 * (1.0 + 0.25))
    assert state.gpu_hours.counted == ["deploy-iter-000: 8 GPU(s), 12.000 GPU-h",
                                       "deploy-iter-001: 4 GPU(s), 4.000 GPU-h (live)",
                                       "deploy-iter-003: 1 GPU(s), 1.250 GPU-h"]
    assert not state.gpu_hours.spent and state.blockers == []


def test_gpu_hours_reaching_the_grant_block_a_candidate_that_requests_gpus(tmp_path: Path) -> None:
    write(tmp_path, 0, gpus_requested=2, allocated_at="2026-06-01T14:00:00Z")  # 2 GPUs x 4 h = 8
    state = budget.assess(tmp_path, grants(gpu_hours=8), candidate_gpus=1)
    assert state.gpu_hours.spent
    [(cls, message, _fix)] = state.blockers
    assert cls == "budget"
    assert message == ("GPU-hour budget spent: 8.00 GPU-hours used of budgets.gpu_hours 8; the candidate's 1 "
                       "GPU(s) would exceed it; nothing was retired or applied")
    # A candidate without GPUs adds no GPU-hour.
    assert budget.assess(tmp_path, grants(gpu_hours=8), candidate_gpus=0).blockers == []
    assert budget.assess(tmp_path, grants(gpu_hours=8.5), candidate_gpus=1).blockers == []


def test_failed_deploys_count_attempts_and_failed_runs_once_each(tmp_path: Path) -> None:
    write(tmp_path, 0, failed_attempts=[{}, {}])  # two attempts, the iteration then became ready
    write(tmp_path, 1, status="failed")  # failed without a recorded attempt (a Job, the smoke test)
    write(tmp_path, 2, status="failed", failed_attempts=[{}])  # the attempt is the run's failure: one
    # A rerun rewrote status; the earlier runs that failed are in resumes.
    write(tmp_path, 3, status="in_progress", resumes=[{"previous_status": "failed"}, {"previous_status": "failed"},
                                                      {"previous_status": "blocked"}])
    state = budget.assess(tmp_path, grants(failed=6), candidate_gpus=1)
    assert state.failed_deploys.used == 2 + 1 + 1 + 2
    assert state.failed_deploys.counted == ["deploy-iter-000: 2", "deploy-iter-001: 1", "deploy-iter-002: 1",
                                            "deploy-iter-003: 2"]
    [(cls, message, fix)] = state.blockers
    assert cls == "budget" and message.startswith("failed-deploy budget spent: 6 failed deploy(s) recorded")
    assert "budgets.max_failed_deploys is 6; nothing was retired or applied" in message
    assert fix == budget.FIX
    assert budget.assess(tmp_path, grants(failed=7), candidate_gpus=1).blockers == []


def test_wall_clock_counts_from_the_session_start_in_manifest_yaml(tmp_path: Path) -> None:
    manifest(tmp_path)
    spent = budget.assess(tmp_path, grants(wall=6), candidate_gpus=0)
    assert spent.wall_clock_hours.used == pytest.approx(6.0) and spent.session_started_at == "2026-06-01T12:00:00Z"
    assert [m for _, m, _ in spent.blockers] == [
        "wall-clock budget spent: 6.00 hours since the session started at 2026-06-01T12:00:00Z, "
        "budgets.wall_clock_hours is 6; nothing was retired or applied"]
    assert budget.assess(tmp_path, grants(wall=6.5), candidate_gpus=0).blockers == []
    # created_at is the older key; an unquoted timestamp (a YAML datetime) and an offset are read too.
    manifest(tmp_path, "created_at: 2026-06-01T14:00:00+02:00\n")
    state = budget.assess(tmp_path, grants(wall=6.5), candidate_gpus=0)
    assert state.session_started_at == "2026-06-01T12:00:00Z" and state.wall_clock_hours.counted == [
        "manifest.yaml created_at"]


@pytest.mark.parametrize(("text", "says"), [
    (None, "has no session start under session_started_at or created_at"),
    ('started: "2026-06-01T12:00:00Z"\n', "has no session start under session_started_at or created_at"),
    ('session: {start: "2026-06-01T12:00:00Z"}\n', "has no session start under session_started_at or created_at"),
    ("session_started_at: soon\n", "'s session_started_at is not a timestamp")])
def test_a_wall_clock_grant_without_a_readable_session_start_is_a_limitation_not_a_blocker(
        tmp_path: Path, text: str | None, says: str) -> None:
    # The contracts leave manifest.yaml's key names open: a session start under another key makes
    # the wall-clock budget unknown for this run, it never blocks every iteration.
    if text is not None:
        manifest(tmp_path, text)
    state = budget.assess(tmp_path, grants(wall=100, failed=3), candidate_gpus=1)
    assert state.blockers == []
    [limitation] = state.limitations
    assert limitation.startswith(
        "wall-clock budget unknown (budgets.wall_clock_hours is 100): <EXP_ROOT>/manifest.yaml")
    assert says in limitation and limitation.endswith("not gated by this run")
    assert state.wall_clock_hours.counted == [f"unknown: {limitation.split(': ', 1)[1].rsplit('; ', 1)[0]}"]
    assert not state.wall_clock_hours.spent
    ungated = budget.assess(tmp_path, grants(), candidate_gpus=1)
    assert ungated.blockers == [] and ungated.limitations == []  # ungated: nothing to read, nothing to say


def test_null_grants_gate_nothing_and_the_state_is_the_ledger_section(tmp_path: Path) -> None:
    manifest(tmp_path)
    write(tmp_path, 0, gpus_requested=1, allocated_at="2026-06-01T17:00:00Z", failed_attempts=[{}] * 50)
    state = budget.assess(tmp_path, None, candidate_gpus=8)
    assert state.blockers == []
    section = state.as_dict()
    assert section == {
        "at": "2026-06-01T18:00:00Z", "session_started_at": "2026-06-01T12:00:00Z",
        "max_failed_deploys": {"used": 50, "limit": None, "remaining": None, "spent": False,
                               "counted": ["deploy-iter-000: 50"]},
        "gpu_hours": {"used": 1.0, "limit": None, "remaining": None, "spent": False,
                      "counted": ["deploy-iter-000: 1 GPU(s), 1.000 GPU-h (live)"]},
        "wall_clock_hours": {"used": 6.0, "limit": None, "remaining": None, "spent": False,
                             "counted": ["manifest.yaml session_started_at"]},
        "blocked": []}
    document = ledger.new_document(deploy_id="deploy-iter-001", iteration=1, provenance="hypothesis-challenger",
                                   step_names=["step1_inputs"])
    document["budget"] = section
    ledger.validate(document)


def test_the_three_budgets_block_together_and_time_moves_them(tmp_path: Path, fake_clock: clock.FakeClock) -> None:
    manifest(tmp_path)
    write(tmp_path, 0, gpus_requested=1, allocated_at="2026-06-01T17:00:00Z", status="failed")
    assert budget.assess(tmp_path, grants(failed=2, gpu_hours=2, wall=7), candidate_gpus=1).blockers == []
    fake_clock.advance(3600)
    state = budget.assess(tmp_path, grants(failed=1, gpu_hours=2, wall=7), candidate_gpus=1)
    assert [m.split(":")[0] for _, m, _ in state.blockers] == [
        "failed-deploy budget spent", "GPU-hour budget spent", "wall-clock budget spent"]
    assert state.as_dict()["blocked"] == ["budget"] * 3


def test_unreadable_times_never_undercount_a_live_allocation(tmp_path: Path) -> None:
    led = experiment.LedgerSummary(tmp_path, "deploy-iter-000", "ready", "demo", 2, "garbage", 0,
                                   allocated_at="2026-06-01T16:00:00Z")
    assert budget.gpu_hours_of(led, NOW) == pytest.approx(4.0)  # torn-down time unreadable: live until now
    never = experiment.LedgerSummary(tmp_path, "deploy-iter-001", "ready", "demo", 2, None, 0, allocated_at="x")
    assert budget.gpu_hours_of(never, NOW) == 0.0
