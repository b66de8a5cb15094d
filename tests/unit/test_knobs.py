"""Unit tests of the knob table for resources.pinned (deploy_suite.model.knobs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deploy_suite.model import knobs
from deploy_suite.model.dgd import Dgd, load_dgd, parse_dgd
from deploy_suite.model.files import sha256_file
from deploy_suite.model.workload import contract_dgd_candidates

DATA = Path(__file__).parent / "data"


def fixture(name: str) -> Dgd:
    return load_dgd(DATA / name)


KNOB_TABLE = [
    ("dgd_v1alpha1_agg.yaml", "framework", "vllm"),
    ("dgd_v1alpha1_agg.yaml", "mode", "agg"),
    ("dgd_v1alpha1_agg.yaml", "model", "Qwen/Qwen3-32B-FP8"),
    ("dgd_v1alpha1_agg.yaml", "precision", "fp8"),
    ("dgd_v1alpha1_agg.yaml", "tensor_parallel_size", {"VllmWorker": 4}),
    ("dgd_v1alpha1_agg.yaml", "gpu_type", "NVIDIA-H100-80GB-HBM3"),
    ("dgd_v1alpha1_agg.yaml", "replicas", {"Frontend": 1, "VllmWorker": 2}),
    ("dgd_v1alpha1_agg.yaml", "gpus_per_worker", {"VllmWorker": 4}),
    ("dgd_v1alpha1_disagg.yaml", "mode", "disagg"),
    ("dgd_v1alpha1_disagg.yaml", "tensor_parallel_size", {"VllmPrefillWorker": 2, "VllmDecodeWorker": 4}),
    ("dgd_v1beta1.yaml", "framework", "sglang"),
    ("dgd_v1beta1.yaml", "precision", "nvfp4"),
    ("dgd_v1beta1.yaml", "data_parallel_size", {"worker": 2}),
    ("dgd_v1beta1.yaml", "pipeline_parallel_size", {"worker": None}),
    ("dgd_v1beta1.yaml", "gpu_type", "NVIDIA-B200"),
    ("dgd_multinode.yaml", "mode", "disagg"),
    ("dgd_multinode.yaml", "gpus_per_worker", {"decode": 16, "prefill": 16}),
    ("dgd_gaie.yaml", "precision", "fp8"),
    ("dgd_gaie.yaml", "mode", "agg"),
]


@pytest.mark.parametrize(("file", "knob", "value"), KNOB_TABLE)
def test_knobs_read_the_documented_value(file, knob, value):
    assert knobs.read(fixture(file), [knob]) == {knob: value}


def test_every_knob_is_documented_and_readable():
    values = knobs.read(fixture("dgd_v1alpha1_agg.yaml"))
    assert set(values) == set(knobs.KNOBS)
    assert all(k.doc for k in knobs.KNOBS.values())


def test_unknown_knob_names_are_detected():
    assert knobs.unknown_knobs(["mode", "precison", "tp"]) == ["precison", "tp"]
    with pytest.raises(KeyError, match="precison"):
        knobs.read(fixture("dgd_v1beta1.yaml"), ["precison"])


def test_changed_knobs_lists_only_differences():
    agg = fixture("dgd_v1alpha1_agg.yaml")
    disagg = fixture("dgd_v1alpha1_disagg.yaml")
    assert knobs.changed_knobs(agg, agg, ["mode", "precision"]) == {}
    assert knobs.changed_knobs(agg, disagg, ["mode", "precision"]) == {"mode": ("agg", "disagg")}


# ------------------------------------------------------------------ the baseline the comparison reads
RECIPE = DATA / "recipes" / "llama-3-70b" / "vllm-agg-deploy.yaml"  # tp 4, FP8, one prefill-typed worker


def experiment(tmp_path: Path, baseline_text: str | None = None) -> tuple[Path, Path, str]:
    """An EXP_ROOT (its parent not named ``runs``) holding the baseline: (root, baseline file, its SHA-256)."""
    root = tmp_path / "experiments" / "20260601T120000Z-llama"
    (root / "inputs").mkdir(parents=True)
    path = root / "inputs" / "user_provided_dgd.yaml"
    path.write_text(RECIPE.read_text() if baseline_text is None else baseline_text)
    return root, path, sha256_file(path)


def candidate(tp: int) -> Dgd:
    return parse_dgd(RECIPE.read_text().replace("--tensor-parallel-size 4", f"--tensor-parallel-size {tp}"))


def judge(root: Path, found: Path | None, sha: str, dgd: Dgd, pinned: tuple[str, ...] = ("tensor_parallel_size",),
          dgd_path: str = "runs/20260601T120000Z-llama/inputs/user_provided_dgd.yaml") -> knobs.PinnedVerdict:
    return knobs.judge_pinned(pinned, lambda: knobs.read_baseline(found, dgd_path, sha, root), dgd)


def test_the_baseline_named_by_dgd_path_is_read_once_its_hash_is_verified(tmp_path: Path) -> None:
    root, path, sha = experiment(tmp_path)
    [found] = [p for p in contract_dgd_candidates("runs/20260601T120000Z-llama/inputs/user_provided_dgd.yaml", root)
               if p.is_file()]  # the runs/<EXP_ID>/... form, EXP_ROOT's parent named "experiments"
    assert found.resolve() == path.resolve()
    same = judge(root, found, sha, candidate(4))
    assert same.blockers == ()
    assert same.evidence == {
        "knobs": {"tensor_parallel_size": {"baseline": {"prefill": 4}, "candidate": {"prefill": 4}, "same": True}},
        "baseline": {"path": "inputs/user_provided_dgd.yaml", "sha256": sha, "verified": True, "problem": None},
        "not_compared": []}
    [(message, fix)] = judge(root, found, sha, candidate(8)).blockers
    assert message == "pinned knob tensor_parallel_size changed: baseline {'prefill': 4}, candidate {'prefill': 8}"
    assert fix == knobs.CHANGED_FIX


@pytest.mark.parametrize("case", ["missing", "edited", "outside", "not-a-dgd"])
def test_a_baseline_that_cannot_be_verified_blocks_naming_it_and_the_fix(tmp_path: Path, case: str) -> None:
    root, path, sha = experiment(tmp_path)
    found: Path | None = path
    if case == "missing":
        path.unlink()
        found = None
    elif case == "edited":  # the baseline changed after the handoff hashed it
        path.write_text(RECIPE.read_text().replace("--tensor-parallel-size 4", "--tensor-parallel-size 8"))
    elif case == "outside":  # deployment.dgd_path resolving to another experiment's file
        found = tmp_path / "elsewhere.yaml"
        found.write_text(RECIPE.read_text())
        sha = sha256_file(found)
    else:
        path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
        sha = sha256_file(path)
    verdict = judge(root, found, sha, candidate(4))  # the candidate is the recipe itself: only the baseline fails
    [(message, fix)] = verdict.blockers
    assert message.startswith("the baseline deployment.dgd_path 'runs/20260601T120000Z-llama/inputs/"), message
    assert {"missing": "names no file", "edited": f"deployment.dgd_sha256 is {sha}", "outside": "outside EXP_ROOT",
            "not-a-dgd": "DynamoGraphDeployment"}[case] in message
    assert fix == knobs.BASELINE_FIX and "deployment.dgd_sha256" in fix
    assert verdict.evidence["knobs"] == {} and verdict.evidence["baseline"]["verified"] is False


def test_the_baseline_is_not_read_when_no_known_knob_is_pinned(tmp_path: Path) -> None:
    def never() -> knobs.Baseline:
        raise AssertionError("the baseline was read")

    assert knobs.judge_pinned((), never, candidate(4)) == knobs.PinnedVerdict()
    verdict = knobs.judge_pinned(("kv_cache_dtype",), never, candidate(4))
    assert verdict.blockers == () and verdict.evidence["not_compared"] == ["kv_cache_dtype"]
    [limitation] = verdict.limitations
    assert "'kv_cache_dtype'" in limitation and "no mapping" in limitation and "not compared" in limitation


def test_an_unknown_pinned_name_is_a_limitation_while_the_known_ones_are_still_compared(tmp_path: Path) -> None:
    root, path, sha = experiment(tmp_path)
    verdict = judge(root, path, sha, candidate(8), pinned=("speculative_decoding", "tensor_parallel_size"))
    [(message, _)] = verdict.blockers  # the known knob still blocks when it changed
    assert message.startswith("pinned knob tensor_parallel_size changed")
    assert len(verdict.limitations) == 1 and "'speculative_decoding'" in verdict.limitations[0]


def _worker_args(args: str, frontend: str = "") -> Dgd:
    """The recipe with its worker's engine arguments extended by ``args`` (and the frontend's by ``frontend``)."""
    text = RECIPE.read_text().replace("--tensor-parallel-size 4", f"--tensor-parallel-size 4 {args}")
    dgd = parse_dgd(text)
    if frontend:
        doc = yaml.safe_load(text)
        services = doc["spec"]["services"]
        name = next(n for n, svc in services.items() if svc.get("componentType") == "frontend")
        main = services[name].setdefault("extraPodSpec", {}).setdefault("mainContainer", {})
        main["args"] = [*main.get("args", []), *frontend.split()]
        dgd = parse_dgd(yaml.safe_dump(doc))
    return dgd


@pytest.mark.parametrize(("before", "after", "values"), [
    ("--dtype bfloat16", "--dtype float16", ("fp8, dtype bf16", "fp8, dtype fp16")),
    ("", "--dtype half", ("fp8", "fp8, dtype half")),
    ("--torch-dtype bfloat16", "--torch-dtype float32", ("fp8, dtype bf16", "fp8, dtype float32")),
    ("--quantization fp8", "--quantization awq", ("fp8", "awq")),
])
def test_pinned_precision_catches_a_dtype_or_quantization_change(before: str, after: str,
                                                                 values: tuple[str, str]) -> None:
    moved = knobs.changed_knobs(_worker_args(before), _worker_args(after), ["precision"])
    assert moved == {"precision": values}


def test_dtype_auto_is_the_default_and_changes_nothing() -> None:
    assert knobs.changed_knobs(_worker_args(""), _worker_args("--dtype auto"), ["precision"]) == {}


@pytest.mark.parametrize("flag", ["--max-model-len", "--context-length", "--max-seq-len"])
def test_max_model_len_reads_each_engines_flag(flag: str) -> None:
    assert knobs.read(_worker_args(f"{flag} 8192"), ["max_model_len"]) == {"max_model_len": {"prefill": 8192}}
    assert knobs.changed_knobs(_worker_args(f"{flag} 8192"), _worker_args(f"{flag} 4096"), ["max_model_len"])


def test_router_mode_reads_the_frontend() -> None:
    assert knobs.read(_worker_args(""), ["router_mode"]) == {"router_mode": None}
    assert knobs.read(_worker_args("", "--router-mode kv"), ["router_mode"]) == {"router_mode": "kv"}
    moved = knobs.changed_knobs(_worker_args("", "--router-mode kv"), _worker_args("", "--router-mode round-robin"),
                                ["router_mode"])
    assert moved == {"router_mode": ("kv", "round-robin")}
