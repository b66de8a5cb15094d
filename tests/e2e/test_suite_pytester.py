"""The deployment suite as a user runs it: a pytest subprocess on a copy of the sample experiment.

Each run gets ``--kubeconfig`` pointing at a local TCP listener started here, and every test
asserts the listener saw no connection: step 1 and every refusal happen without any request to a
cluster. The suite's plugins come from the installed package's ``pytest11`` entry point; the last
section runs pytest as a user types it, ``--opt PATH`` and ``--opt=PATH``, from the checkout root
and from another directory.

With only step 1 implemented a good run ends with status ``in_progress`` and ``current_step``
naming the next step (``step2_validate``), exit status 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_suite.fixtures.experiments.make_experiment import Experiment, make_experiment, stage_candidate
from deploy_suite.record import ledger
from deploy_suite.reports import iteration as report
from tests.support import Listener

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = REPO / "pyproject.toml"
STEPS = REPO / "deploy_suite" / "steps"
# These tests exercise step 1 and the machinery without a cluster (a listener kubeconfig must see no
# connection): only step 1's module is collected, so later steps stay not_run. Full runs against the
# offline cluster live in test_deploy_offline.py.
STEP1 = STEPS / "test_step1_inputs.py"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


@pytest.fixture
def kubeconfig(tmp_path: Path, listener: Listener) -> Path:
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "somewhere-else",
        "clusters": [{"name": "demo", "cluster": {"server": f"https://127.0.0.1:{listener.port}",
                                                  "insecure-skip-tls-verify": True}}],
        "users": [{"name": "demo", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": "offline-demo", "context": {"cluster": "demo", "user": "demo"}},
                     {"name": "somewhere-else", "context": {"cluster": "demo", "user": "demo"}}],
    }))
    return path


@pytest.fixture
def exp(tmp_path: Path) -> Experiment:
    return make_experiment(tmp_path / "scratch")


@dataclass
class Suite:
    pytester: pytest.Pytester
    exp: Experiment
    kubeconfig: Path
    listener: Listener
    env: dict[str, str] = field(default_factory=dict)

    @property
    def reports(self) -> Path:
        return self.pytester.path / "reports"

    @property
    def exp_reports(self) -> Path:
        """This experiment's folder of reports (one per experiment: they never overwrite each other)."""
        return self.reports / self.exp.exp_root.name

    def run(self, *args: str, iteration: int | None = 0, steps: Path = STEP1,
            handoff: Path | None = None) -> pytest.RunResult:
        argv = ["-c", str(PYPROJECT), f"--rootdir={REPO}", str(steps),
                f"--reports-dir={self.reports}", f"--kubeconfig={self.kubeconfig}"]
        if iteration is not None:
            argv += [f"--iter={iteration}", f"--handoff={handoff or self.exp.handoff(iteration)}"]
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            return self.pytester.runpytest_subprocess(*argv, *args, timeout=180)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def ledger_path(self, iteration: int = 0) -> Path:
        return self.exp.exp_root / "artifacts" / f"deploy-iter-{iteration:03d}" / ledger.LEDGER_NAME

    def ledger(self, iteration: int = 0) -> dict[str, Any]:
        data = json.loads(self.ledger_path(iteration).read_text())
        ledger.validate(data)  # every ledger a test produces is checked against the schema
        return data


@pytest.fixture
def suite(pytester: pytest.Pytester, exp: Experiment, kubeconfig: Path, listener: Listener) -> Iterator[Suite]:
    s = Suite(pytester, exp, kubeconfig, listener)
    yield s
    assert listener.connections == 0, "the suite contacted the cluster"


def output(result: pytest.RunResult) -> str:
    return "\n".join(result.outlines + result.errlines)


def junit_cases(path: Path) -> list[ET.Element]:
    return list(ET.parse(path).getroot().iter("testcase"))


# --- good runs -------------------------------------------------------------------------------


def test_iteration0_runs_step1_and_stops_in_progress_at_step2(suite: Suite):
    sources = {p: sha(p) for p in suite.exp.exp_root.rglob("*") if p.is_file()}
    result = suite.run()
    assert result.ret == 0, output(result)
    data = suite.ledger()
    assert (data["status"], data["current_step"]) == ("in_progress", "step2_validate")
    assert [s["outcome"] for s in data["steps"]] == ["passed"] + ["not_run"] * 6
    assert (data["kube_context"], data["namespace"], data["dgd_name"]) == ("offline-demo", "dynamo-demo", "demo-agg")
    assert data["user_workload"] == {"path": "user_workload.yaml", "sha256": suite.exp.workload_sha256}
    assert data["source_dgd"] == {"path": "inputs/user_provided_dgd.yaml", "sha256": suite.exp.dgd_sha256}
    assert [m["type"] for m in data["applied_manifests"]] == ["deploy", "model-cache", "model-download"]
    assert data["session"]["finished_at"] is not None and data["session"]["exit_status"] == 0
    assert data["commands"] == []
    deploy_root = suite.exp.exp_root / "artifacts" / "deploy-iter-000"
    assert sorted(p.name for p in deploy_root.iterdir()) == ["applied_manifests", "deploy-iter-000.html",
                                                             "deployment_ledger.json"]
    assert {p: sha(p) for p in sources} == sources  # handed-off files untouched
    # Reports: self-contained HTML with the ledger summary, JUnit with one case per step run.
    html = (suite.exp_reports / "deploy-iter-000.html").read_text()
    assert "deploy-suite-summary" in html and "in_progress" in html and "step2_validate" in html
    cases = junit_cases(suite.exp_reports / "deploy-iter-000.xml")
    assert [c.get("name") for c in cases] == ["test_step1_inputs"]
    props = {p.get("name"): p.get("value") for p in cases[0].iter("property")}
    assert props == {"step": "step1_inputs", "outcome": "passed"}
    text = output(result)
    assert "deploy-iter-000: in_progress (current step: step2_validate)" in text
    assert f"ledger: {suite.ledger_path()}" in text
    exp_id = suite.exp.exp_root.name
    assert f"report: reports/{exp_id}/deploy-iter-000.html" in text
    assert f"junit: reports/{exp_id}/deploy-iter-000.xml" in text
    # The ledger's page beside it and the experiment's page, both named in the last lines.
    assert "iteration page: " in text and "experiment page: " in text
    page = (suite.exp.exp_root / "artifacts" / "experiment.html").read_text()
    assert 'data-iteration="0"' in page


def test_two_experiments_from_one_checkout_keep_both_sets_of_pages(suite: Suite, tmp_path: Path):
    assert suite.run().ret == 0, "first experiment"
    first_page = (suite.exp_reports / "deploy-iter-000.html").read_bytes()
    other = Suite(suite.pytester, make_experiment(tmp_path / "other", "20260602T090000Z-other"), suite.kubeconfig,
                  suite.listener)
    assert other.run().ret == 0, "second experiment"
    # Same iteration, same reports directory: each experiment keeps its own folder, untouched by the other.
    assert sorted(p.name for p in suite.reports.iterdir()) == sorted([suite.exp.exp_root.name,
                                                                      other.exp.exp_root.name])
    assert (suite.exp_reports / "deploy-iter-000.html").read_bytes() == first_page
    assert (other.exp_reports / "deploy-iter-000.html").is_file()
    for exp in (suite.exp, other.exp):
        assert (exp.exp_root / "artifacts" / "experiment.html").is_file()
        assert (exp.exp_root / "artifacts" / "deploy-iter-000" / "deploy-iter-000.html").is_file()


def test_old_ledger_can_be_rerendered_without_pytest(suite: Suite, tmp_path: Path):
    assert suite.run().ret == 0
    out = tmp_path / "page.html"
    assert report.main([str(suite.ledger_path()), "-o", str(out)]) == 0
    page = out.read_text()
    assert "deploy-iter-000" in page and "demo-agg" in page and "next action" in page


def test_rerun_of_the_same_candidate_resumes_in_the_same_directory(suite: Suite):
    assert suite.run().ret == 0
    first = suite.ledger()
    assert suite.run().ret == 0
    second = suite.ledger()
    assert second["created_at"] == first["created_at"]
    assert len(second["resumes"]) == 1
    assert second["resumes"][0]["previous_status"] == "in_progress"
    assert second["resumes"][0]["kept"] == ["deploy.yaml", "model-cache.yaml", "model-download.yaml"]
    assert second["steps"][0]["evidence"]["directory"] == "resumed"


def test_iteration1_reads_the_previous_ledger_and_refuses_a_different_candidate_later(suite: Suite):
    assert suite.run().ret == 0
    stage_candidate(suite.exp.exp_root, 1)
    result = suite.run(iteration=1)
    assert result.ret == 0, output(result)
    data = suite.ledger(1)
    assert data["provenance"] == "hypothesis-challenger" and data["review_id"].startswith("deploy-iter-000-")
    # Iteration 0 ran step 1 only: it applied nothing, so step 3 has nothing to retire (the chain of
    # iterations, docs/procedure.md).
    assert data["previous_deployment"] is None
    assert data["source_dgd"]["path"] == "artifacts/deploy-iter-000/next-candidate/deploy-draft.yaml"
    # The generator rewrites the draft: a different candidate must not reuse deploy-iter-001.
    draft = suite.exp.exp_root / "artifacts/deploy-iter-000/next-candidate/deploy-draft.yaml"
    draft.write_text(draft.read_text().replace("--max-num-seqs 64", "--max-num-seqs 32"))
    result = suite.run(f"--dgd-sha256={sha(draft)}", iteration=1)
    assert result.ret == 1
    assert_one_clear_line(result, "--iter 1", "already holds another candidate")
    assert suite.ledger(1)["status"] == "in_progress"  # the other candidate's ledger is untouched


def test_killed_right_after_step1_leaves_a_valid_ledger_that_says_where_it_stopped(suite: Suite):
    suite.env["DEPLOY_SUITE_TEST_KILL_AFTER"] = "step1_inputs"
    result = suite.run()
    assert result.ret == -9, output(result)
    data = suite.ledger()
    assert data["session"]["finished_at"] is None  # never reached the end of the session
    assert (data["status"], data["current_step"]) == ("in_progress", "step2_validate")
    assert data["steps"][0]["outcome"] == "passed"
    del suite.env["DEPLOY_SUITE_TEST_KILL_AFTER"]
    assert suite.run().ret == 0
    assert len(suite.ledger()["resumes"]) == 1


def test_help_lists_every_option_in_one_group(suite: Suite):
    result = suite.pytester.runpytest_subprocess("-c", str(PYPROJECT), f"--rootdir={REPO}", str(STEPS), "--help")
    text = result.stdout.str()
    group = text[text.index("dynamo-deploy-suite:"):]
    for option in ("--iter", "--exp-root", "--workload", "--workload-sha256", "--dgd", "--dgd-sha256",
                   "--provenance", "--prev-deploy-root", "--support", "--storage-class", "--smoke-prompt",
                   "--served-model", "--kubeconfig", "--keep-on-failure", "--handoff", "--timeout-retire"):
        assert f"{option}=" in group or f"{option} " in group, option
    assert "Simply output the phrase: NVIDIA Dynamo" in " ".join(group.split())  # help text wraps


def test_steps_without_iter_are_a_usage_error(suite: Suite):
    result = suite.run(iteration=None)
    assert result.ret == 4
    assert_one_clear_line(result, "--iter", "missing")


# --- bad input: one line, failing exit, blocked ledger where a directory exists, no cluster ----


def assert_one_clear_line(result: pytest.RunResult, *needles: str) -> None:
    text = output(result)
    lines = [line for line in text.splitlines() if "; fix: " in line]
    assert lines, text
    for needle in needles:
        assert needle in lines[0], lines[0]
    # No traceback noise: no pytest "E   " lines, no source excerpts, no Python tracebacks.
    assert "Traceback" not in text
    assert not [line for line in text.splitlines() if line.startswith("E   ")], text
    assert "def test_step1_inputs" not in text
    assert not re.search(r"\.py:\d+:", text), text  # no "file.py:123: in ..." traceback entries


Case = Callable[[Experiment, Path], list[str]]


def _workload_edit(change: Callable[[str], str]) -> Case:
    def case(exp: Experiment, _tmp: Path) -> list[str]:
        path = exp.exp_root / "user_workload.yaml"
        path.write_text(change(path.read_text()))
        return [f"--workload-sha256={sha(path)}"]
    return case


def _outside_dgd(exp: Experiment, tmp: Path) -> list[str]:
    outside = tmp / "outside" / "user_provided_dgd.yaml"
    outside.parent.mkdir()
    shutil.copy(exp.exp_root / "inputs/user_provided_dgd.yaml", outside)
    return [f"--dgd={outside}"]


def _symlink_dgd(exp: Experiment, tmp: Path) -> list[str]:
    outside = tmp / "outside.yaml"
    shutil.copy(exp.exp_root / "inputs/user_provided_dgd.yaml", outside)
    (exp.exp_root / "inputs" / "linked.yaml").symlink_to(outside)
    return [f"--dgd={exp.exp_root / 'inputs' / 'linked.yaml'}"]


def _variants(exp: Experiment, _tmp: Path) -> list[str]:
    args = [f"--support=model-cache={exp.exp_root / 'inputs/model-cache.yaml'}"]
    for name in ("model-download-fp8.yaml", "model-download-nvfp4.yaml"):
        shutil.copy(exp.exp_root / "inputs/model-download.yaml", exp.exp_root / "inputs" / name)
        args.append(f"--support=model-download={exp.exp_root / 'inputs' / name}")
    return args


ITER1 = ["--iter=1", "--provenance=hypothesis-challenger"]
BAD_INPUT: dict[str, tuple[Case, int, list[str]]] = {
    "missing-file": (lambda e, t: [f"--workload={e.exp_root / 'missing.yaml'}"], 1,
                     ["--workload missing.yaml", "file not found"]),
    "missing-handoff": (lambda e, t: [f"--handoff={t / 'nope.yaml'}"], 4, ["--handoff", "file not found"]),
    "yaml-syntax-error": (_workload_edit(lambda s: s + "notes: [unclosed\n"), 1,
                          ["--workload user_workload.yaml", "YAML syntax error at line"]),
    "several-documents": (_workload_edit(lambda s: s + "---\nextra: 1\n"), 1, ["holds 2 YAML documents"]),
    "wrong-field-type": (_workload_edit(lambda s: s.replace("namespace: dynamo-demo", "namespace: 42")), 1,
                         ["field kubernetes.namespace", "got int"]),
    "missing-required-field": (_workload_edit(lambda s: s.replace("  kube_context: offline-demo\n", "")), 1,
                               ["field kubernetes.kube_context", "missing"]),
    "non-hex-hash": (lambda e, t: ["--workload-sha256=" + "g" * 64], 4, ["--workload-sha256", "not a SHA-256"]),
    "wrong-length-hash": (lambda e, t: ["--dgd-sha256=abc123"], 4, ["--dgd-sha256", "got 6"]),
    "hash-mismatch": (lambda e, t: ["--dgd-sha256=" + "0" * 64], 1,
                      ["--dgd inputs/user_provided_dgd.yaml", "SHA-256 is"]),
    "path-outside-exp-root": (_outside_dgd, 1, ["--dgd", "outside EXP_ROOT"]),
    "symlink-escaping-exp-root": (_symlink_dgd, 1, ["--dgd inputs/linked.yaml", "symlink", "outside EXP_ROOT"]),
    "unknown-provenance": (lambda e, t: ["--provenance=perf-analyzer"], 4, ["--provenance", "unknown provenance"]),
    "provenance-not-matching-iteration": (lambda e, t: ["--provenance=hypothesis-challenger"], 4,
                                          ["--provenance", "does not match iteration 0"]),
    "negative-iteration": (lambda e, t: ["--iter=-1"], 4, ["--iter", "negative"]),
    "missing-previous-root-option": (lambda e, t: ITER1, 4, ["--prev-deploy-root", "missing"]),
    "missing-previous-root": (lambda e, t: [*ITER1, f"--prev-deploy-root={e.exp_root / 'artifacts/deploy-iter-000'}"],
                              1, ["--prev-deploy-root", "directory not found"]),
    "missing-previous-ledger": (
        lambda e, t: [*ITER1, f"--prev-deploy-root={_mkdir(e.exp_root / 'artifacts/deploy-iter-000')}"],
        1, ["--prev-deploy-root ledger", "file not found"]),
    "ambiguous-download-variants": (_variants, 1, ["--support model-download", "cannot tell which one"]),
}


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


@pytest.mark.parametrize("name", list(BAD_INPUT))
def test_bad_input_is_one_line_a_failing_exit_and_no_cluster_request(suite: Suite, tmp_path: Path, name: str):
    make, exit_code, needles = BAD_INPUT[name]
    args = make(suite.exp, tmp_path)
    result = suite.run(*args)
    assert result.ret == exit_code, output(result)
    assert_one_clear_line(result, *needles)
    assert not (suite.exp.exp_root / "artifacts" / "deploy-iter-000" / ledger.LEDGER_NAME).exists()
    assert not (suite.exp.exp_root / "artifacts" / "deploy-iter-001").exists()
    if exit_code == 1:
        assert "ledger: not written (refused before the deployment directory existed)" in output(result)


def test_bad_input_on_a_rerun_marks_the_existing_ledger_blocked(suite: Suite):
    assert suite.run().ret == 0
    result = suite.run("--workload-sha256=" + "1" * 64)
    assert result.ret == 1
    assert_one_clear_line(result, "--workload user_workload.yaml", "SHA-256 is")
    data = suite.ledger()
    assert (data["status"], data["current_step"]) == ("blocked", "step1_inputs")
    assert data["blockers"][0]["step"] == "step1_inputs" and data["blockers"][0]["class"] == "input"
    assert data["resumes"][0]["previous_status"] == "in_progress"
    cases = junit_cases(suite.exp_reports / "deploy-iter-000.xml")
    assert len(cases) == 1 and cases[0].find("failure") is not None


# --- the step machinery, with stand-in modules for steps 2-4 ------------------------------------


def _steps_dir(pytester: pytest.Pytester, modules: dict[str, str]) -> Path:
    steps = pytester.mkdir("steps")
    shutil.copy(STEPS / "test_step1_inputs.py", steps / "test_step1_inputs.py")
    for name, body in modules.items():
        (steps / f"test_{name}.py").write_text(body)
    return steps


def test_a_blocking_step_skips_every_later_step_with_its_reason(suite: Suite):
    steps = _steps_dir(suite.pytester, {
        "step2_validate": (
            "def test_step2_validate(run, kube, namespace, manifests):\n"
            "    assert kube.context == 'offline-demo' and namespace == 'dynamo-demo'\n"
            "    assert sorted(manifests) == ['deploy', 'model-cache', 'model-download']\n"
            "    run.recorder.add_evidence(namespace='exists')\n"),
        "step3_retire_previous": (
            "from deploy_suite.errors import StepBlocked\n"
            "from deploy_suite.vocab import BlockerClass\n"
            "def test_step3_retire_previous(run):\n"
            "    raise StepBlocked(BlockerClass.SECRET, 'secret hf-token-secret not found in dynamo-demo',\n"
            "                      'create it (by name)')\n"),
        "step4_support_manifests": "def test_step4_support_manifests():\n    raise AssertionError('ran')\n",
    })
    result = suite.run(steps=steps)
    assert result.ret == 1, output(result)
    data = suite.ledger()
    assert [s["outcome"] for s in data["steps"]] == ["passed", "passed", "blocked", "skipped"] + ["not_run"] * 3
    assert data["steps"][1]["evidence"] == {"namespace": "exists"}
    assert data["steps"][3]["reason"] == (
        "blocked by step3_retire_previous: secret hf-token-secret not found in dynamo-demo; fix: create it (by name)")
    assert (data["status"], data["current_step"]) == ("blocked", "step3_retire_previous")
    assert data["blockers"] == [{"step": "step3_retire_previous", "class": "secret",
                                 "message": "secret hf-token-secret not found in dynamo-demo",
                                 "fix": "create it (by name)"}]
    assert_one_clear_line(result, "secret hf-token-secret not found")
    cases = junit_cases(suite.exp_reports / "deploy-iter-000.xml")
    assert [c.get("name") for c in cases] == [
        "test_step1_inputs", "test_step2_validate", "test_step3_retire_previous", "test_step4_support_manifests"]
    # The skipped step names the step that stopped the run; the reason is said at the top, once.
    assert cases[3].find("skipped").get("message") == "blocked by step3_retire_previous"
    html = (suite.exp_reports / "deploy-iter-000.html").read_text()
    # Twice: the summary's blockers box and the blocked step's own row; no skipped row repeats it.
    assert html.count("secret hf-token-secret not found") == 2


def test_a_failing_step_blocks_the_ledger_and_a_missing_step_blocks_the_next(suite: Suite):
    steps = _steps_dir(suite.pytester, {
        "step2_validate": "def test_step2_validate():\n    assert 1 == 2, 'dry-run rejected'\n",
        "step4_support_manifests": "def test_step4_support_manifests():\n    pass\n",
    })
    result = suite.run(steps=steps)
    assert result.ret == 1
    data = suite.ledger()
    # An error no judge classified is not the candidate's failed attempt: blocked, class error.
    assert data["status"] == "blocked" and data["current_step"] == "step2_validate"
    assert data["failed_attempts"] == [] and data["blockers"][0]["class"] == "error"
    assert data["blockers"][0]["message"].startswith("AssertionError: dry-run rejected")
    assert data["diagnostics"][0]["error"].startswith("AssertionError: dry-run rejected")
    assert data["steps"][3]["reason"].startswith("blocked by step2_validate: AssertionError")

    (steps / "test_step2_validate.py").unlink()  # now step 2 is missing: step 4 must not run
    result = suite.run(steps=steps)
    data = suite.ledger()
    assert data["steps"][3]["outcome"] == "skipped"
    assert data["steps"][3]["reason"] == (
        "blocked by step2_validate: not run (its test module is missing or was deselected)")


# --- as a user types it: either spelling of a path option, from any directory --------------------


def user_args(spelling: str, options: list[tuple[str, object]]) -> list[str]:
    """``--opt PATH`` (as in every pytest plugin's docs) or ``--opt=PATH``."""
    if spelling == "space":
        return [str(part) for option, value in options for part in (option, value)]
    return [f"{option}={value}" for option, value in options]


def run_as_a_user(cwd: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """pytest started in ``cwd`` with nothing but the user's arguments: no -c, no --rootdir, no test path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=180, check=False)


def handed_off(suite: Suite, workload_sha256: str | None = None) -> list[tuple[str, object]]:
    """The handoff's values as command-line options, every path absolute (no --handoff file)."""
    root = suite.exp.exp_root
    return [("--iter", 0), ("--exp-root", root), ("--workload", root / "user_workload.yaml"),
            ("--workload-sha256", workload_sha256 or suite.exp.workload_sha256),
            ("--dgd", root / "inputs/user_provided_dgd.yaml"), ("--dgd-sha256", suite.exp.dgd_sha256),
            ("--provenance", "user-interviewer"), ("--support", f"model-cache={root / 'inputs/model-cache.yaml'}"),
            ("--support", f"model-download={root / 'inputs/model-download.yaml'}"),
            ("--kubeconfig", suite.kubeconfig), ("--reports-dir", suite.reports)]


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A directory outside the checkout holding a test file of its own, which a deployment must not collect."""
    where = tmp_path / "elsewhere"
    where.mkdir()
    (where / "test_not_a_step.py").write_text("def test_not_a_step():\n    raise AssertionError('collected')\n")
    return where


@pytest.mark.parametrize("where", ["checkout", "elsewhere"])
@pytest.mark.parametrize("spelling", ["space", "equals"])
def test_path_options_work_in_either_spelling_from_any_directory(suite: Suite, elsewhere: Path, spelling: str,
                                                                 where: str):
    cwd = REPO if where == "checkout" else elsewhere
    before = sorted(p.name for p in suite.exp.exp_root.iterdir())
    # -k keeps steps 2-7 (which talk to a cluster) deselected: they are collected, then not run.
    result = run_as_a_user(cwd, [*user_args(spelling, handed_off(suite)), "-k", "step1"])
    text = result.stdout + result.stderr
    assert result.returncode == 0, text
    assert "1 passed, 6 deselected" in text  # the installed package's seven steps, nothing of cwd
    assert "deploy_suite/steps/test_step1_inputs.py" in text
    data = suite.ledger()
    assert (data["status"], data["current_step"]) == ("in_progress", "step2_validate")
    assert data["settings"]["kubeconfig_given"] is True
    cases = junit_cases(suite.exp_reports / "deploy-iter-000.xml")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("deploy_suite.steps.test_step1_inputs", "test_step1_inputs")]
    # EXP_ROOT gains the deployment directory only (no report, no .pytest_cache); cwd gains nothing.
    assert sorted(p.name for p in suite.exp.exp_root.iterdir()) == sorted([*before, "artifacts"])
    assert sorted(p.name for p in elsewhere.iterdir()) == ["test_not_a_step.py"]


@pytest.mark.parametrize("where", ["checkout", "elsewhere"])
def test_bad_input_written_with_spaces_is_one_line_from_any_directory(suite: Suite, elsewhere: Path, where: str):
    cwd = REPO if where == "checkout" else elsewhere
    result = run_as_a_user(cwd, user_args("space", handed_off(suite, workload_sha256="1" * 64)))
    text = result.stdout + result.stderr
    assert result.returncode == 1, text
    lines = [line for line in text.splitlines() if "; fix: " in line]
    assert lines and "--workload user_workload.yaml" in lines[0] and "SHA-256 is" in lines[0], text
    assert "Traceback" not in text
    # All seven steps collected from the installed package; every later one skipped as blocked.
    assert "1 failed, 6 skipped" in text or "6 skipped, 1 failed" in text, text
    assert not (suite.exp.exp_root / "artifacts").exists()


def test_a_deployment_run_loads_no_dev_only_plugin_and_no_cache(suite: Suite):
    steps = _steps_dir(suite.pytester, {"step2_validate": (
        "import sys\n"
        "def test_step2_validate(request):\n"
        "    plugins = request.config.pluginmanager\n"
        "    assert plugins.get_plugin('hypothesispytest') is None and 'hypothesis' not in sys.modules\n"
        "    assert plugins.get_plugin('cacheprovider') is None\n")})
    result = suite.run(steps=steps)
    assert result.ret == 0, output(result)
    assert [s["outcome"] for s in suite.ledger()["steps"][:2]] == ["passed", "passed"], output(result)
    assert not (suite.pytester.path / ".pytest_cache").exists()
