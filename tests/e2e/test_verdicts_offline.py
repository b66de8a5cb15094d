"""Every failure class gives the right verdict on every operator profile where it exists
(docs/operator-generations.md): the ledger's status, the category, and the effect on the
failed-deploy budget. The time each verdict took is recorded for bench/bench_time_to_verdict.py.

``make test`` runs each class once, on the default profile (or the first where the class exists),
unless ``test_deploy_offline.py`` already proves it there (``Scenario.covered_by``) or the class is
left to the matrix (``Scenario.in_slice``); ``make test-all`` runs the whole matrix (marker ``matrix``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_suite_offline.operator_sim.profiles import DEFAULT_PROFILE, PROFILES
from tests import support
from tests.support import verdicts
from tests.support.targets import Target

pytestmark = [pytest.mark.cluster]


def _params() -> list[Any]:
    out = []
    for scenario in verdicts.SCENARIOS.values():
        profiles = scenario.profiles or tuple(PROFILES)
        representative = DEFAULT_PROFILE if DEFAULT_PROFILE in profiles else profiles[0]
        for profile in profiles:
            in_slice = profile == representative and scenario.in_slice and not scenario.covered_by
            marks = [] if in_slice else [pytest.mark.matrix]
            out.append(pytest.param(scenario.name, profile, id=f"{scenario.name}-{profile}", marks=marks))
    return out


@pytest.fixture
def verdict_target(request: pytest.FixtureRequest, offline_clusters: Any, tmp_path: Path) -> Iterator[Target]:
    name, profile = request.node.callspec.params["scenario"], request.node.callspec.params["profile"]
    cluster = offline_clusters.get("default", operator=profile,
                                   orchestrators=verdicts.SCENARIOS[name].orchestrators)
    with support.admin_target(cluster, tmp_path, "verdict", Target) as target:
        yield target


@pytest.mark.parametrize(("scenario", "profile"), _params())
def test_the_verdict_is_right_and_given_within_seconds(verdict_target: Target, scenario: str, profile: str) -> None:
    case = verdicts.SCENARIOS[scenario]
    suite, outcome = verdicts.run(verdict_target, case, profile)
    expected = case.expected
    passed = False
    try:
        assert (outcome.status, outcome.step, outcome.category) == (expected.status, expected.step,
                                                                    expected.category), suite.output[-3000:]
        assert outcome.failed_attempts == (1 if expected.failed_attempt else 0), outcome
        assert "during_error" not in outcome.extra, outcome.extra
        assert expected.says in (outcome.extra["diagnosis"] or ""), outcome.extra["diagnosis"]
        assert set(expected.also) <= set(outcome.extra["blockers"]), outcome.extra["blockers"]
        if case.waited is not None:  # the legitimate wait happened, and ended without a false verdict
            assert (outcome.extra["step_s"][case.waited[0]] or 0) >= case.waited[1], outcome.extra["step_s"]
        if expected.status == "ready":
            assert suite.returncode == 0
        else:
            assert suite.returncode != 0
        if case.evidence:
            # The verdict follows the evidence (the bench holds the goal; this only proves the
            # measurement is real and the wait was no timeout).
            assert outcome.seconds is not None and 0 <= outcome.seconds < verdicts.READINESS_S / 3, (
                outcome, suite.ledger().get("readiness"))
        if case.goal_s is not None:  # this class's goal is held here, not only by the bench
            assert outcome.seconds is not None and outcome.seconds < case.goal_s, outcome
        if "finished_at" in outcome.extra:  # the audit entry taken is the termination kwok reported
            assert outcome.evidence_at is not None and outcome.extra["finished_at"] is not None
            ended = verdicts.parse(outcome.extra["finished_at"])  # whole seconds (metav1.Time)
            assert ended <= verdicts.parse(outcome.evidence_at) < ended + dt.timedelta(seconds=2), outcome
        if case.no_progress_s < verdicts.NO_PROGRESS_S:  # waited longer than the bound, no false verdict
            assert outcome.extra["held_s"] > case.no_progress_s, outcome
            assert outcome.extra["contention"] or "contention" not in case.name, outcome
        passed = True
    finally:
        verdicts.record(outcome, passed)


def test_each_class_left_to_another_test_names_one_that_exists() -> None:
    source = (Path(__file__).with_name("test_deploy_offline.py")).read_text(encoding="utf-8")
    for scenario in verdicts.SCENARIOS.values():
        if scenario.covered_by:
            assert f"def {scenario.covered_by}(" in source, scenario.name
