"""`make demo`'s experiment: its session starts when the demo starts (no cluster needed)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from deploy_suite import clock
from deploy_suite.fixtures.experiments.make_experiment import SAMPLE_ROOT
from deploy_suite.record import budget, experiment
from deploy_suite_offline.fixtures import demo


def test_the_demos_session_starts_now_so_budgets_read_minutes(tmp_path: Path) -> None:
    before = clock.now().replace(microsecond=0)
    exp = demo.prepare(tmp_path / "demo")
    key, started = experiment.session_started_at(exp.exp_root)
    assert key == "session_started_at" and started is not None
    assert before <= started <= clock.now()
    # The sample itself keeps its own date: only the demo's copy is re-stamped.
    assert experiment.session_started_at(SAMPLE_ROOT)[1] == dt.datetime(2026, 6, 1, 12, tzinfo=dt.UTC)
    state = budget.assess(exp.exp_root, {"wall_clock_hours": 1}, 0, now=started + dt.timedelta(minutes=3))
    assert state.wall_clock_hours.used == 0.05 and not state.blockers
    assert "created_at: \"" + clock.iso(started) in (exp.exp_root / "manifest.yaml").read_text()


def test_a_second_demo_replaces_the_first(tmp_path: Path) -> None:
    first = demo.prepare(tmp_path / "demo")
    (first.exp_root / "artifacts").mkdir()
    second = demo.prepare(tmp_path / "demo")
    assert second.exp_root == first.exp_root and not (second.exp_root / "artifacts").exists()
