"""Every rule of step 1 (deploy_suite.procedure.inputs.prepare), table-driven; option values: test_settings.py.

Each test works on a scratch copy of the sample experiment (fixtures/experiments), never on the
checked-in one.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_suite.errors import DeploymentLocked, InputError, RefusedCandidate
from deploy_suite.fixtures.experiments.make_experiment import Experiment, make_experiment, stage_candidate
from deploy_suite.plugins.lifecycle import Lifecycle
from deploy_suite.procedure import inputs, workspace
from deploy_suite.procedure.registry import STEP_NAMES
from deploy_suite.procedure.settings import Settings, SupportInput
from deploy_suite.record import ledger as ledger_mod
from deploy_suite.record.ledger import LEDGER_NAME, Ledger, new_document
from deploy_suite.vocab import StepOutcome

EXP_ID = "20260601T120000Z-demo"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def exp(tmp_path: Path) -> Experiment:
    return make_experiment(tmp_path / "scratch")


def settings_for(exp: Experiment, **overrides: Any) -> Settings:
    root = exp.exp_root
    values: dict[str, Any] = {
        "iteration": 0,
        "exp_root": root,
        "workload": root / "user_workload.yaml",
        "workload_sha256": sha(root / "user_workload.yaml"),
        "dgd": root / "inputs" / "user_provided_dgd.yaml",
        "dgd_sha256": sha(root / "inputs" / "user_provided_dgd.yaml"),
        "provenance": "user-interviewer",
        "support": (
            SupportInput("model-cache", root / "inputs" / "model-cache.yaml"),
            SupportInput("model-download", root / "inputs" / "model-download.yaml"),
        ),
    }
    values.update(overrides)
    return Settings(**values)


def rewrite_workload(exp: Experiment, edit: Any) -> Settings:
    """Edit user_workload.yaml (as data, or raw text when ``edit`` is a str) and hand over its new hash."""
    path = exp.exp_root / "user_workload.yaml"
    if isinstance(edit, str):
        path.write_text(edit)
    else:
        data = yaml.safe_load(path.read_text())
        edit(data)
        path.write_text(yaml.safe_dump(data))
    return settings_for(exp, workload_sha256=sha(path))


def refused(settings: Settings, **kwargs: Any) -> InputError:
    with pytest.raises(InputError) as info:
        inputs.prepare(settings, **kwargs)
    return info.value


def assert_one_line(error: InputError, *needles: str) -> None:
    text = str(error)
    assert "\n" not in text
    assert "; fix: " in text
    for needle in needles:
        assert needle in text, text


# --- prepare: the happy path -----------------------------------------------------------------


def test_iteration0_creates_exactly_the_deployment_directory_with_stable_copies(exp: Experiment):
    sources = {p: sha(p) for p in (exp.exp_root / "inputs").iterdir()}
    seen: list[tuple[Path, bool]] = []
    prepared = inputs.prepare(settings_for(exp), on_directory=lambda root, resumed, _e: seen.append((root, resumed)))
    root = exp.exp_root.resolve() / "artifacts" / "deploy-iter-000"
    assert seen == [(root, False)]
    assert sorted(p.name for p in (exp.exp_root / "artifacts").iterdir()) == ["deploy-iter-000"]
    assert sorted(p.name for p in root.iterdir()) == ["applied_manifests"]  # no logs/
    applied = root / "applied_manifests"
    assert sorted(p.name for p in applied.iterdir()) == ["deploy.yaml", "model-cache.yaml", "model-download.yaml"]
    assert (applied / "deploy.yaml").read_bytes() == (exp.exp_root / "inputs/user_provided_dgd.yaml").read_bytes()
    assert {p: sha(p) for p in sources} == sources  # handed-off sources untouched
    assert prepared.dgd_name == "demo-agg"
    assert prepared.workload.kube_context == "offline-demo"
    assert prepared.workload.namespace == "dynamo-demo"
    assert prepared.workload.pinned == ("precision", "framework")
    assert prepared.previous is None and prepared.resume is None
    records = [m.record(prepared.exp_root) for m in prepared.manifests]
    assert records[0] == {
        "type": "deploy",
        "path": "artifacts/deploy-iter-000/applied_manifests/deploy.yaml",
        "source_path": "inputs/user_provided_dgd.yaml",
        "source_name": "user_provided_dgd.yaml",
        "sha256": exp.dgd_sha256,
        "source_sha256": exp.dgd_sha256,
    }
    assert inputs.verify_sources(prepared) == []


@pytest.mark.parametrize(
    "form",
    ["runs/{exp_id}/inputs/user_provided_dgd.yaml", "inputs/user_provided_dgd.yaml",
     "{root}/inputs/user_provided_dgd.yaml"],
    ids=["runs-relative", "exp-root-relative", "absolute"],
)
def test_contract_dgd_path_may_be_written_in_three_forms(exp: Experiment, form: str):
    value = form.format(exp_id=EXP_ID, root=exp.exp_root)
    settings = rewrite_workload(exp, lambda d: d["deployment"].update(dgd_path=value))
    assert inputs.prepare(settings).dgd_name == "demo-agg"


@pytest.mark.parametrize("parent", ["experiments", "exp-roots.d"])
def test_the_runs_relative_dgd_path_resolves_inside_exp_root_whatever_its_parent_is_named(
        exp: Experiment, tmp_path: Path, parent: str):
    moved = tmp_path / parent / EXP_ID
    moved.parent.mkdir()
    shutil.copytree(exp.exp_root, moved, symlinks=True)
    workload = moved / "user_workload.yaml"
    data = yaml.safe_load(workload.read_text())
    data["deployment"]["dgd_path"] = f"runs/{EXP_ID}/inputs/user_provided_dgd.yaml"
    workload.write_text(yaml.safe_dump(data))
    settings = settings_for(exp, exp_root=moved, workload=workload, workload_sha256=sha(workload),
                            dgd=moved / "inputs" / "user_provided_dgd.yaml",
                            support=tuple(SupportInput(s.type, moved / s.path.relative_to(exp.exp_root))
                                          for s in settings_for(exp).support))
    assert inputs.prepare(settings).dgd_name == "demo-agg"
    data["deployment"]["dgd_path"] = "runs/another-experiment/inputs/user_provided_dgd.yaml"
    workload.write_text(yaml.safe_dump(data))
    other = Settings(**{**settings.__dict__, "workload_sha256": sha(workload)})
    assert_one_line(refused(other), "deployment.dgd_path", "runs/another-experiment")


def test_iteration_is_zero_padded_to_three_digits(exp: Experiment):
    prev = exp.exp_root / "artifacts" / "deploy-iter-011"
    prev.mkdir(parents=True)
    (prev / LEDGER_NAME).write_text(json.dumps(
        {"iteration": 11, "dgd_name": "demo-agg", "kube_context": "offline-demo", "namespace": "dynamo-demo"}))
    settings = settings_for(exp, iteration=12, provenance="hypothesis-challenger", prev_deploy_root=prev)
    prepared = inputs.prepare(settings)
    assert prepared.deploy_root.name == "deploy-iter-012"
    assert prepared.previous is not None and prepared.previous.dgd_name == "demo-agg"


def test_iteration1_reads_the_previous_ledger(exp: Experiment):
    inputs.prepare(settings_for(exp))
    prev_root = exp.exp_root / "artifacts" / "deploy-iter-000"
    (prev_root / LEDGER_NAME).write_text(json.dumps(
        {"iteration": 0, "dgd_name": "demo-agg", "kube_context": "offline-demo", "namespace": "dynamo-demo",
         "status": "ready"}))
    stage_candidate(exp.exp_root, 1)
    draft = prev_root / "next-candidate" / "deploy-draft.yaml"
    settings = settings_for(exp, iteration=1, provenance="hypothesis-challenger", prev_deploy_root=prev_root,
                            dgd=draft, dgd_sha256=sha(draft))
    prepared = inputs.prepare(settings)
    assert prepared.previous is not None
    assert prepared.previous.record(prepared.exp_root) == {
        "root": "artifacts/deploy-iter-000", "ledger": "artifacts/deploy-iter-000/deployment_ledger.json",
        "iteration": 0, "dgd_name": "demo-agg", "kube_context": "offline-demo", "namespace": "dynamo-demo",
        "status": "ready", "passed_over": [],
    }
    assert "--max-num-seqs 64" in (prepared.deploy_root / "applied_manifests/deploy.yaml").read_text()


# --- prepare: refusals, table-driven ---------------------------------------------------------


def _drop(dotted: str) -> Any:
    def edit(data: dict[str, Any]) -> None:
        *parents, last = dotted.split(".")
        node = data
        for part in parents:
            node = node[part]
        del node[last]
    return edit


def _set(dotted: str, value: Any) -> Any:
    def edit(data: dict[str, Any]) -> None:
        *parents, last = dotted.split(".")
        node = data
        for part in parents:
            node = node[part]
        node[last] = value
    return edit


@pytest.mark.parametrize(
    ("edit", "needles"),
    [
        ("a: [1,\n", ["YAML syntax error at line 2"]),
        ("a: 1\n---\nb: 2\n", ["holds 2 YAML documents"]),
        ("", ["holds 0 YAML documents"]),
        ("- a\n- b\n", ["is a YAML list, a mapping is expected"]),
        ("profile: {name: a}\nprofile: {name: b}\n", ["duplicate key 'profile'"]),
        (_drop("kubernetes.kube_context"), ["field kubernetes.kube_context", "missing"]),
        (_drop("kubernetes.namespace"), ["field kubernetes.namespace", "missing"]),
        (_drop("deployment.dgd_sha256"), ["field deployment.dgd_sha256", "missing"]),
        (_drop("profile.name"), ["field profile.name", "missing"]),
        (_drop("hardware"), ["field hardware", "missing"]),
        (_set("kubernetes.namespace", 5), ["field kubernetes.namespace", "got int"]),
        (_set("kubernetes.kube_context", ""), ["field kubernetes.kube_context", "non-empty"]),
        (_set("kubernetes", "prod"), ["field kubernetes", "must be a mapping"]),
        (_set("profile.type", "batch"), ["field profile.type", "chat, agentic, custom"]),
        (_set("hardware", []), ["field hardware", "non-empty list"]),
        (_set("hardware", [{"gpu_type": "H200", "gpu_count": "8"}]), ["hardware[0].gpu_count"]),
        (_set("hardware", [{"gpu_type": "H200", "gpu_count": True}]), ["hardware[0].gpu_count"]),
        (_set("deployment.dgd_sha256", "XYZ"), ["field deployment.dgd_sha256", "hex"]),
        (_set("deployment.origin", "someone"), ["field deployment.origin"]),
        (_set("resources.gpu_ceiling", "8"), ["field resources.gpu_ceiling"]),
        (_set("resources.pinned", "precision"), ["field resources.pinned", "list of strings"]),
        (_set("traffic.concurrency", [1, "8"]), ["field traffic.concurrency"]),
        (_set("budgets.max_failed_deploys", "3"), ["field budgets.max_failed_deploys"]),
        (_set("objectives.ttft_ms_p95_max", True), ["field objectives.ttft_ms_p95_max"]),
    ],
)
def test_bad_workload_is_refused_before_any_directory(exp: Experiment, edit: Any, needles: list[str]):
    error = refused(rewrite_workload(exp, edit))
    assert_one_line(error, "--workload user_workload.yaml", *needles)
    assert not (exp.exp_root / "artifacts").exists()


def test_workload_hash_is_checked_before_it_is_parsed(exp: Experiment):
    (exp.exp_root / "user_workload.yaml").write_text("a: [1,\n")  # broken YAML, stale handed-over hash
    error = refused(settings_for(exp, workload_sha256=exp.workload_sha256))
    assert_one_line(error, "--workload", "SHA-256 is", "the handoff says", "re-issue the handoff")


@pytest.mark.parametrize(
    ("make", "needles"),
    [
        (lambda e: settings_for(e, workload_sha256="0" * 64), ["--workload", "SHA-256 is"]),
        (lambda e: settings_for(e, dgd_sha256="0" * 64), ["--dgd inputs/user_provided_dgd.yaml", "SHA-256 is"]),
        (lambda e: settings_for(e, workload=e.exp_root / "nope.yaml"), ["--workload nope.yaml", "file not found"]),
        (lambda e: settings_for(e, dgd=e.exp_root / "inputs"), ["--dgd inputs", "not a regular file"]),
        (lambda e: settings_for(e, exp_root=e.exp_root / "missing"), ["--exp-root", "directory not found"]),
        (lambda e: settings_for(e, support=(SupportInput("model-cache", e.exp_root / "x.yaml"),)),
         ["--support model-cache=x.yaml", "file not found"]),
    ],
    ids=["workload-hash", "dgd-hash", "missing-workload", "dgd-is-dir", "missing-exp-root", "missing-support"],
)
def test_missing_or_mismatching_input_is_refused(exp: Experiment, make: Any, needles: list[str]):
    assert_one_line(refused(make(exp)), *needles)
    assert not (exp.exp_root / "artifacts").exists()


def _copy_dgd(exp: Experiment, where: Path) -> Settings:
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_bytes((exp.exp_root / "inputs/user_provided_dgd.yaml").read_bytes())
    return settings_for(exp, dgd=where)


def test_iteration0_dgd_must_be_the_contract_path(exp: Experiment):
    error = refused(_copy_dgd(exp, exp.exp_root / "inputs" / "copy.yaml"))  # same bytes, other path
    assert_one_line(error, "--dgd inputs/copy.yaml", "deployment.dgd_path")


def test_iteration0_dgd_must_have_the_contract_hash(exp: Experiment):
    settings = rewrite_workload(exp, _set("deployment.dgd_sha256", "a" * 64))
    assert_one_line(refused(settings), "--dgd", "deployment.dgd_sha256")


def test_input_outside_exp_root_is_refused(exp: Experiment, tmp_path: Path):
    error = refused(_copy_dgd(exp, tmp_path / "elsewhere" / "user_provided_dgd.yaml"))
    assert_one_line(error, "--dgd", "outside EXP_ROOT")


def test_symlink_escaping_exp_root_is_refused(exp: Experiment, tmp_path: Path):
    outside = tmp_path / "outside.yaml"
    outside.write_bytes((exp.exp_root / "user_workload.yaml").read_bytes())
    link = exp.exp_root / "linked_workload.yaml"
    link.symlink_to(outside)
    error = refused(settings_for(exp, workload=link))
    assert_one_line(error, "--workload linked_workload.yaml", "symlink", "outside EXP_ROOT")


def test_symlinked_artifacts_dir_escaping_exp_root_is_refused(exp: Experiment, tmp_path: Path):
    (tmp_path / "elsewhere").mkdir()
    (exp.exp_root / "artifacts").symlink_to(tmp_path / "elsewhere")
    assert_one_line(refused(settings_for(exp)), "artifacts/", "outside EXP_ROOT")


def test_symlink_inside_exp_root_is_accepted(exp: Experiment):
    link = exp.exp_root / "wl-link.yaml"
    link.symlink_to(exp.exp_root / "user_workload.yaml")
    assert inputs.prepare(settings_for(exp, workload=link)).workload_file.rel == "user_workload.yaml"


def test_superseded_experiment_root_is_refused(exp: Experiment):
    (exp.exp_root / "SUPERSEDED").write_text("new EXP_ROOT: runs/x\n")
    assert_one_line(refused(settings_for(exp)), "--exp-root", "SUPERSEDED")


DGD_DOC = {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment", "metadata": {"name": "x"},
           "spec": {"services": {}}}


@pytest.mark.parametrize(
    ("docs", "needle"),
    [
        ([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}], "holds 0 DynamoGraphDeployment"),
        ([DGD_DOC, DGD_DOC], "holds 2 DynamoGraphDeployment"),
        ([{**DGD_DOC, "apiVersion": "nvidia.com/v2"}], "apiVersion"),
        ([{**DGD_DOC, "metadata": {}}], "no metadata.name"),
        (["just a string"], "document 1 is a YAML str"),
    ],
)
def test_assigned_file_must_hold_one_dgd(exp: Experiment, docs: list[Any], needle: str):
    path = exp.exp_root / "inputs" / "user_provided_dgd.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    settings = rewrite_workload(exp, _set("deployment.dgd_sha256", sha(path)))
    settings = Settings(**{**settings.__dict__, "dgd_sha256": sha(path)})
    assert_one_line(refused(settings), "--dgd", needle)


def test_dgd_with_a_configmap_before_it_is_accepted(exp: Experiment):
    path = exp.exp_root / "inputs" / "user_provided_dgd.yaml"
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "engine"}}
    docs = [configmap, *yaml.safe_load_all(path.read_text())]
    path.write_text(yaml.safe_dump_all(docs))
    settings = rewrite_workload(exp, _set("deployment.dgd_sha256", sha(path)))
    settings = Settings(**{**settings.__dict__, "dgd_sha256": sha(path)})
    assert inputs.prepare(settings).dgd_name == "demo-agg"


# --- support manifests and download variants -------------------------------------------------


def _variant(exp: Experiment, name: str) -> SupportInput:
    path = exp.exp_root / "inputs" / name
    path.write_bytes((exp.exp_root / "inputs" / "model-download.yaml").read_bytes() + f"# {name}\n".encode())
    return SupportInput("model-download", path)


def _with_model(exp: Experiment, model_arg: str, precision: str | None = "bf16") -> Settings:
    """The sample DGD with other worker args, and ``preferences.precision`` (the sample's is bf16)."""
    path = exp.exp_root / "inputs" / "user_provided_dgd.yaml"
    path.write_text(path.read_text().replace("--model Qwen/Qwen3-0.6B", model_arg))

    def edit(data: dict[str, Any]) -> None:
        _set("deployment.dgd_sha256", sha(path))(data)
        _set("preferences.precision", precision)(data)

    settings = rewrite_workload(exp, edit)
    return Settings(**{**settings.__dict__, "dgd_sha256": sha(path)})


@pytest.mark.parametrize(
    ("model_arg", "variants", "chosen"),
    [
        ("--model org/Model-FP8-dynamic", ["model-download-fp8.yaml", "model-download-nvfp4.yaml"],
         "model-download-fp8.yaml"),
        ("--model org/Model --quantization nvfp4", ["model-download-fp8.yaml", "model-download-nvfp4.yaml"],
         "model-download-nvfp4.yaml"),
        ("--model org/Model-FP4", ["model-download-fp8.yaml", "model-download-nvfp4.yaml"],
         "model-download-nvfp4.yaml"),
        ("--model org/Model --dtype bfloat16", ["model-download-fp8.yaml", "model-download-bf16.yaml"],
         "model-download-bf16.yaml"),
        ("--model org/Model", ["model-download.yaml", "model-download-fp8.yaml"], "model-download.yaml"),
        # An FP4 model with an FP8 KV cache downloads the FP4 weights (KV dtype is not model precision).
        ("--model nvidia/DeepSeek-R1-FP4 --kv-cache-dtype fp8",
         ["model-download-fp8.yaml", "model-download-nvfp4.yaml"], "model-download-nvfp4.yaml"),
        # --dtype is the activation dtype: it speaks only when the model name and quantization flags do not.
        ("--model org/Model-FP8 --dtype fp16", ["model-download-fp8.yaml", "model-download-fp16.yaml"],
         "model-download-fp8.yaml"),
        # The DGD states no precision: the workload's preferences.precision (bf16) decides.
        ("--model org/Model", ["model-download-fp8.yaml", "model-download-bf16.yaml"], "model-download-bf16.yaml"),
        # Both voices agree.
        ("--model org/Model-BF16", ["model-download-fp8.yaml", "model-download-bf16.yaml"],
         "model-download-bf16.yaml"),
    ],
    ids=["fp8-model-name", "nvfp4-quantization", "fp4-family", "bfloat16-dtype", "generic-fallback",
         "fp4-model-fp8-kv-cache", "dtype-is-a-fallback", "preference-decides", "both-agree"],
)
def test_download_variant_matching_the_dgd_precision_is_copied_as_model_download(
    exp: Experiment, model_arg: str, variants: list[str], chosen: str
):
    settings = _with_model(exp, model_arg)
    support = tuple(_variant(exp, v) if v != "model-download.yaml" else
                    SupportInput("model-download", exp.exp_root / "inputs" / v) for v in variants)
    prepared = inputs.prepare(Settings(**{**settings.__dict__, "support": support}))
    download = next(m for m in prepared.manifests if m.type == "model-download")
    assert download.source_name == chosen
    assert download.path.name == "model-download.yaml"
    assert download.path.read_bytes() == (exp.exp_root / "inputs" / chosen).read_bytes()
    assert [u.path.name for u in prepared.unselected] == [v for v in variants if v != chosen]


@pytest.mark.parametrize(
    ("model_arg", "variants"),
    [
        ("--model org/Model", ["model-download-fp8.yaml", "model-download-nvfp4.yaml"]),
        ("--model org/Model-FP8 --quantization nvfp4", ["model-download-fp8.yaml", "model-download-nvfp4.yaml"]),
    ],
    ids=["no-precision-in-dgd", "two-matches"],
)
def test_ambiguous_download_variants_are_refused(exp: Experiment, model_arg: str, variants: list[str]):
    settings = _with_model(exp, model_arg)
    support = tuple(_variant(exp, v) for v in variants)
    error = refused(Settings(**{**settings.__dict__, "support": support}))
    assert_one_line(error, "--support model-download", *variants)


def test_dgd_precision_disagreeing_with_preferences_precision_is_refused_naming_both(exp: Experiment):
    settings = _with_model(exp, "--model org/Model-FP8", precision="bf16")
    support = tuple(_variant(exp, v) for v in ("model-download-fp8.yaml", "model-download-bf16.yaml"))
    error = refused(Settings(**{**settings.__dict__, "support": support}))
    assert_one_line(error, "--support model-download", "model-download-fp8.yaml", "model-download-bf16.yaml",
                    "preferences.precision 'bf16'", "cannot tell which one")


def test_a_dgd_precision_no_variant_carries_never_falls_back_to_the_preference(exp: Experiment):
    settings = _with_model(exp, "--model org/Model-FP4", precision="fp8")
    support = tuple(_variant(exp, v) for v in ("model-download-fp8.yaml", "model-download-bf16.yaml"))
    assert_one_line(refused(Settings(**{**settings.__dict__, "support": support})), "fp4", "cannot tell")


# --- GPU requests -------------------------------------------------------------------------------


MOCKER_DGD = Path(__file__).parents[1] / "e2e" / "data" / "dgd-mocker.yaml"


def _with_dgd_text(exp: Experiment, text: str) -> Settings:
    path = exp.exp_root / "inputs" / "user_provided_dgd.yaml"
    path.write_text(text)
    settings = rewrite_workload(exp, _set("deployment.dgd_sha256", sha(path)))
    return Settings(**{**settings.__dict__, "dgd_sha256": sha(path), "support": ()})


def test_a_gpu_less_mocker_dgd_is_accepted(exp: Experiment):
    prepared = inputs.prepare(_with_dgd_text(exp, MOCKER_DGD.read_text()))
    assert prepared.dgd_name == "mocker-agg"
    assert prepared.precision == ("fp8",)  # from --model-path nvidia/Llama-3.1-8B-Instruct-FP8


@pytest.mark.parametrize("count", ["'0.5'", "'-2'", "-2", "0.5"])
def test_an_invalid_gpu_count_is_refused_naming_the_value(exp: Experiment, count: str):
    text = (exp.exp_root / "inputs" / "user_provided_dgd.yaml").read_text()
    replaced = re.sub(r"gpu: [\"']?1[\"']?", f"gpu: {count}", text)
    assert replaced != text
    error = refused(_with_dgd_text(exp, replaced))
    assert_one_line(error, "--dgd", repr(yaml.safe_load(count)), "not a whole number of GPUs")
    assert "no worker requests a GPU" not in str(error)


def _step1(settings: Settings) -> tuple[Lifecycle, InputError | None]:
    """Step 1 as the ledger plugin runs it: a refused input recorded by ``Lifecycle.refuse_input``."""
    run = Lifecycle.create(settings)
    run.begin_step("step1_inputs")
    try:
        run.context.record(inputs.prepare(settings, on_directory=run.attach_directory))
    except InputError as error:
        run.refuse_input("step1_inputs", error)
        run.end_step("step1_inputs", StepOutcome.BLOCKED, str(error))
        return run, error
    run.end_step("step1_inputs", StepOutcome.PASSED)
    return run, None


def test_a_dgd_name_the_operator_cannot_carry_leaves_a_blocked_ledger(exp: Experiment):
    text = (exp.exp_root / "inputs" / "user_provided_dgd.yaml").read_text()
    name = yaml.safe_load(text)["metadata"]["name"]
    long_name = (name + "-" + "x" * 70)[:70]
    error = refused(_with_dgd_text(exp, text.replace(f"name: {name}", f"name: {long_name}", 1)))
    assert isinstance(error, RefusedCandidate)
    assert_one_line(error, "--dgd", "(70 characters)", "at most 63 characters")
    root = exp.exp_root / "artifacts" / "deploy-iter-000"
    assert [p.name for p in root.iterdir()] == ["applied_manifests"]  # claimed, nothing copied
    assert not any((root / "applied_manifests").iterdir())


def test_every_incompatibility_of_a_verified_dgd_is_listed_in_a_blocked_ledger(exp: Experiment):
    text = (exp.exp_root / "inputs" / "user_provided_dgd.yaml").read_text()
    secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: hf-token-secret}\n---\n"
    bad = secret + re.sub(r"gpu: [\"']?1[\"']?", "gpu: '0.5'", text).replace("name: demo-agg", f"name: {'d' * 70}")
    _run, error = _step1(_with_dgd_text(exp, bad))
    assert isinstance(error, RefusedCandidate)
    assert "(and 2 more incompatibilities in the ledger)" in str(error)
    led = json.loads((exp.exp_root / "artifacts" / "deploy-iter-000" / LEDGER_NAME).read_text())
    assert led["status"] == "blocked" and led["steps"][0]["outcome"] == "blocked"
    messages = [b["message"] for b in led["blockers"]]
    assert len(messages) == 3 and all(m.startswith("--dgd inputs/user_provided_dgd.yaml: ") for m in messages)
    assert "is a Secret" in messages[-1] and "not a whole number of GPUs" in messages[0]
    assert "at most 63 characters" in messages[1]
    assert {b["class"] for b in led["blockers"]} == {"input"}
    assert led["source_dgd"]["sha256"] == sha(exp.exp_root / "inputs" / "user_provided_dgd.yaml")
    assert led["dgd_name"] == "d" * 70 and led["namespace"] == "dynamo-demo"
    assert len(led["steps"][0]["evidence"]["incompatibilities"]) == 3
    # A rerun of the same candidate resumes in the directory and says the same.
    again, error = _step1(_with_dgd_text(exp, bad))
    assert isinstance(error, RefusedCandidate) and again.ledger.data["resumes"]


def test_before_its_hashes_verify_a_refused_dgd_leaves_no_directory(exp: Experiment):
    settings = _with_dgd_text(exp, "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n")
    _run, error = _step1(Settings(**{**settings.__dict__, "dgd_sha256": "0" * 64}))
    assert error is not None and not isinstance(error, RefusedCandidate) and "SHA-256 is" in str(error)
    assert not (exp.exp_root / "artifacts").exists()


def test_two_model_cache_manifests_are_refused(exp: Experiment):
    cache = exp.exp_root / "inputs" / "model-cache.yaml"
    settings = settings_for(exp, support=(SupportInput("model-cache", cache), SupportInput("model-cache", cache)))
    assert_one_line(refused(settings), "--support model-cache", "2 times")


def test_support_manifest_needs_kind_and_name(exp: Experiment):
    bad = exp.exp_root / "inputs" / "model-validate.yaml"
    bad.write_text("spec: {}\n")
    settings = settings_for(exp, support=(SupportInput("model-validate", bad),))
    assert_one_line(refused(settings), "--support model-validate", "kind and metadata.name")


def test_only_handed_off_support_manifests_are_copied(exp: Experiment):
    prepared = inputs.prepare(settings_for(exp, support=()))
    assert [p.name for p in (prepared.deploy_root / "applied_manifests").iterdir()] == ["deploy.yaml"]


# --- previous deployment ---------------------------------------------------------------------


def _iter1(exp: Experiment, prev_root: Path) -> Settings:
    return settings_for(exp, iteration=1, provenance="hypothesis-challenger", prev_deploy_root=prev_root)


@pytest.mark.parametrize(
    ("ledger", "needles"),
    [
        (None, ["--prev-deploy-root ledger", "file not found"]),
        ("{not json", ["--prev-deploy-root ledger", "not valid JSON"]),
        ({"iteration": 0, "kube_context": "c", "namespace": "n"}, ["ledger field dgd_name"]),
        ({"iteration": 3, "dgd_name": "d", "kube_context": "c", "namespace": "n"}, ["ledger field iteration"]),
    ],
    ids=["no-ledger", "invalid-json", "no-dgd-name", "wrong-iteration"],
)
def test_previous_root_must_hold_a_usable_ledger(exp: Experiment, ledger: Any, needles: list[str]):
    prev = exp.exp_root / "artifacts" / "deploy-iter-000"
    prev.mkdir(parents=True)
    if ledger is not None:
        (prev / LEDGER_NAME).write_text(ledger if isinstance(ledger, str) else json.dumps(ledger))
    assert_one_line(refused(_iter1(exp, prev)), *needles)
    assert not (exp.exp_root / "artifacts" / "deploy-iter-001").exists()


def test_missing_previous_root_is_refused(exp: Experiment):
    error = refused(_iter1(exp, exp.exp_root / "artifacts" / "deploy-iter-000"))
    assert_one_line(error, "--prev-deploy-root", "directory not found")


# --- reruns ----------------------------------------------------------------------------------


def _ledger_for(prepared: inputs.Prepared) -> dict[str, Any]:
    return {"source_dgd": prepared.source_dgd.record(),
            "applied_manifests": [m.record(prepared.exp_root) for m in prepared.manifests]}


def test_rerun_of_the_same_candidate_resumes_and_keeps_patched_copies(exp: Experiment):
    first = inputs.prepare(settings_for(exp))
    patched = first.deploy_root / "applied_manifests" / "model-cache.yaml"
    patched.write_text(patched.read_text().replace("your-storage-class-name", "standard"))
    # Step 2 recorded its patch: the ledger holds the patched copy's hash (Ledger.set_copy_sha256).
    (first.deploy_root / LEDGER_NAME).write_text(json.dumps(_ledger_for(first)))
    stale = first.deploy_root / "applied_manifests" / "model-validate.yaml"
    stale.write_text("kind: Job\n")
    seen: list[bool] = []
    second = inputs.prepare(settings_for(exp), on_directory=lambda _r, resumed, earlier: seen.append(resumed))
    assert seen == [True]
    assert second.resume is not None
    assert set(second.resume.kept) == {"deploy.yaml", "model-cache.yaml", "model-download.yaml"}
    assert second.resume.removed == ("model-validate.yaml",)
    assert "standard" in patched.read_text()  # the latest attempted (patched) copy is kept


def _step2(outcome: str, ended: bool) -> list[dict[str, Any]]:
    return [{"name": "step1_inputs", "outcome": "passed", "started_at": "2026-06-01T12:00:00Z",
             "ended_at": "2026-06-01T12:00:01Z"},
            {"name": "step2_validate", "outcome": outcome, "started_at": "2026-06-01T12:00:01Z",
             "ended_at": "2026-06-01T12:00:09Z" if ended else None}]


def test_a_copy_edited_by_hand_before_a_resume_is_refused_naming_it_and_the_fix(exp: Experiment):
    first = inputs.prepare(settings_for(exp))
    (first.deploy_root / LEDGER_NAME).write_text(json.dumps({**_ledger_for(first), "steps": _step2("passed", True)}))
    copy = first.deploy_root / "applied_manifests" / "deploy.yaml"
    edited = copy.read_text().replace("--served-model-name", "--max-model-len 4096 --served-model-name")
    copy.write_text(edited)  # a hand edit: no patch record explains it
    error = refused(settings_for(exp))
    assert_one_line(error, "run-scoped copy artifacts/deploy-iter-000/applied_manifests/deploy.yaml",
                    f"SHA-256 {sha(copy)}", "an edit with no patch record is never applied",
                    "remove artifacts/deploy-iter-000/applied_manifests/deploy.yaml and rerun",
                    "inputs/user_provided_dgd.yaml")
    assert copy.read_text() == edited  # neither applied nor silently dropped
    copy.unlink()  # the fix the line gives: the copy is made again from its source
    again = inputs.prepare(settings_for(exp))
    assert again.resume is not None and again.resume.recopied == ("deploy.yaml",)
    assert sha(copy) == sha(exp.exp_root / "inputs" / "user_provided_dgd.yaml")


def test_a_copy_patched_by_a_step_2_that_stopped_before_recording_is_made_again(exp: Experiment):
    first = inputs.prepare(settings_for(exp))
    (first.deploy_root / LEDGER_NAME).write_text(json.dumps({**_ledger_for(first), "steps": _step2("not_run", False)}))
    patched = first.deploy_root / "applied_manifests" / "model-cache.yaml"
    patched.write_text(patched.read_text().replace("your-storage-class-name", "standard"))
    second = inputs.prepare(settings_for(exp))
    # Step 2 redoes (and this time records) the patch on a fresh copy.
    assert second.resume is not None and second.resume.recopied == ("model-cache.yaml",)
    assert sha(patched) == sha(exp.exp_root / "inputs" / "model-cache.yaml")


def test_different_candidate_for_an_existing_directory_is_refused(exp: Experiment):
    first = inputs.prepare(settings_for(exp))
    ledger = _ledger_for(first)
    ledger["source_dgd"]["sha256"] = "b" * 64
    (first.deploy_root / LEDGER_NAME).write_text(json.dumps(ledger))
    assert_one_line(refused(settings_for(exp)), "--iter 0", "another candidate")


def test_directory_left_without_ledger_is_resumed_only_for_the_same_dgd(exp: Experiment):
    first = inputs.prepare(settings_for(exp))
    assert inputs.prepare(settings_for(exp)).resume is not None  # deploy.yaml copy has the same hash
    (first.deploy_root / "applied_manifests" / "deploy.yaml").write_text("kind: Other\n")
    assert_one_line(refused(settings_for(exp)), "another candidate")


def test_source_modified_during_the_run_is_detected(exp: Experiment):
    prepared = inputs.prepare(settings_for(exp))
    with (exp.exp_root / "inputs" / "model-cache.yaml").open("a") as handle:
        handle.write("# edited\n")
    problems = inputs.verify_sources(prepared)
    assert len(problems) == 1 and problems[0].startswith("inputs/model-cache.yaml: modified during the run")


def test_rel_paths_are_exp_root_relative_even_through_a_symlinked_root(exp: Experiment, tmp_path: Path):
    alias = tmp_path / "alias"
    os.symlink(exp.exp_root, alias)
    settings = settings_for(exp, exp_root=alias, workload=alias / "user_workload.yaml",
                            dgd=alias / "inputs" / "user_provided_dgd.yaml")
    prepared = inputs.prepare(settings)
    assert prepared.workload_file.rel == "user_workload.yaml"
    assert prepared.source_dgd.rel == "inputs/user_provided_dgd.yaml"


# --- the deployment directory's lock and copies ----------------------------------------------


def test_a_directory_locked_by_another_run_is_refused_with_nothing_written(exp: Experiment):
    root = exp.exp_root / "artifacts" / "deploy-iter-000"
    root.mkdir(parents=True)
    # Another open file description of the directory holds the flock: a concurrent run of this iteration.
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        seen: list[bool] = []
        with pytest.raises(DeploymentLocked) as info:
            inputs.prepare(settings_for(exp), on_directory=lambda _r, resumed, _e: seen.append(resumed))
        assert_one_line(info.value, "--iter 0", "in use by another run of this iteration", f"pid {os.getpid()}",
                        "nothing was written")
        assert seen == [] and list(root.iterdir()) == []
    finally:
        os.close(fd)
    prepared = inputs.prepare(settings_for(exp))  # the holder is gone: the rerun proceeds
    assert prepared.resume is not None and prepared.resume.kept == ()
    workspace.release_deployment_lock(prepared.deploy_root)


def test_the_lock_is_reentrant_and_released_at_session_end(exp: Experiment):
    first = inputs.prepare(settings_for(exp))
    second = inputs.prepare(settings_for(exp))  # the same process may prepare again (a rerun in one session)
    assert second.resume is not None
    workspace.release_deployment_lock(first.deploy_root)
    fd = os.open(first.deploy_root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # would raise BlockingIOError if still held
    finally:
        os.close(fd)
    workspace.release_deployment_lock(first.deploy_root)  # releasing twice is a no-op


def test_a_failed_copy_leaves_neither_a_partial_file_nor_a_temporary(tmp_path: Path):
    dest = tmp_path / "deploy.yaml"
    dest.write_text("the earlier copy\n")
    with pytest.raises(FileNotFoundError):
        workspace.copy_atomically(tmp_path / "missing.yaml", dest)
    assert [p.name for p in tmp_path.iterdir()] == ["deploy.yaml"]
    assert dest.read_text() == "the earlier copy\n"


def test_own_directory_ledger_is_read_only_for_the_same_candidate(exp: Experiment):
    settings = settings_for(exp)
    assert workspace.own_directory_ledger(settings) is None  # no directory yet
    prepared = inputs.prepare(settings)
    (prepared.deploy_root / LEDGER_NAME).write_text(json.dumps(_ledger_for(prepared)))
    assert workspace.own_directory_ledger(settings) == _ledger_for(prepared)
    other = settings_for(exp, dgd_sha256="c" * 64)  # another candidate handed for the same iteration
    assert workspace.own_directory_ledger(other) is None
    workspace.release_deployment_lock(prepared.deploy_root)


# --- lenient inputs (issue 28): unknowns, handed-over paths, exported manifests -------------


@pytest.mark.parametrize("dotted", ["resources.pinned", "model.revision", "traffic.concurrency", "deployment.origin",
                                    "deployment.origin_source", "kubernetes.storage_class", "objectives.custom_slos",
                                    "artifacts.supporting_traces", "notes", "created_at", "preferences.precision"])
def test_an_optional_field_written_null_is_an_unknown_and_accepted(exp: Experiment, dotted: str):
    prepared = inputs.prepare(rewrite_workload(exp, _set(dotted, None)))
    if dotted == "resources.pinned":
        assert prepared.workload.pinned == ()


@pytest.mark.parametrize("dotted", ["kubernetes.namespace", "deployment.dgd_sha256", "profile.name"])
def test_a_required_field_written_null_is_still_refused(exp: Experiment, dotted: str):
    assert_one_line(refused(rewrite_workload(exp, _set(dotted, None))), f"field {dotted}", "got null")


def test_a_support_manifest_handed_over_from_outside_exp_root_is_recorded_by_path_and_hash(
        exp: Experiment, tmp_path: Path):
    checkout = tmp_path / "recipes" / "qwen3" / "vllm"
    checkout.mkdir(parents=True)
    outside = checkout / "model-cache.yaml"
    outside.write_bytes((exp.exp_root / "inputs" / "model-cache.yaml").read_bytes())
    settings = settings_for(exp, support=(SupportInput("model-cache", outside),))
    prepared = inputs.prepare(settings)
    cache = next(m for m in prepared.manifests if m.type == "model-cache")
    record = cache.record(prepared.exp_root)
    assert record["source_path"] == os.path.realpath(outside) and record["source_sha256"] == sha(outside)
    assert record["path"] == "artifacts/deploy-iter-000/applied_manifests/model-cache.yaml"
    assert prepared.record(Ledger(_doc()))["outside_exp_root"] == {
        "model-cache": {"path": os.path.realpath(outside), "sha256": sha(outside)}}
    assert outside in [ref.path for ref in prepared.sources()]  # re-hashed at the end of the run too
    ledger_mod.validate({**_doc(), "applied_manifests": [record]})


def test_the_workload_and_the_dgd_must_still_be_inside_exp_root(exp: Experiment, tmp_path: Path):
    outside = tmp_path / "user_workload.yaml"
    outside.write_bytes((exp.exp_root / "user_workload.yaml").read_bytes())
    assert_one_line(refused(settings_for(exp, workload=outside)), "--workload", "outside EXP_ROOT")


def _doc() -> dict[str, Any]:
    return new_document(deploy_id="deploy-iter-000", iteration=0, provenance="user-interviewer",
                        step_names=STEP_NAMES)


EXPORTED_META = {"uid": "0b6c", "resourceVersion": "4711", "generation": 3, "creationTimestamp": "2026-05-01T00:00:00Z",
                 "managedFields": [{"manager": "kubectl"}], "namespace": "dynamo-prod",
                 "annotations": {"nvidia.com/workload-provider": "grove", "nvidia.com/current-worker-hash-v2": "ab12",
                                 "team": "kept"}}


def _exported(exp: Experiment) -> Settings:
    path = exp.exp_root / "inputs" / "user_provided_dgd.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["metadata"].update(copy.deepcopy(EXPORTED_META))
    doc["status"] = {"state": "successful"}
    return _with_dgd_text(exp, yaml.safe_dump(doc))


def test_an_exported_dgd_is_made_portable_in_its_copy_one_recorded_patch_per_field(exp: Experiment):
    settings = _exported(exp)
    source_before = sha(settings.dgd)
    prepared = inputs.prepare(settings)
    copy_doc = yaml.safe_load((prepared.deploy_root / "applied_manifests" / "deploy.yaml").read_text())
    assert copy_doc["metadata"] == {"name": "demo-agg", "namespace": "dynamo-demo", "annotations": {"team": "kept"}}
    assert "status" not in copy_doc and sha(settings.dgd) == source_before  # the source is never modified
    led = Ledger(_doc())
    prepared.record(led)
    by_pointer = {p["changes"][0]["pointer"]: p for p in led.data["patches"]}
    assert set(by_pointer) == {"/metadata/uid", "/metadata/resourceVersion", "/metadata/generation",
                               "/metadata/creationTimestamp", "/metadata/managedFields", "/metadata/namespace",
                               "/metadata/annotations/nvidia.com~1workload-provider",
                               "/metadata/annotations/nvidia.com~1current-worker-hash-v2", "/status"}
    ns = by_pointer["/metadata/namespace"]
    assert ns["changes"] == [{"op": "replace", "pointer": "/metadata/namespace", "before": "dynamo-prod",
                              "after": "dynamo-demo"}]
    assert (ns["document"], ns["source"]) == ("DynamoGraphDeployment/demo-agg", "automatic")
    assert ns["file"] == "artifacts/deploy-iter-000/applied_manifests/deploy.yaml"
    provider = by_pointer["/metadata/annotations/nvidia.com~1workload-provider"]
    assert provider["changes"][0]["op"] == "remove" and provider["changes"][0]["before"] == "grove"
    assert provider["changes"][0]["after"] is None
    assert "KubeAnnotationWorkloadProvider" in provider["reason"] and "consts.go" in provider["reason"]
    assert by_pointer["/metadata/managedFields"]["changes"][0]["before"] == "<1 entries>"
    ledger_mod.validate(led.data)
    # The ledger records the patched copy's hash: a rerun keeps the copy and patches nothing again.
    (prepared.deploy_root / LEDGER_NAME).write_text(json.dumps({**_ledger_for(prepared)}))
    again = inputs.prepare(settings)
    assert again.portable == () and "deploy.yaml" in again.resume.kept  # type: ignore[union-attr]


def test_a_support_manifest_aimed_at_another_namespace_is_retargeted_not_refused(exp: Experiment):
    cache = exp.exp_root / "inputs" / "model-cache.yaml"
    doc = yaml.safe_load(cache.read_text())
    doc["metadata"]["namespace"] = "kube-system"
    cache.write_text(yaml.safe_dump(doc))
    prepared = inputs.prepare(settings_for(exp))
    copy_doc = yaml.safe_load((prepared.deploy_root / "applied_manifests" / "model-cache.yaml").read_text())
    assert copy_doc["metadata"]["namespace"] == "dynamo-demo"
    assert [(p.pointer, p.before, p.after) for _, p in prepared.portable] == [
        ("/metadata/namespace", "kube-system", "dynamo-demo")]
