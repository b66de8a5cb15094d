"""``deploy-suite status EXP_ROOT [--json]`` on experiments written to disk (no cluster)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from deploy_suite import cli, clock
from deploy_suite import status as status_cli
from deploy_suite.fixtures.experiments.synthetic import write_synthetic_experiment
from deploy_suite.record import ledger

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "status.schema.json"


def _ledger_path(root: Path, i: int) -> Path:
    return root / "artifacts" / f"deploy-iter-{i:03d}" / ledger.LEDGER_NAME


def _edit(root: Path, i: int, **changes: Any) -> None:
    path = _ledger_path(root, i)
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["status", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _json(capsys: pytest.CaptureFixture[str], root: Path) -> tuple[int, dict[str, Any]]:
    code, out, _ = _run(capsys, str(root), "--json")
    doc: dict[str, Any] = json.loads(out)
    Draft202012Validator(json.loads(SCHEMA.read_text())).validate(doc)
    return code, doc


def test_the_schema_is_a_valid_json_schema() -> None:
    Draft202012Validator.check_schema(json.loads(SCHEMA.read_text()))


def test_last_iteration_ready_exits_0_and_hands_off_the_endpoint(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    root = write_synthetic_experiment(tmp_path, 3).exp_root
    _edit(root, 2, endpoint={"kind": "service", "target": "synthetic-agg-frontend", "port": 8000, "path": "/v1"},
          served_model="Qwen/Qwen3-0.6B")
    (root / "artifacts" / "deploy-iter-002" / "smoke_test_artifact.json").write_text('{"success": 1}')
    code, out, err = _run(capsys, str(root))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert [line.split()[:2] for line in lines[:3]] == [["deploy-iter-000", "ready"], ["deploy-iter-001", "failed"],
                                                       ["deploy-iter-002", "ready"]]
    assert "endpoint service synthetic-agg-frontend:8000" in lines[2] and "smoke passed" in lines[2]
    assert lines[3].startswith("budgets as of ") and "failed deploys 1 of 40" in lines[3]
    assert lines[4].startswith("next action (deploy-iter-002): hand-off-endpoint: ")
    assert "Qwen/Qwen3-0.6B answers on service synthetic-agg-frontend:8000 in namespace ns" in lines[4]
    code, doc = _json(capsys, root)
    assert code == doc["exit_code"] == 0
    last = doc["iterations"][2]
    assert last["smoke_artifact"] == "artifacts/deploy-iter-002/smoke_test_artifact.json"
    assert doc["iterations"][0]["smoke_artifact"] is None
    assert last["ledger"] == "artifacts/deploy-iter-002/deployment_ledger.json"


def test_gpu_hours_are_the_ledgers_intervals_as_of_the_last_write(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    root = write_synthetic_experiment(tmp_path, 3).exp_root
    _, doc = _json(capsys, root)
    first = json.loads(_ledger_path(root, 0).read_text())
    start, end = clock.parse_iso(first["allocated_at"]), clock.parse_iso(first["torn_down_at"])
    assert start is not None and end is not None
    assert doc["iterations"][0]["gpu_hours"] == pytest.approx(
        first["gpus_requested"] * (end - start).seconds / 3600, abs=1e-6)
    # The last one is live: counted to the last ledger write, not to the moment status runs.
    last = json.loads(_ledger_path(root, 2).read_text())
    live_end = clock.parse_iso(last["updated_at"])
    live_start = clock.parse_iso(last["allocated_at"])
    assert live_end is not None and live_start is not None and doc["as_of"] == last["updated_at"]
    assert doc["iterations"][2]["gpu_hours"] == pytest.approx(
        last["gpus_requested"] * (live_end - live_start).seconds / 3600, abs=1e-6)
    assert doc["budgets"]["gpu_hours"]["used"] == pytest.approx(sum(i["gpu_hours"] for i in doc["iterations"]),
                                                                abs=1e-3)


def test_an_archived_experiment_reads_the_same_elsewhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_synthetic_experiment(tmp_path / "live", 4).exp_root
    archived = tmp_path / "archive" / root.name
    shutil.copytree(root, archived)
    shutil.rmtree(root)
    before = write_synthetic_experiment(tmp_path / "again", 4).exp_root
    assert _run(capsys, str(archived))[1] == _run(capsys, str(before))[1]


def test_blocked_exits_1_naming_the_blocker_and_its_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_synthetic_experiment(tmp_path, 4).exp_root
    _edit(root, 3, blockers=[{"step": "step2_validate", "class": "secret",
                              "message": "secret hf-token-secret not found in namespace ns",
                              "fix": "ask the cluster admin to create hf-token-secret"}])
    code, out, _ = _run(capsys, str(root))
    assert code == 1
    row = out.splitlines()[3]
    assert row.startswith("deploy-iter-003  blocked  blocker secret ") and "hf-token-secret not found" in row
    assert out.splitlines()[-1] == (
        "next action (deploy-iter-003): stop-report-fix: stop, do not redeploy; report the secret blocker "
        "(step2_validate): secret hf-token-secret not found in namespace ns; fix: ask the cluster admin to "
        "create hf-token-secret")
    code, doc = _json(capsys, root)
    assert (code, doc["iterations"][3]["blocker_class"], doc["next_action"]["action"]) == (1, "secret",
                                                                                           "stop-report-fix")


def test_failed_hands_back_to_the_challenger_with_the_diagnosis(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = write_synthetic_experiment(tmp_path, 2).exp_root
    code, doc = _json(capsys, root)
    last = doc["iterations"][1]
    assert (code, last["status"], last["failed_attempts"]) == (1, "failed", 1)
    assert last["diagnosis"] == "crash-loop: worker OOMKilled"
    assert doc["next_action"]["action"] == "hand-back-to-challenger"
    assert "crash-loop: worker OOMKilled" in doc["next_action"]["message"]


def test_a_scheduling_failure_says_patch_and_rerun_the_same_iteration(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    root = write_synthetic_experiment(tmp_path, 2).exp_root
    _edit(root, 1, failed_attempts=[{
        "at": "2026-06-01T12:00:00Z", "step": "step6_readiness", "category": "failed-deploy",
        "diagnosis": "pod w-0 can never schedule as written (node affinity/selector mismatch)",
        "evidence": ["pod w-0: FailedScheduling: 0/4 nodes are available: 4 node(s) didn't match Pod's node "
                     "affinity/selector."]}])
    code, doc = _json(capsys, root)
    assert (code, doc["iterations"][1]["scheduling_failure"]) == (1, True)
    assert doc["next_action"]["action"] == "patch-and-rerun" and "--compat-patch" in doc["next_action"]["message"]


def test_a_failed_baseline_is_reported_not_handed_to_a_challenger(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    root = write_synthetic_experiment(tmp_path, 1).exp_root
    _edit(root, 0, status="failed", failed_attempts=[{
        "at": "2026-06-01T12:00:00Z", "step": "step6_readiness", "category": "crash-loop",
        "diagnosis": "worker OOMKilled", "evidence": ["pod w-0: OOMKilled"]}])
    code, doc = _json(capsys, root)
    assert code == 1 and doc["next_action"]["action"] == "stop-report-fix"
    assert "baseline itself fails" in doc["next_action"]["message"]


def test_a_spent_budget_says_stop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_synthetic_experiment(tmp_path, 4).exp_root
    _edit(root, 3, blockers=[{"step": "step2_validate", "class": "budget",
                              "message": "failed-deploy budget spent: 3 failed deploy(s)", "fix": "stop"}])
    code, doc = _json(capsys, root)
    assert (code, doc["next_action"]["action"]) == (1, "stop-budget-spent")
    assert "failed-deploy budget spent" in doc["next_action"]["message"]
    # A budget spent after the last run's step 2 (grant lowered) stops the experiment too.
    root2 = write_synthetic_experiment(tmp_path / "b", 4).exp_root
    work = root2 / "user_workload.yaml"
    work.write_text(work.read_text().replace("max_failed_deploys: 40", "max_failed_deploys: 1"))
    code, doc = _json(capsys, root2)
    assert doc["budgets"]["max_failed_deploys"]["spent"] is True
    assert (code, doc["next_action"]["action"]) == (1, "stop-budget-spent")


def test_an_interrupted_run_says_rerun(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_synthetic_experiment(tmp_path, 1).exp_root
    _edit(root, 0, status="in_progress", current_step="step6_readiness", smoke=None)
    code, doc = _json(capsys, root)
    assert (code, doc["next_action"]["action"], doc["iterations"][0]["smoke"]["result"]) == (1, "rerun", "not-run")
    assert "step6_readiness" in doc["next_action"]["message"]


def test_no_ledger_yet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "exp" / "artifacts").mkdir(parents=True)
    code, doc = _json(capsys, tmp_path / "exp")
    assert (code, doc["iterations"], doc["budgets"], doc["next_action"]["action"]) == (1, [], None, "run-iteration-0")


@pytest.mark.parametrize("make", ["missing", "file", "no-artifacts"])
def test_bad_input_is_one_line_naming_it_and_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     make: str) -> None:
    path = tmp_path / "exp"
    if make == "file":
        path.write_text("{}")
    elif make == "no-artifacts":
        path.mkdir()
    code, out, err = _run(capsys, str(path))
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1
    assert err.startswith(f"deploy-suite status: error: EXP_ROOT {path} ") and "; fix: pass an experiment root" in err


def test_the_exit_code_constants_are_the_documented_ones() -> None:
    doc = (SCHEMA.parent / "status.md").read_text()
    for action in (status_cli.HAND_OFF, status_cli.STOP_FIX, status_cli.HAND_BACK, status_cli.STOP_BUDGET,
                   status_cli.RERUN, status_cli.RUN_FIRST, status_cli.PATCH_RERUN):
        assert f"| `{action}` |" in doc
    assert json.loads(SCHEMA.read_text())["properties"]["next_action"]["properties"]["action"]["enum"] == [
        status_cli.HAND_OFF, status_cli.STOP_FIX, status_cli.HAND_BACK, status_cli.STOP_BUDGET, status_cli.RERUN,
        status_cli.RUN_FIRST, status_cli.PATCH_RERUN]


def test_a_session_start_under_another_key_shows_the_wall_clock_as_unknown(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_synthetic_experiment(tmp_path, 1).exp_root
    manifest = root / "manifest.yaml"
    manifest.write_text('exp_id: "x"\nsession: {opened: "2026-06-01T12:00:00Z"}\n')
    workload = root / "user_workload.yaml"
    workload.write_text(workload.read_text().replace("wall_clock_hours: null", "wall_clock_hours: 24"))
    _, out, _ = _run(capsys, str(root))
    assert "wall clock unknown of 24 h" in out
    _, doc = _json(capsys, root)
    assert doc["budgets"]["wall_clock_hours"]["counted"][0].startswith("unknown: <EXP_ROOT>/manifest.yaml has no")
