"""The experiment page (deploy_suite.reports.experiment_page) and the DGD diff it shows (deploy_suite.reports.dgd_diff),
from experiment trees on disk only; the iteration page saying each thing once (deploy_suite.reports.iteration)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from deploy_suite import cli
from deploy_suite.fixtures.experiments.make_experiment import SAMPLE_ROOT
from deploy_suite.fixtures.experiments.synthetic import write_synthetic_experiment
from deploy_suite.model.dgd import load_dgd, parse_dgd
from deploy_suite.procedure.registry import STEP_NAMES
from deploy_suite.record import ledger
from deploy_suite.reports import dgd_diff, experiment_page
from deploy_suite.reports import iteration as report

POISON = "<script>alert('x')</script>"


def _page(exp_root: Path) -> str:
    return experiment_page.write(exp_root).read_text(encoding="utf-8")


# --------------------------------------------------------------------------------- the diff


def test_the_sample_candidate_differs_by_one_engine_argument_and_keeps_its_pinned_knobs() -> None:
    before = load_dgd(SAMPLE_ROOT / "inputs" / "user_provided_dgd.yaml")
    after = load_dgd(SAMPLE_ROOT / "candidates" / "iter-001" / "deploy-draft.yaml")
    change = dgd_diff.diff(before, after, ["precision", "framework", "not-a-knob"])
    assert [(c.name, c.status) for c in change.components] == [("VllmDecodeWorker", "changed")]
    assert [(c.what, c.kind, c.before, c.after) for c in change.components[0].changes] == [
        ("--max-num-seqs", "added", None, "64")]
    assert change.knobs == () and change.pinned_unchanged == ("framework", "precision")


_TWO = """apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata: {{name: {name}}}
spec:
  services:
    Worker:
      componentType: worker
      replicas: {replicas}
      resources: {{limits: {{gpu: "{gpus}"}}}}
      extraPodSpec:
        mainContainer:
          image: {image}
          env: [{env}]
          command: [python3, -m, dynamo.vllm, --tensor-parallel-size, "{tp}", --enforce-eager{extra}]
{more}"""
_PLANNER = """    Planner:
      componentType: planner
      replicas: 1
      extraPodSpec: {mainContainer: {image: planner:1, command: [python3, -m, dynamo.planner]}}
"""


def test_diff_reads_replicas_gpus_image_arguments_env_and_components_as_a_reviewer_does() -> None:
    token = "hf_abcdefghijklmnopqrstuvwxyz012345"  # an inline credential: never shown
    before = parse_dgd(_TWO.format(name="a", replicas=1, gpus=1, image="vllm:1", tp=1, extra="", more=_PLANNER,
                                   env=f"{{name: MODE, value: a}}, {{name: HF_TOKEN, value: {token}}}"))
    after = parse_dgd(_TWO.format(name="b", replicas=2, gpus=2, image="vllm:2", tp=2, more="",
                                  extra=f", --kv=fp8, --api-key, {token}",
                                  env="{name: MODE, value: b}, {name: NEW, value: x}"))
    change = dgd_diff.diff(before, after, ["tensor_parallel_size"])
    worker = {c.what: (c.before, c.after) for c in change.components[0].changes}
    assert worker == {"replicas": ("1", "2"), "GPUs per pod": ("1", "2"), "image": ("vllm:1", "vllm:2"),
                      "--tensor-parallel-size": ("1", "2"), "--kv": (None, "fp8"), "--api-key": (None, "[REDACTED]"),
                      "env MODE": ("a", "b"),
                      "env HF_TOKEN": ("[REDACTED]", None), "env NEW": (None, "x")}
    assert change.components[1].name == "Planner" and change.components[1].status == "removed"
    assert change.renamed == ("a", "b")
    pinned = {k.name: k.pinned for k in change.knobs}
    assert pinned["tensor_parallel_size"] is True and pinned["replicas"] is False


@pytest.mark.parametrize(("tokens", "expected"), [
    (["python3", "-m", "x", "--a", "1", "--b=2", "--c"], {dgd_diff.PROGRAM: "python3 -m x", "--a": "1", "--b": "2",
                                                          "--c": None}),
    (["--n", "-1", "--a", "1", "--a", "3"], {"--n": "-1", "--a": "3"}),
])
def test_flag_pairs_reads_a_command_line_as_argparse_would(tokens: list[str], expected: dict[str, str | None]) -> None:
    assert dgd_diff.flag_pairs(tokens) == expected


# --------------------------------------------------------------------------------- the page


def test_every_iteration_has_a_row_every_later_one_a_change_and_retires_are_on_the_timeline(tmp_path: Path) -> None:
    exp = write_synthetic_experiment(tmp_path, 6)
    (exp.exp_root / "artifacts" / "deploy-iter-003" / "applied_manifests" / "deploy.yaml").unlink()
    page = _page(exp.exp_root)
    rows = re.findall(r'<tr class="dsr-iter" id="iter-(\d+)"', page)
    assert rows == [str(i) for i in range(6)]
    changes = re.findall(r'<section class="dsr-change" id="change-(\d+)"', page)
    assert changes == ["1", "2", "3", "4", "5"]
    # Iteration 2 against 1: the worker's replicas and --max-num-seqs moved; 3's copy is gone (archived
    # without it), so 3 and 4 are not compared, saying why.
    two = page.split('id="change-2"')[1].split("</section>")[0]
    assert "--max-num-seqs" in two and "replicas" in two and "framework, precision" in two
    for n in (3, 4):
        assert "not compared" in page.split(f'id="change-{n}"')[1].split("</section>")[0]
    # Iteration 0 was retired by iteration 1's step 3 (ready, then the next run); failed 1 was torn down by policy.
    assert "retired by deploy-iter-001" in page and page.count('class="dsr-retire"') >= 2
    assert page.count('class="dsr-hold"') == 5  # every iteration that got past step 2 waited once
    # Budgets against the grants of user_workload.yaml: 2 failed deploys of 40 (iterations 1 and 5).
    assert "2 of 40 failed deploy(s)" in page and "of 400 GPU-h" in page
    # The top line: the last iteration (5, failed) has no blocker; its next action is named.
    top = page.split('id="dsr-top">')[1].split("</div>")[0]
    assert "no blocker" in top and "deploy-iter-005" in top
    # Self-contained: no script, no external resource; prints on A4.
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "@page{size:A4" in page


def test_a_ledger_holding_script_in_every_string_renders_it_as_text(tmp_path: Path) -> None:
    exp = write_synthetic_experiment(tmp_path, 5, poison=POISON)
    page = _page(exp.exp_root)
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    for path in (exp.exp_root / "artifacts").glob("*/deployment_ledger.json"):
        text = report.render(json.loads(path.read_text()))
        assert "<script" not in text.lower() and "&lt;script&gt;" in text


def test_an_old_ledger_without_the_newer_fields_still_gets_its_row(tmp_path: Path) -> None:
    root = tmp_path / "runs" / "old"
    deploy = root / "artifacts" / "deploy-iter-000"
    deploy.mkdir(parents=True)
    # Written before allocations, applied_dgd, budget, teardown, smoke timings and step times existed.
    (deploy / ledger.LEDGER_NAME).write_text(json.dumps({
        "deploy_id": "deploy-iter-000", "iteration": 0, "status": "ready", "dgd_name": "old-agg",
        "allocated_at": "2026-01-01T00:00:00Z", "torn_down_at": None, "gpus_requested": 2,
        "smoke": {"success": 1}, "steps": [{"name": "step1_inputs", "outcome": "passed"}]}))
    page = _page(root)
    assert 'id="iter-0"' in page and "old-agg" in page and "live" in page


def test_a_hundred_iterations_stay_small(tmp_path: Path) -> None:
    exp = write_synthetic_experiment(tmp_path, 100)
    size = experiment_page.write(exp.exp_root).stat().st_size
    assert size < 5_000_000
    assert _page(exp.exp_root).count('class="dsr-iter"') == 100


def test_the_command_line_takes_an_experiment_root_or_a_ledger(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    exp = write_synthetic_experiment(tmp_path, 2)
    assert cli.main(["report", str(exp.exp_root)]) == 0
    default = exp.exp_root / "artifacts" / "experiment.html"
    assert capsys.readouterr().out.strip() == str(default) and default.is_file()
    out = tmp_path / "elsewhere" / "page.html"
    assert cli.main(["report", str(exp.exp_root), "-o", str(out)]) == 0
    # Links lead from where the page is to the experiment's files.
    assert 'href="../runs/20260601T120000Z-synthetic/artifacts/deploy-iter-000/deployment_ledger.json"' in \
        out.read_text()
    single = tmp_path / "one.html"
    ledger_path = exp.exp_root / "artifacts" / "deploy-iter-000" / ledger.LEDGER_NAME
    assert cli.main(["report", str(ledger_path), "-o", str(single)]) == 0 and "deploy-iter-000" in single.read_text()
    assert cli.main(["report", str(tmp_path / "elsewhere")]) == 2  # a directory that is no experiment


# --------------------------------------------------------------------------------- the iteration page


def test_a_blocked_run_says_its_reason_once_and_each_skipped_step_names_the_blocker() -> None:
    data = ledger.new_document(deploy_id="deploy-iter-000", iteration=0, provenance="user-interviewer",
                               step_names=STEP_NAMES, now="2026-01-01T00:00:00Z")
    reason = "namespace dynamo-demo not found; fix: create it"
    data["steps"][1].update(outcome="blocked", reason=reason)
    for step in data["steps"][2:]:
        step.update(outcome="skipped", reason=f"blocked by step2_validate: {reason}", evidence={"why": "x"})
    data["blockers"] = [{"step": "step2_validate", "class": "namespace", "message": "namespace dynamo-demo not found",
                         "fix": "create it"}]
    data["status"] = "blocked"
    page = report.report_html(data)
    assert page.count("namespace dynamo-demo not found") == 1  # the blockers box at the top
    assert page.count("blocked by step2_validate") == 2 * 5  # each skipped step's line and card, nothing more
    assert report.STOPPED_HERE in page


def test_a_failed_run_without_a_blocker_shows_its_reason_at_the_top() -> None:
    data = ledger.new_document(deploy_id="deploy-iter-000", iteration=0, provenance="user-interviewer",
                               step_names=STEP_NAMES, now="2026-01-01T00:00:00Z")
    data["steps"][5].update(outcome="failed", reason="crash loop of VllmDecodeWorker")
    data["status"] = "failed"
    page = report.report_html(data)
    assert page.count("crash loop of VllmDecodeWorker") == 1 and "stopped by step6_readiness" in page


def test_a_budget_spent_since_the_last_run_is_the_experiments_blocker_at_the_top(tmp_path: Path) -> None:
    exp = write_synthetic_experiment(tmp_path, 6)  # failed iterations 1 and 5: two failed deploys
    (exp.exp_root / "user_workload.yaml").write_text("budgets: {max_failed_deploys: 2}\n")
    page = _page(exp.exp_root)
    top = page.split('id="dsr-top">')[1].split("</div>")[0]
    assert "blockers (1)" in top and "budget: failed-deploy budget spent: 2 failed deploy(s)" in top
    assert "2 of 2 failed deploy(s) (spent)" in page
