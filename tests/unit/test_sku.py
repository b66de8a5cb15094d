"""The GPU SKU check of step 2 (deploy_suite.judges.sku, called by validate.Validator.check_sku) and the
capacity answer for a DGD without GPUs (validate.Validator.check_capacity)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deploy_suite.judges import sku
from deploy_suite.model.dgd import load_dgd, parse_dgd
from deploy_suite.procedure.validate import ValidationInputs, Validator

GPU = "nvidia.com/gpu"
PRODUCT = "nvidia.com/gpu.product"
MEMORY = "nvidia.com/gpu.memory"
MOCKER = Path(__file__).parents[1] / "e2e" / "data" / "dgd-mocker.yaml"
RESERVED = ("example.com/reserved-for", "tenant-b", "NoSchedule")


def node(name: str, product: str | None, gpus: int = 8, taint: tuple[str, str, str] | None = None,
         memory_mib: int | None = None) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, **({PRODUCT: product} if product else {}),
              **({MEMORY: str(memory_mib)} if memory_mib else {})}
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"taints": [dict(zip(("key", "value", "effect"), taint, strict=True))] if taint else []},
            "status": {"allocatable": {GPU: str(gpus)}}}


# The offline cluster's default layout (offline/deploy_suite_offline/pools/default.yaml).
DEFAULT_POOL = [node("h200-0", "NVIDIA-H200"), node("h200-1", "NVIDIA-H200"),
                node("h100-reserved-0", "NVIDIA-H100-80GB-HBM3", taint=RESERVED), node("cpu-0", None, gpus=0)]


def dgd(gpus: int = 1, pod_spec: str = "") -> Any:
    return parse_dgd(f"""
apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata: {{name: t}}
spec:
  services:
    Frontend: {{componentType: frontend, extraPodSpec: {{mainContainer: {{image: x}}}}}}
    W:
      componentType: worker
      resources: {{limits: {{gpu: "{gpus}"}}}}
      extraPodSpec:
        mainContainer: {{image: x}}
{pod_spec}
""")


TOLERATES_RESERVED = "        tolerations: [{key: example.com/reserved-for, operator: Exists}]"
ON_H100 = TOLERATES_RESERVED + f"\n        nodeSelector: {{{PRODUCT}: NVIDIA-H100-80GB-HBM3}}"


@pytest.mark.parametrize(("gpu_type", "product", "matches"), [
    ("H200", "NVIDIA-H200", True),
    ("H100", "NVIDIA-H100-80GB-HBM3", True),
    ("h100", "NVIDIA-H100-80GB-HBM3", True),
    ("NVIDIA H100", "NVIDIA-H100-80GB-HBM3", True),
    ("A100-80GB", "NVIDIA-A100-SXM4-80GB", True),
    ("A100-40GB", "NVIDIA-A100-SXM4-80GB", False),
    ("H200", "NVIDIA-H100-80GB-HBM3", False),
    ("B200", "NVIDIA-GB200", False),
    ("H100", "", False),
])
def test_gpu_type_matches_the_gfd_product_label(gpu_type: str, product: str, matches: bool) -> None:
    assert sku.sku_matches(gpu_type, product) is matches


# gpu_type as workloads write it against GFD's product label (the NVML name, spaces as dashes:
# NVIDIA/gpu-feature-discovery README, "Generated Labels") and its gpu.memory label in MiB.
@pytest.mark.parametrize(("gpu_type", "product", "memory_mib", "verdict"), [
    ("H200 141GB", "NVIDIA-H200", "143771", "match"),  # the offline pool's H200 (pools/default.yaml)
    ("H200 141GB", "NVIDIA-H200", "", "ambiguous"),  # no memory label: cannot tell
    ("H200 141GB", "NVIDIA-H100-80GB-HBM3", "81559", "other"),
    ("H100 80GB", "NVIDIA-H200", "143771", "other"),
    ("H100 SXM", "NVIDIA-H100-80GB-HBM3", "81559", "ambiguous"),  # the SXM5 card's name says no form factor
    ("H100 SXM", "NVIDIA-H100-PCIe", "81559", "other"),
    ("H100 NVL", "NVIDIA-H100-NVL", "95830", "match"),
    ("H100 80GB", "NVIDIA-H100-NVL", "95830", "other"),  # 94 GB
    ("GB200 NVL72", "NVIDIA-GB200", "", "match"),  # NVL72 names the rack
    ("B200", "NVIDIA-GB200", "", "other"),
    ("A100 80GB PCIe", "NVIDIA-A100-80GB-PCIe", "81920", "match"),
    ("A100 80GB PCIe", "NVIDIA-A100-SXM4-80GB", "81920", "other"),
    ("A100 SXM4 40GB", "NVIDIA-A100-SXM4-40GB", "40960", "match"),
    ("A100 40GB", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "4864", "match"),  # MIG single strategy
    ("L40S", "NVIDIA-L40S", "46068", "match"),
    ("L40", "NVIDIA-L40S", "46068", "other"),
])
def test_gpu_names_are_compared_by_family_memory_and_form_factor(gpu_type: str, product: str, memory_mib: str,
                                                               verdict: str) -> None:
    assert sku.sku_match(gpu_type, product, memory_mib) == verdict


def test_an_ambiguous_match_warns_and_never_blocks() -> None:
    nodes = [node("h100-0", "NVIDIA-H100-80GB-HBM3", memory_mib=81559)]
    result = sku.check_sku(dgd(), nodes, ["H100 SXM"])
    assert result.outcome == "unverified" and not result.blockers
    (warning,) = result.warnings
    assert "does not say its memory or form factor" in warning and "h100-0 (NVIDIA-H100-80GB-HBM3)" in warning
    assert sku.check_sku(dgd(), nodes, ["H100 PCIe"]).outcome == "unverified"
    assert sku.check_sku(dgd(), [node("p-0", "NVIDIA-H100-PCIe")], ["H100 SXM"]).outcome == "mismatch"


def test_a_marketing_name_matches_the_offline_pools_h200_by_its_memory_label() -> None:
    pool = [node("h200-0", "NVIDIA-H200", memory_mib=143771), node("h200-1", "NVIDIA-H200", memory_mib=143771)]
    result = sku.check_sku(dgd(), pool, ["H200 141GB"])
    assert result.outcome == "matches" and not result.warnings


def test_pods_that_can_only_land_on_the_expected_type_match() -> None:
    result = sku.check_sku(dgd(), DEFAULT_POOL, ["H200"])
    assert result.outcome == "matches" and not result.blockers and not result.warnings
    assert result.components["W"] == {"matching": ["h200-0", "h200-1"], "ambiguous": [], "other": [], "unlabelled": []}
    assert "Frontend" not in result.components  # no GPU: never compared


def test_pods_that_can_only_land_on_another_type_are_a_blocker_naming_the_nodes() -> None:
    result = sku.check_sku(dgd(pod_spec=ON_H100), DEFAULT_POOL, ["H200"])
    assert result.outcome == "mismatch"
    (blocker,) = result.blockers
    assert "hardware[].gpu_type H200" in blocker and "h100-reserved-0 (NVIDIA-H100-80GB-HBM3)" in blocker


def test_pods_that_could_land_on_another_type_get_a_warning_naming_those_nodes() -> None:
    result = sku.check_sku(dgd(pod_spec=TOLERATES_RESERVED), DEFAULT_POOL, ["H200"])
    assert result.outcome == "other types possible" and not result.blockers
    (warning,) = result.warnings
    assert "could land on another GPU type" in warning and "h100-reserved-0 (NVIDIA-H100-80GB-HBM3)" in warning
    assert "h200-0" not in warning


def test_any_of_several_expected_types_matches() -> None:
    result = sku.check_sku(dgd(pod_spec=TOLERATES_RESERVED), DEFAULT_POOL, ["H200", "H100"])
    assert result.outcome == "matches"


def test_unlabelled_gpu_nodes_cannot_be_judged_and_never_block() -> None:
    nodes = [node("gpu-0", None), node("h100-0", "NVIDIA-H100-80GB-HBM3")]
    result = sku.check_sku(dgd(), nodes, ["H200"])
    assert result.outcome == "other types possible" and not result.blockers
    unlabelled, other = result.warnings
    assert "without a nvidia.com/gpu.product label" in unlabelled and "gpu-0" in unlabelled
    assert "another GPU type" in other and "h100-0" in other
    only_unlabelled = sku.check_sku(dgd(), [node("gpu-0", None)], ["H200"])
    assert only_unlabelled.outcome == "unverified" and len(only_unlabelled.warnings) == 1


def test_many_nodes_of_another_type_are_counted_not_listed() -> None:
    nodes = [node(f"h100-{i:02d}", "NVIDIA-H100-80GB-HBM3") for i in range(40)]
    (blocker,) = sku.check_sku(dgd(), nodes, ["H200"]).blockers
    assert "h100-04" in blocker and "h100-05" not in blocker and "and 35 more" in blocker


def test_a_dgd_without_gpus_needs_no_sku_and_no_expected_type_checks_nothing() -> None:
    assert sku.check_sku(load_dgd(MOCKER), DEFAULT_POOL, ["H200"]).outcome == "not needed"
    assert sku.check_sku(dgd(pod_spec=ON_H100), DEFAULT_POOL, []).outcome == "not checked"


# ------------------------------------------------------------------ through the validator


class NoKube:
    """Step 2 for a GPU-less DGD asks the cluster nothing about capacity."""

    context = "ctx"

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected cluster call {name}")


def validator(tmp_path: Path, gpu_type: str = "H200") -> Validator:
    inputs = ValidationInputs(namespace="ns", deploy_path=tmp_path / "deploy.yaml", support_paths={},
                              baseline_dgd_path=None, workload={"hardware": [{"gpu_type": gpu_type, "gpu_count": 8}]},
                              display_root=tmp_path)
    return Validator(NoKube(), inputs)  # type: ignore[arg-type]


def test_the_validator_blocks_a_sku_mismatch_and_records_the_evidence(tmp_path: Path) -> None:
    v = validator(tmp_path)
    v.nodes = DEFAULT_POOL
    v.check_sku(dgd(pod_spec=ON_H100))
    (finding,) = v.report.blockers
    assert finding.category == "gpu-sku" and "h100-reserved-0" in finding.message and "nodeSelector" in finding.fix
    assert v.report.evidence["gpu_sku"]["outcome"] == "mismatch"


def test_the_validator_skips_the_sku_check_when_nodes_cannot_be_listed(tmp_path: Path) -> None:
    v = validator(tmp_path)
    v.check_sku(dgd(pod_spec=ON_H100))
    assert not v.report.blockers and "gpu_sku" not in v.report.evidence


def test_capacity_of_a_gpu_less_dgd_is_not_needed_even_without_a_node_list(tmp_path: Path) -> None:
    v = validator(tmp_path)  # nodes None: the list was forbidden
    v.check_capacity(load_dgd(MOCKER))
    assert v.report.capacity is not None
    assert v.report.capacity["capacity"] == "not needed" and v.report.capacity["reasons"] == ["no GPU requested"]
    assert v.report.ok and not v.report.limitations
