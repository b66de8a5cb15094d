"""Settings: command line over handoff file over documented defaults, judged before any file is read.

``build_settings`` opens only the handoff file (and checks the kubeconfig exists); everything else
is judged on the values alone, so these tests need no experiment on disk except where a fixture
copies the sample one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_suite.errors import InputError
from deploy_suite.fixtures.experiments.make_experiment import Experiment, make_experiment
from deploy_suite.procedure.settings import (
    DEFAULT_SMOKE_PROMPT,
    OPTION_KEYS,
    TIMEOUT_OPTIONS,
    SupportInput,
    Timeouts,
    build_settings,
    deploy_id,
)

SHA_A = "a" * 64
SHA_B = "b" * 64


@pytest.fixture
def exp(tmp_path: Path) -> Experiment:
    return make_experiment(tmp_path / "scratch")


def assert_one_line(error: InputError, *needles: str) -> None:
    text = str(error)
    assert "\n" not in text
    assert "; fix: " in text and error.fix
    for needle in needles:
        assert needle in text, text


def cli_for(exp: Experiment, **overrides: Any) -> dict[str, Any]:
    root = exp.exp_root
    values: dict[str, Any] = {
        "iteration": 0,
        "exp_root": str(root),
        "workload": str(root / "user_workload.yaml"),
        "workload_sha256": exp.workload_sha256,
        "dgd": str(root / "inputs" / "user_provided_dgd.yaml"),
        "dgd_sha256": exp.dgd_sha256,
        "provenance": "user-interviewer",
    }
    values.update(overrides)
    return values


def minimal_cli(**overrides: Any) -> dict[str, Any]:
    """Every required value, as relative paths (no file needs to exist for these)."""
    values: dict[str, Any] = {"iteration": 0, "provenance": "user-interviewer", "exp_root": "exp",
                              "workload": "exp/user_workload.yaml", "workload_sha256": SHA_A,
                              "dgd": "exp/dgd.yaml", "dgd_sha256": SHA_B}
    values.update(overrides)
    return values


def write_handoff(path: Path, **values: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def refused(cli: dict[str, Any], base: Path, handoff: Path | None = None) -> InputError:
    with pytest.raises(InputError) as info:
        build_settings(cli, invocation_dir=base, handoff_path=handoff)
    return info.value


# --- option-level refusals -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "needles"),
    [
        ({"iteration": -1}, ["--iter", "negative"]),
        ({"iteration": None}, ["--iter", "missing"]),
        ({"iteration": "two"}, ["--iter", "must be an integer"]),
        ({"iteration": 1.5}, ["--iter", "must be an integer"]),
        ({"provenance": "perf-analyzer"}, ["--provenance", "unknown provenance", "user-interviewer"]),
        ({"provenance": "hypothesis-challenger"}, ["--provenance", "does not match iteration 0"]),
        ({"iteration": 1, "prev_deploy_root": "x"}, ["--provenance", "does not match iteration 1"]),
        ({"provenance": None}, ["--provenance", "missing"]),
        ({"workload_sha256": "z" * 64}, ["--workload-sha256", "not a SHA-256"]),
        ({"dgd_sha256": "ab" * 31}, ["--dgd-sha256", "got 62"]),
        ({"dgd_sha256": None}, ["--dgd-sha256", "missing"]),
        ({"exp_root": None}, ["--exp-root", "missing"]),
        ({"workload": None}, ["--workload", "missing"]),
        ({"dgd": ""}, ["--dgd", "missing"]),
        ({"iteration": 1, "provenance": "hypothesis-challenger"}, ["--prev-deploy-root", "missing"]),
        ({"prev_deploy_root": "artifacts/deploy-iter-000"}, ["--prev-deploy-root", "iteration 0"]),
        ({"support": ["model-cache"]}, ["--support", "TYPE=PATH"]),
        ({"support": ["model-weights=x.yaml"]}, ["--support", "unknown support type"]),
        ({"support": ["model-cache="]}, ["--support", "model-cache has no path"]),
        ({"kubeconfig": "/nonexistent/kubeconfig"}, ["--kubeconfig", "not a file"]),
        ({"smoke_prompt": "  "}, ["--smoke-prompt", "empty"]),
        ({"retire_s": 0}, ["--timeout-retire", "positive"]),
        ({"readiness_s": "soon"}, ["--timeout-readiness", "positive number", "'soon'"]),
        ({"job_download_s": "-5"}, ["--timeout-job-download", "positive"]),
    ],
    ids=lambda v: str(v) if not isinstance(v, list) else None,
)
def test_bad_option_is_refused_with_one_line(exp: Experiment, overrides: dict[str, Any], needles: list[str]):
    assert_one_line(refused(cli_for(exp, **overrides), exp.exp_root), *needles)


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        (None, ["--handoff", "file not found"]),
        ("a: [1,\n", ["--handoff", "YAML syntax error at line"]),
        ("a: 1\n---\nb: 2\n", ["--handoff", "exactly one YAML mapping"]),
        ("- iteration: 0\n", ["--handoff", "exactly one YAML mapping"]),
        ("iteration: 0\nexp-rot: .\n", ["--handoff", "unknown key 'exp-rot'"]),
        ("dgd: a\ndgd: b\n", ["--handoff", "duplicate key 'dgd'"]),
        ("timeouts: {retire: 5}\n", ["timeouts.retire", "unknown timeout"]),
        ("timeouts: 5\n", ["handoff key 'timeouts'", "must be a mapping"]),
        ("timeouts: {retire_s: -1}\n", ["handoff key 'timeouts.retire_s'", "positive"]),
        ("timeouts: {smoke_reach_attempts: 2.5}\n", ["timeouts.smoke_reach_attempts", "whole number"]),
        ("timeouts: {readiness_s: true}\n", ["timeouts.readiness_s", "positive number"]),
        ("support: 5\n", ["--support (from handoff)", "a list or a mapping"]),
        ("keep_on_failure: 'yes'\n", ["--keep-on-failure (from handoff key 'keep_on_failure')", "true or false"]),
        ("storage_class: [a]\n", ["--storage-class (from handoff key 'storage_class')", "must be a string"]),
        ("review_id: 7\n", ["handoff key 'review_id'", "must be a string"]),
    ],
)
def test_bad_handoff_file_is_refused(exp: Experiment, tmp_path: Path, content: str | None, needles: list[str]):
    handoff = tmp_path / "handoff.yaml"
    if content is not None:
        handoff.write_text(content)
    assert_one_line(refused(cli_for(exp), tmp_path, handoff), *needles)


def test_a_bad_value_from_the_handoff_names_the_handoff_key(tmp_path: Path):
    handoff = write_handoff(tmp_path / "h.yaml", iteration="zero", provenance="user-interviewer")
    error = refused(minimal_cli(iteration=None, provenance=None), tmp_path, handoff)
    assert_one_line(error, "--iter (from handoff key 'iteration')", "must be an integer")


def test_oversized_handoff_is_refused_before_it_is_parsed(tmp_path: Path):
    handoff = tmp_path / "h.yaml"
    handoff.write_text("notes: '" + "x" * (1 << 20) + "'\n")
    assert_one_line(refused(minimal_cli(), tmp_path, handoff), "--handoff", "larger than")


# --- defaults --------------------------------------------------------------------------------


def test_settings_apply_documented_defaults(exp: Experiment):
    settings = build_settings(cli_for(exp), invocation_dir=exp.exp_root)
    assert settings.smoke_prompt == DEFAULT_SMOKE_PROMPT
    assert settings.timeouts == Timeouts()
    assert (settings.timeouts.job_download_s, settings.timeouts.job_validate_s, settings.timeouts.retire_s) == (
        6000, 3600, 600)
    assert (settings.timeouts.pvc_bound_s, settings.timeouts.readiness_s) == (600, 10800)
    assert settings.timeouts.readiness_no_progress_s == 900  # docs/procedure.md, step 6: 15 min without progress
    assert (settings.timeouts.smoke_reach_attempts, settings.timeouts.smoke_reach_interval_s) == (30, 2)
    assert (settings.timeouts.smoke_models_attempts, settings.timeouts.smoke_models_interval_s) == (30, 10)
    assert settings.timeouts.smoke_request_timeout_s == 120
    assert (settings.keep_on_failure, settings.storage_class, settings.served_model) == (False, None, None)
    assert (settings.kubeconfig, settings.prev_deploy_root, settings.review_id, settings.support) == (
        None, None, None, ())
    assert settings.deploy_id == "deploy-iter-000"
    assert settings.deploy_root == exp.exp_root / "artifacts" / "deploy-iter-000"


def test_deploy_id_is_zero_padded_to_three_digits():
    assert [deploy_id(n) for n in (0, 7, 42, 123, 1000)] == [
        "deploy-iter-000", "deploy-iter-007", "deploy-iter-042", "deploy-iter-123", "deploy-iter-1000"]


def test_every_timeout_option_names_a_timeout():
    assert set(TIMEOUT_OPTIONS.values()) <= set(Timeouts().as_dict())
    assert set(OPTION_KEYS.values()).isdisjoint(TIMEOUT_OPTIONS.values())


# --- precedence: command line > handoff > default ---------------------------------------------

# (Settings key, value in the handoff, value on the command line, the default)
PRECEDENCE: list[tuple[str, Any, Any, Any]] = [
    ("storage_class", "standard", "fast", None),
    ("smoke_prompt", "Say hello", "Say goodbye", DEFAULT_SMOKE_PROMPT),
    ("served_model", "org/model-a", "org/model-b", None),
    ("keep_on_failure", True, False, False),  # a value given as false still beats the handoff
]


@pytest.mark.parametrize(("key", "in_handoff", "on_cli", "default"), PRECEDENCE, ids=[p[0] for p in PRECEDENCE])
@pytest.mark.parametrize("given", ["both", "handoff", "neither"])
def test_command_line_beats_handoff_beats_default(tmp_path: Path, key: str, in_handoff: Any, on_cli: Any,
                                                  default: Any, given: str):
    handoff = write_handoff(tmp_path / "h.yaml", **({key: in_handoff} if given != "neither" else {}))
    cli = minimal_cli(**({key: on_cli} if given == "both" else {key: None}))
    settings = build_settings(cli, invocation_dir=tmp_path, handoff_path=handoff)
    assert getattr(settings, key) == {"both": on_cli, "handoff": in_handoff, "neither": default}[given]


def test_required_values_may_all_come_from_the_handoff_and_the_command_line_overrides_each(tmp_path: Path):
    values = {"iteration": 0, "provenance": "user-interviewer", "exp_root": "e", "workload": "e/w.yaml",
              "workload_sha256": SHA_A, "dgd": "e/d.yaml", "dgd_sha256": SHA_B}
    handoff = write_handoff(tmp_path / "h.yaml", **values)
    from_handoff = build_settings({}, invocation_dir=tmp_path, handoff_path=handoff)
    assert (from_handoff.workload_sha256, from_handoff.dgd_sha256, from_handoff.dgd) == (SHA_A, SHA_B,
                                                                                       tmp_path / "e/d.yaml")
    overridden = build_settings({"dgd_sha256": SHA_A.upper(), "dgd": "/abs/other.yaml"}, invocation_dir=tmp_path,
                                handoff_path=handoff)
    assert overridden.dgd_sha256 == SHA_A  # normalised to lower case, as sha256sum prints it
    assert overridden.dgd == Path("/abs/other.yaml")
    assert overridden.workload_sha256 == SHA_A  # untouched keys still come from the handoff


def test_a_null_in_the_handoff_falls_back_to_the_default(tmp_path: Path):
    handoff = write_handoff(tmp_path / "h.yaml", smoke_prompt=None, storage_class=None, timeouts=None)
    settings = build_settings(minimal_cli(), invocation_dir=tmp_path, handoff_path=handoff)
    assert (settings.smoke_prompt, settings.storage_class, settings.timeouts) == (DEFAULT_SMOKE_PROMPT, None,
                                                                                 Timeouts())


def test_a_null_support_type_or_timeout_in_the_handoff_is_not_given(tmp_path: Path):
    handoff = write_handoff(tmp_path / "h.yaml", support={"model-cache": "c.yaml", "model-validate": None},
                            timeouts={"retire_s": None, "readiness_s": 7})
    settings = build_settings(minimal_cli(), invocation_dir=tmp_path, handoff_path=handoff)
    assert [s.type for s in settings.support] == ["model-cache"]
    assert (settings.timeouts.retire_s, settings.timeouts.readiness_s) == (Timeouts().retire_s, 7.0)


def test_handoff_keys_may_be_written_with_dashes_and_iter(tmp_path: Path):
    handoff = tmp_path / "h.yaml"
    handoff.write_text(f"iter: 0\nprovenance: user-interviewer\nexp-root: e\n--workload: e/w.yaml\n"
                       f"workload-sha256: {SHA_A}\ndgd: e/d.yaml\ndgd_sha256: {SHA_B}\nkeep-on-failure: true\n")
    settings = build_settings({}, invocation_dir=tmp_path, handoff_path=handoff)
    assert (settings.iteration, settings.exp_root, settings.workload) == (0, tmp_path / "e", tmp_path / "e/w.yaml")
    assert settings.keep_on_failure is True


def test_command_line_iteration_may_be_text(tmp_path: Path):
    settings = build_settings(minimal_cli(iteration="2", provenance="hypothesis-challenger",
                                          prev_deploy_root="exp/artifacts/deploy-iter-001"), invocation_dir=tmp_path)
    assert (settings.iteration, settings.deploy_id) == (2, "deploy-iter-002")


def test_timeouts_merge_per_key_and_the_command_line_wins(tmp_path: Path):
    handoff = write_handoff(tmp_path / "h.yaml", timeouts={"retire_s": 5, "readiness_s": 7, "smoke_reach_attempts": 3})
    settings = build_settings(minimal_cli(retire_s="11.5", job_download_s=42), invocation_dir=tmp_path,
                              handoff_path=handoff)
    t = settings.timeouts
    assert (t.retire_s, t.readiness_s, t.job_download_s) == (11.5, 7.0, 42.0)  # cli > handoff > default
    assert t.smoke_reach_attempts == 3 and isinstance(t.smoke_reach_attempts, int)
    assert isinstance(t.readiness_s, float)  # whole numbers from YAML become the declared type
    assert t.job_validate_s == Timeouts().job_validate_s


def test_support_on_the_command_line_replaces_the_handoff_list_as_a_whole(tmp_path: Path):
    handoff = write_handoff(tmp_path / "cfg" / "h.yaml",
                            support={"model-cache": "c.yaml", "model-download": ["d-fp8.yaml", "d-bf16.yaml"]})
    from_handoff = build_settings(minimal_cli(), invocation_dir=tmp_path, handoff_path=handoff)
    assert from_handoff.support == (
        SupportInput("model-cache", tmp_path / "cfg" / "c.yaml"),
        SupportInput("model-download", tmp_path / "cfg" / "d-fp8.yaml"),
        SupportInput("model-download", tmp_path / "cfg" / "d-bf16.yaml"),
    )
    as_list = write_handoff(tmp_path / "cfg" / "h2.yaml", support=["model-cache=c.yaml",
                                                                   {"type": "model-validate", "path": "v.yaml"}])
    assert build_settings(minimal_cli(), invocation_dir=tmp_path, handoff_path=as_list).support == (
        SupportInput("model-cache", tmp_path / "cfg" / "c.yaml"),
        SupportInput("model-validate", tmp_path / "cfg" / "v.yaml"),
    )
    overridden = build_settings(minimal_cli(support=["model-validate=v.yaml"]), invocation_dir=tmp_path,
                                handoff_path=handoff)
    assert overridden.support == (SupportInput("model-validate", tmp_path / "v.yaml"),)


def test_a_handoffs_support_order_is_the_sequence_step_4_follows(tmp_path: Path):
    # The user's deployment instructions: validate the cache before downloading into it.
    support = {"model-cache": "c.yaml", "model-download": ["d-fp8.yaml", "d-bf16.yaml"], "model-validate": "v.yaml"}
    order = ["model-cache", "model-validate", "model-download"]
    handoff = write_handoff(tmp_path / "h.yaml", support=support, support_order=order)
    settings = build_settings(minimal_cli(), invocation_dir=tmp_path, handoff_path=handoff)
    assert settings.support_order == tuple(order)
    assert settings.public_record()["support_order"] == order
    assert build_settings(minimal_cli(), invocation_dir=tmp_path,
                          handoff_path=write_handoff(tmp_path / "none.yaml", support=support)).support_order == ()


@pytest.mark.parametrize(("order", "needles"), [
    ("model-cache", ["must be a list of support types"]),
    (["model-cache", "model-weights", "model-download"], ["names 'model-weights', not a support type"]),
    (["model-cache", "model-cache", "model-download"], ["names model-cache twice"]),
    (["model-download"], ["leaves out model-cache, which was handed over"]),
    (["model-cache", "model-download", "model-validate"], ["names model-validate, which was not handed over"]),
])
def test_a_support_order_that_is_not_each_handed_off_type_once_is_refused(tmp_path: Path, order: Any,
                                                                         needles: list[str]):
    handoff = write_handoff(tmp_path / "h.yaml", support={"model-cache": "c.yaml", "model-download": "d.yaml"},
                            support_order=order)
    error = refused(minimal_cli(), tmp_path, handoff)
    assert str(error).startswith("handoff key 'support_order': ")
    assert_one_line(error, *needles,
                   "fix: list each handed-off support type once, in the order to apply them: "
                   "support_order: [model-cache, model-download]")


def test_the_sample_handoff_and_the_command_line(exp: Experiment, tmp_path: Path):
    from_handoff = build_settings({}, invocation_dir=tmp_path, handoff_path=exp.handoff0)
    assert from_handoff.exp_root.resolve() == exp.exp_root.resolve()
    assert from_handoff.workload.resolve() == (exp.exp_root / "user_workload.yaml").resolve()
    assert [s.type for s in from_handoff.support] == ["model-cache", "model-download"]
    assert from_handoff.storage_class == "standard"
    overridden = build_settings(
        {"storage_class": "fast", "support": ["model-cache=other.yaml"], "keep_on_failure": True, "retire_s": 30},
        invocation_dir=tmp_path,
        handoff_path=exp.handoff0,
    )
    assert overridden.storage_class == "fast"
    assert overridden.support == (SupportInput("model-cache", tmp_path / "other.yaml"),)
    assert overridden.keep_on_failure is True
    assert overridden.timeouts.retire_s == 30


# --- relative paths --------------------------------------------------------------------------


def test_command_line_paths_are_relative_to_the_invocation_directory(tmp_path: Path):
    kubeconfig = tmp_path / "kube" / "config"
    kubeconfig.parent.mkdir()
    kubeconfig.write_text("apiVersion: v1\n")
    handoff = write_handoff(tmp_path / "elsewhere" / "h.yaml", exp_root="from-handoff")
    settings = build_settings(
        minimal_cli(iteration=1, provenance="hypothesis-challenger", prev_deploy_root="exp/artifacts/deploy-iter-000",
                    kubeconfig="kube/config", support=["model-cache=exp/c.yaml"]),
        invocation_dir=tmp_path, handoff_path=handoff)
    assert settings.exp_root == tmp_path / "exp"  # the command line wins, relative to where pytest ran
    assert (settings.workload, settings.dgd) == (tmp_path / "exp/user_workload.yaml", tmp_path / "exp/dgd.yaml")
    assert settings.prev_deploy_root == tmp_path / "exp/artifacts/deploy-iter-000"
    assert settings.kubeconfig == kubeconfig
    assert settings.support == (SupportInput("model-cache", tmp_path / "exp/c.yaml"),)


def test_handoff_paths_are_relative_to_the_handoff_file_and_the_handoff_to_the_invocation_dir(tmp_path: Path):
    (tmp_path / "runs" / "x" / "kubeconfig").parent.mkdir(parents=True)
    (tmp_path / "runs" / "x" / "kubeconfig").write_text("apiVersion: v1\n")
    write_handoff(tmp_path / "runs" / "x" / "h.yaml", iteration=1, provenance="hypothesis-challenger", exp_root=".",
                  workload="user_workload.yaml", workload_sha256=SHA_A, dgd="/abs/d.yaml", dgd_sha256=SHA_B,
                  prev_deploy_root="artifacts/deploy-iter-000", kubeconfig="kubeconfig")
    settings = build_settings({}, invocation_dir=tmp_path, handoff_path=Path("runs/x/h.yaml"))
    root = tmp_path / "runs" / "x"
    assert settings.exp_root == root / "."
    assert settings.workload == root / "user_workload.yaml"
    assert settings.dgd == Path("/abs/d.yaml")  # absolute paths stay as written
    assert settings.prev_deploy_root == root / "artifacts/deploy-iter-000"
    assert settings.kubeconfig == root / "kubeconfig"


def test_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    settings = build_settings(minimal_cli(exp_root="~/exp"), invocation_dir=tmp_path)
    assert settings.exp_root == tmp_path / "home" / "exp"


# --- what the ledger keeps -------------------------------------------------------------------

_SECRET_WORDS = re.compile(r"token|password|passwd|secret|credential|bearer|private|api[_-]?key", re.IGNORECASE)


def _leaves(value: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, f"{path}.{k}")]
    return [(path, value)]


def test_public_record_holds_no_secret_looking_value_and_no_path(tmp_path: Path):
    secret_dir = tmp_path / "secret-token-store"
    secret_dir.mkdir()
    kubeconfig = secret_dir / "kubeconfig-with-bearer"
    kubeconfig.write_text("users: [{user: {token: abc}}]\n")
    settings = build_settings(minimal_cli(kubeconfig=str(kubeconfig), storage_class="fast", keep_on_failure=True),
                              invocation_dir=tmp_path)
    record = settings.public_record()
    assert set(record) == {"storage_class", "smoke_prompt", "keep_on_failure", "support_order", "kubeconfig_given",
                           "retry_reason", "timeouts"}
    assert record["kubeconfig_given"] is True
    assert record["timeouts"] == Timeouts().as_dict()
    text = json.dumps(record)  # what goes into every ledger must be JSON as it is
    assert str(tmp_path) not in text and "kubeconfig-with-bearer" not in text
    for where, value in _leaves(record):
        assert not _SECRET_WORDS.search(where), where
        assert not (isinstance(value, str) and (_SECRET_WORDS.search(value) or value.startswith("/"))), (where, value)
        assert not (isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value)), where  # no hashes or tokens
