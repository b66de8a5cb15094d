"""How a stopped step ends (deploy_suite.procedure.stops, Lifecycle.stop_step; docs/procedure.md
"Outcomes"): ``failed`` only for a failed attempt, ``blocked`` with its class for everything else;
and ledgers written before that rule, which still render and count as they did."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deploy_suite import cli, clock
from deploy_suite.errors import Forbidden, StepBlocked, StepFailure, WaitTimeout
from deploy_suite.plugins.lifecycle import Lifecycle
from deploy_suite.procedure import stops
from deploy_suite.record import budget, experiment, ledger
from deploy_suite.vocab import BlockerClass, FailureCategory, StepOutcome, TriageCategory

DATA = Path(__file__).parent / "data"
# A ledger of the rule before: a missing secret key ended the run failed, no attempt, no blocker.
OLD = DATA / "ledger_failed_before_the_rule.json"


# ------------------------------------------------------------------ the rule


@pytest.mark.parametrize(("category", "cls"), [
    (TriageCategory.DEPENDENCY, "dependency"), (TriageCategory.PLATFORM, "platform"),
    (FailureCategory.NO_PROGRESS, "no-progress"), (FailureCategory.TIMEOUT, "timeout"),
    (FailureCategory.API_ERROR, "api-error"), (FailureCategory.RECONCILE_ERROR, "reconcile-error"),
    (FailureCategory.MISSING_FRONTEND_SERVICE, "frontend-service"), (FailureCategory.SMOKE, "smoke"),
    (FailureCategory.JOB_FAILED, "job"), (FailureCategory.JOB_TIMEOUT, "job"),
    (FailureCategory.FAILED, "error"), (TriageCategory.UNKNOWN, "error")])
def test_a_stop_that_is_not_a_failed_attempt_blocks_with_its_class(category: Any, cls: str) -> None:
    stop = stops.judge("step6_readiness", StepFailure("why it stopped", category, ["seen"]))
    assert (stop.outcome, stop.category, stop.message, stop.evidence) == (StepOutcome.BLOCKED, cls, "why it stopped",
                                                                          ["seen"])
    assert not stop.failed_attempt and stop.fix


def test_only_a_failed_attempt_fails() -> None:
    stop = stops.judge("step6_readiness", StepFailure("crash loop", TriageCategory.CRASH, ["exit 137"],
                                                      failed_attempt=True))
    assert (stop.outcome, stop.category, stop.evidence) == (StepOutcome.FAILED, "crash", ["exit 137"])
    assert stop.failed_attempt


def test_every_failure_category_has_its_class_so_none_falls_to_error_unnoticed() -> None:
    assert set(FailureCategory) - {FailureCategory.FAILED} <= set(stops.BLOCKS)
    assert {cls for cls, _ in stops.BLOCKS.values()} <= set(BlockerClass)


@pytest.mark.parametrize(("error", "cls"), [
    (Forbidden("pods is forbidden", 403), "api-error"),
    (WaitTimeout("dgd/x gone", 600.0), "timeout"),
    (RuntimeError("a bug of the harness"), "error"),
    (StepBlocked(BlockerClass.SECRET, "secret x not found", "create it"), "secret")])
def test_other_errors_block_too(error: BaseException, cls: str) -> None:
    stop = stops.judge("step3_retire_previous", error)
    assert (stop.outcome, stop.category) == (StepOutcome.BLOCKED, cls) and stop.fix


def test_a_support_jobs_pod_that_can_never_run_is_the_jobs_blocker_not_a_failed_attempt() -> None:
    verdict = StepFailure("model-download job cannot run: untolerated taint", TriageCategory.FAILED_DEPLOY)
    assert stops.judge("step4_support_manifests", verdict).category == "job"
    dependency = StepFailure("model-cache PVC never bound", TriageCategory.DEPENDENCY)
    assert stops.judge("step4_support_manifests", dependency).category == "dependency"


# ------------------------------------------------------------------ the run's record


@pytest.fixture
def run(lifecycle: Lifecycle) -> Lifecycle:
    """A run whose steps 1 to 5 passed, in step 6."""
    state = lifecycle
    for name in ("step1_inputs", "step2_validate", "step3_retire_previous", "step4_support_manifests",
                 "step5_apply"):
        state.begin_step(name)
        state.end_step(name, StepOutcome.PASSED)
    state.begin_step("step6_readiness")
    return state


def saved(run: Lifecycle) -> dict[str, Any]:
    assert run.ledger_path is not None
    data: dict[str, Any] = json.loads(run.ledger_path.read_text())
    ledger.validate(data)
    return data


def test_a_failed_attempt_fails_the_run_and_is_recorded_once(run: Lifecycle) -> None:
    line = run.stop_step("step6_readiness", StepFailure("pods can never schedule: untolerated taint",
                                                        TriageCategory.FAILED_DEPLOY, ["0/4 nodes"],
                                                        failed_attempt=True))
    data = saved(run)
    assert line == "StepFailure: pods can never schedule: untolerated taint"
    assert (data["status"], data["current_step"], data["blockers"]) == ("failed", "step6_readiness", [])
    (attempt,) = data["failed_attempts"]
    assert (attempt["step"], attempt["category"], attempt["evidence"]) == ("step6_readiness", "failed-deploy",
                                                                           ["0/4 nodes"])
    assert experiment.failed_deploys_in(data) == 1
    assert run.blocked_reason("step7_smoke") == f"blocked by step6_readiness: {line}"


def test_no_progress_blocks_the_run_with_its_class_and_charges_nothing(run: Lifecycle) -> None:
    error = StepFailure("no progress for 900s (timeouts.readiness_no_progress_s 900s)", FailureCategory.NO_PROGRESS)
    line = run.stop_step("step6_readiness", error)
    data = saved(run)
    assert (data["status"], data["failed_attempts"]) == ("blocked", [])
    (blocker,) = data["blockers"]
    assert (blocker["step"], blocker["class"], blocker["message"]) == ("step6_readiness", "no-progress", str(error))
    assert blocker["fix"] == stops.BLOCKS[FailureCategory.NO_PROGRESS][1]
    assert data["steps"][5]["outcome"] == "blocked" and data["steps"][5]["reason"] == line
    assert data["diagnostics"][-1]["error"] == line  # the error line kept as before
    assert experiment.failed_deploys_in(data) == 0
    # The verdict's time to the microsecond (the step's ended_at says the whole second only).
    stopped_at = data["steps"][5]["evidence"]["stopped_at"]
    gap = clock.parse_iso(data["steps"][5]["ended_at"]) - clock.parse_iso(stopped_at)  # type: ignore[operator]
    assert "." in stopped_at and -1 < gap.total_seconds() <= 1, stopped_at


def test_a_harness_error_blocks_as_an_unclassified_error(run: Lifecycle) -> None:
    run.stop_step("step6_readiness", RuntimeError("boom"))
    data = saved(run)
    assert data["status"] == "blocked" and data["blockers"][0]["class"] == "error"
    assert data["blockers"][0]["message"] == "RuntimeError: boom" and data["failed_attempts"] == []


# ------------------------------------------------------------------ ledgers of the rule before


def old_experiment(tmp_path: Path) -> Path:
    """Iteration 0 ready (a copy of the ready ledger), iteration 1 the old shape."""
    root = tmp_path / "runs" / "20261130T083600Z-old"
    for i, source in ((0, DATA / "ledger_ready.json"), (1, OLD)):
        target = root / "artifacts" / f"deploy-iter-{i:03d}" / ledger.LEDGER_NAME
        target.parent.mkdir(parents=True)
        data = json.loads(source.read_text())
        data.update(deploy_id=target.parent.name, iteration=i)
        target.write_text(json.dumps(data))
    (root / "user_workload.yaml").write_text("budgets: {max_failed_deploys: 1, gpu_hours: null, "
                                             "wall_clock_hours: null}\n")
    return root


def test_the_old_shape_is_what_the_rule_before_wrote() -> None:
    data = json.loads(OLD.read_text())
    ledger.validate(data)
    assert (data["status"], data["failed_attempts"], data["blockers"]) == ("failed", [], [])
    assert data["readiness"]["state"] == "dependency" and data["steps"][5]["outcome"] == "failed"


def test_an_old_failed_run_without_an_attempt_still_counts_one(tmp_path: Path) -> None:
    root = old_experiment(tmp_path)
    state = budget.assess(root, {"max_failed_deploys": 1}, candidate_gpus=1)
    assert state.failed_deploys.used == 1 and state.failed_deploys.counted == ["deploy-iter-001: 1"]
    assert [cls for cls, _, _ in state.blockers] == ["budget"]  # spent, as it was


def test_an_old_failed_run_renders_as_it_did(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = old_experiment(tmp_path)
    # The iteration page (deploy-suite report LEDGER): failed, the failed run's next action, counted.
    page = tmp_path / "iteration.html"
    assert cli.main(["report", str(root / "artifacts" / "deploy-iter-001" / ledger.LEDGER_NAME), "-o", str(page)]) == 0
    text = page.read_text()
    assert ">failed</span>" in text and "read the diagnostics and failed_attempts" in text
    assert "failed attempts (1)" in text and "without a recorded attempt" in text
    # The experiment page (deploy-suite report EXP_ROOT): the row says the run is counted.
    assert cli.main(["report", str(root), "-o", str(tmp_path / "experiment.html")]) == 0
    assert "1 failed run(s) without one (older ledger), counted" in (tmp_path / "experiment.html").read_text()
    capsys.readouterr()
    # deploy-suite status: failed, no attempt, counted one; the budget spent as it was.
    assert cli.main(["status", str(root), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    old = doc["iterations"][1]
    assert (old["status"], old["failed_attempts"], old["failed_deploys"]) == ("failed", 0, 1)
    assert doc["budgets"]["max_failed_deploys"]["used"] == 1 and doc["budgets"]["max_failed_deploys"]["spent"]
    assert cli.main(["status", str(root)]) == 1
    assert "deploy-iter-001  failed  blocker -  failed attempts 0 (counted 1)" in capsys.readouterr().out
