"""Unit tests of the knob table for resources.pinned (deploy_suite.model.knobs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy_suite.model import knobs
from deploy_suite.model.dgd import Dgd, load_dgd

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
