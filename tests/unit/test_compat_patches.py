"""Compatibility patches at our own boundary: the RFC 6902 applier and its performance guard, the
handed-over patch file, the patches the cluster's objects justify, and the identical-retry refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deploy_suite.errors import InputError
from deploy_suite.judges import compat
from deploy_suite.model import patches
from deploy_suite.model.dgd import from_documents
from deploy_suite.procedure import compat_patches
from deploy_suite.procedure.validate import _unchanged_retry
from deploy_suite.yamlio import dump_all, load_all

WORKER = "/spec/services/VllmWorker/extraPodSpec"


def dgd(selector: dict[str, str] | None = None, tolerations: list[Any] | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {"mainContainer": {"image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.1",
                                             "args": ["python3 -m dynamo.vllm --model Qwen/Qwen3-0.6B"]}}
    if selector is not None:
        pod["nodeSelector"] = selector
    if tolerations is not None:
        pod["tolerations"] = tolerations
    return {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment", "metadata": {"name": "d"},
            "spec": {"services": {
                "Frontend": {"componentType": "frontend", "replicas": 1,
                             "extraPodSpec": {"mainContainer": {"image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.1",
                                                                "args": ["python3 -m dynamo.frontend"]}}},
                "VllmWorker": {"componentType": "worker", "replicas": 1, "resources": {"limits": {"gpu": "1"}},
                               "extraPodSpec": pod}}}}


def node(name: str, product: str, taints: list[dict[str, str]] = (), **labels: str) -> dict[str, Any]:  # type: ignore[assignment]
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product, **labels}},
            "spec": {"taints": list(taints)}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}


# ------------------------------------------------------------------ the applier and its guard


def test_a_scheduling_patch_applies_and_records_each_pointer_before_and_after() -> None:
    docs = [dgd({"pool": "gpu-a"})]
    proposal = patches.Proposal("deploy", ({"op": "replace", "path": f"{WORKER}/nodeSelector/pool", "value": "b"},),
                                "the pool is named b here")
    out, changes = patches.apply(docs, proposal)
    assert out[0]["spec"]["services"]["VllmWorker"]["extraPodSpec"]["nodeSelector"] == {"pool": "b"}
    assert docs[0]["spec"]["services"]["VllmWorker"]["extraPodSpec"]["nodeSelector"] == {"pool": "gpu-a"}  # untouched
    assert [c.as_dict() for c in changes] == [{"op": "replace", "pointer": f"{WORKER}/nodeSelector/pool",
                                               "before": "gpu-a", "after": "b"}]


@pytest.mark.parametrize(("op", "named"), [
    ({"op": "replace", "path": f"{WORKER}/mainContainer/args/0", "value": "python3 -m dynamo.vllm --model other"},
     "command and arguments"),
    ({"op": "replace", "path": "/spec/services/VllmWorker/replicas", "value": 2}, "replicas"),
    ({"op": "replace", "path": "/spec/services/VllmWorker/resources/limits/gpu", "value": "2"}, "GPUs per pod"),
    ({"op": "replace", "path": f"{WORKER}/mainContainer/image", "value": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.7"},
     "image tag"),
    ({"op": "add", "path": f"{WORKER}/mainContainer/env", "value": [{"name": "DYN_ROUTER_MODE", "value": "kv"}]},
     "environment"),
    ({"op": "remove", "path": "/spec/services/Frontend"}, "component Frontend removed"),
])
def test_an_operation_on_a_performance_setting_is_refused_naming_it(op: dict[str, Any], named: str) -> None:
    with pytest.raises(patches.PatchRefused, match="performance setting") as err:
        patches.apply([dgd()], patches.Proposal("deploy", (op,), "why"))
    assert named in str(err.value) and "operation 1" in str(err.value)


def test_a_registry_mirror_keeps_the_release_and_is_allowed() -> None:
    op = {"op": "replace", "path": f"{WORKER}/mainContainer/image", "value": "mirror.local/dynamo/vllm-runtime:0.6.1"}
    out, _ = patches.apply([dgd()], patches.Proposal("deploy", (op,), "air-gapped mirror"))
    assert from_documents(out).component("VllmWorker").image == "mirror.local/dynamo/vllm-runtime:0.6.1"


def test_an_operation_that_does_not_apply_is_refused() -> None:
    with pytest.raises(patches.PatchRefused, match="does not apply"):
        patches.apply([dgd()], patches.Proposal("deploy", ({"op": "test", "path": f"{WORKER}/nodeSelector/pool",
                                                             "value": "x"},), "why"))


def test_append_ops_create_each_missing_parent() -> None:
    doc = {"spec": {"components": [{"name": "w"}]}}
    ops = patches.append_ops(doc, "/spec/components/0/podTemplate/spec", "tolerations", [{"key": "k"}])
    out, _ = patches.apply([{"kind": "X", "metadata": {"name": "x"}, **doc}],
                           patches.Proposal("model-cache", ops, "why"))
    assert out[0]["spec"]["components"][0]["podTemplate"]["spec"]["tolerations"] == [{"key": "k"}]


# ------------------------------------------------------------------ the handed-over file


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


TYPES = {"deploy.yaml": "deploy", "model-cache.yaml": "model-cache"}


def test_a_handed_patch_file_is_read_with_its_hash(tmp_path: Path) -> None:
    f = write(tmp_path / "p.yaml", f"reason: pool renamed\nfile: deploy.yaml\noperations:\n"
                                   f"  - {{op: replace, path: {WORKER}/nodeSelector/pool, value: b}}\n")
    proposal = patches.read_handed(f, "--compat-patch p.yaml", TYPES)
    assert (proposal.file_type, proposal.reason, proposal.source) == ("deploy", "pool renamed", "handed-over")
    assert proposal.patch_sha256 and len(proposal.patch_sha256) == 64


@pytest.mark.parametrize(("text", "said"), [
    ("file: deploy.yaml\noperations: [{op: remove, path: /x}]\n", "has no reason"),
    ("reason: r\nfile: other.yaml\noperations: [{op: remove, path: /x}]\n", "no run-scoped copy"),
    ("reason: r\noperations: []\n", "has no operations"),
    ("reason: r\noperations: [{op: frobnicate, path: /x}]\n", "not an RFC 6902 operation"),
    ("reason: r\noperations: [{op: remove, path: /x}]\nextra: 1\n", "unknown key"),
])
def test_a_bad_patch_file_is_one_line_naming_it(tmp_path: Path, text: str, said: str) -> None:
    with pytest.raises(InputError, match=said) as err:
        patches.read_handed(write(tmp_path / "p.yaml", text), "--compat-patch p.yaml", TYPES)
    assert "\n" not in err.value.problem and err.value.fix


def test_handed_patches_apply_once_and_are_re_applied_to_a_copy_made_again(tmp_path: Path) -> None:
    copy = tmp_path / "deploy.yaml"
    copy.write_text(dump_all([dgd({"pool": "a"})]))
    f = write(tmp_path / "p.yaml", f"reason: pool renamed\noperations:\n  - {{op: add, path: {WORKER}/tolerations, "
                                   "value: [{key: k, operator: Exists}]}\n")
    made, skipped = compat_patches.apply_handed(f, {"deploy": copy}, set(), [], tmp_path)
    assert [p.source for p in made] == ["handed-over"] and not skipped
    recorded = [p.as_dict() for p in made]
    assert recorded[0]["operations"] and recorded[0]["patch_file"] == "p.yaml"
    patched = copy.read_text()
    # The same command again on the kept copy: nothing applied twice.
    made, skipped = compat_patches.apply_handed(f, {"deploy": copy}, set(), recorded, tmp_path)
    assert made == [] and skipped and copy.read_text() == patched
    # The copy made again from its source: the recorded patch comes back, once.
    copy.write_text(dump_all([dgd({"pool": "a"})]))
    made, _ = compat_patches.apply_handed(f, {"deploy": copy}, {"deploy.yaml"}, recorded, tmp_path)
    assert len(made) == 1 and copy.read_text() == patched


def test_a_refused_handed_patch_writes_nothing(tmp_path: Path) -> None:
    copy = tmp_path / "deploy.yaml"
    copy.write_text(dump_all([dgd({"pool": "a"})]))
    before = copy.read_text()
    f = write(tmp_path / "p.yaml", f"reason: faster\noperations:\n"
                                   f"  - {{op: replace, path: {WORKER}/nodeSelector/pool, value: b}}\n"
                                   f"  - {{op: replace, path: /spec/services/VllmWorker/replicas, value: 4}}\n")
    with pytest.raises(InputError, match=r"operation 2 .*replicas") as err:
        compat_patches.apply_handed(f, {"deploy": copy}, set(), [], tmp_path)
    assert err.value.input_name.startswith("--compat-patch") and copy.read_text() == before
    assert load_all(copy)[0]["spec"]["services"]["VllmWorker"]["replicas"] == 1


# ------------------------------------------------------------------ what the cluster justifies


def pointers(doc: dict[str, Any]) -> dict[str, str]:
    return patches.pod_spec_pointers(doc)


def test_a_documented_gpu_pool_taint_gets_an_exact_toleration_and_a_reservation_none() -> None:
    doc = dgd()
    nodes = [node("h200-0", "NVIDIA-H200", [{"key": "sku", "value": "gpu", "effect": "NoSchedule"},
                                              {"key": "dedicated", "value": "tenant-b", "effect": "NoSchedule"}]),
             node("h200-1", "NVIDIA-H200", [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]),
             node("h100-0", "NVIDIA-H100-80GB-HBM3")]  # another type: not the contract's pool
    (proposal,) = compat.gpu_pool_tolerations(from_documents([doc]), doc, nodes, ["H200"], pointers(doc))
    out, _ = patches.apply([doc], proposal)
    assert out[0]["spec"]["services"]["VllmWorker"]["extraPodSpec"]["tolerations"] == [
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    assert proposal.evidence["nodes"] == ["h200-0", "h200-1"]
    assert "learn.microsoft.com" in proposal.evidence["sources"][0]
    # A tenant's reservation on every node of the pool is never tolerated.
    reserved = [node("h200-0", "NVIDIA-H200", [{"key": "dedicated", "value": "tenant-b", "effect": "NoSchedule"}])]
    assert compat.gpu_pool_tolerations(from_documents([doc]), doc, reserved, ["H200"], pointers(doc)) == []
    # Already tolerated: nothing.
    tolerated = dgd(tolerations=[{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}])
    assert compat.gpu_pool_tolerations(from_documents([tolerated]), tolerated, nodes, ["H200"],
                                       pointers(tolerated)) == []


def test_a_taint_only_some_nodes_of_the_pool_carry_is_left_alone() -> None:
    doc = dgd()
    nodes = [node("h200-0", "NVIDIA-H200", [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]),
             node("h200-1", "NVIDIA-H200")]
    assert compat.gpu_pool_tolerations(from_documents([doc]), doc, nodes, ["H200"], pointers(doc)) == []


def test_a_gpu_product_selector_no_node_has_is_retargeted_to_the_contracts_hardware() -> None:
    doc = dgd({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "pool": "x"})
    nodes = [node("h200-0", "NVIDIA-H200"), node("h200-1", "NVIDIA-H200"), node("a100-0", "NVIDIA-A100-SXM4-80GB")]
    (proposal,) = compat.retarget_gpu_selectors(from_documents([doc]), doc, nodes, ["H200"], pointers(doc))
    out, changes = patches.apply([doc], proposal)
    assert out[0]["spec"]["services"]["VllmWorker"]["extraPodSpec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H200", "pool": "x"}  # a custom pool label is never retargeted
    assert [c.pointer for c in changes] == [f"{WORKER}/nodeSelector/nvidia.com~1gpu.product"]
    # A selector some node satisfies is no mismatch; two candidate values would be a guess.
    doc_a100 = dgd({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    assert compat.retarget_gpu_selectors(from_documents([doc_a100]), doc_a100, nodes, ["H200"],
                                         pointers(doc_a100)) == []
    two = [node("h200-0", "NVIDIA-H200"), node("h200-1", "NVIDIA-H200-NVL")]
    assert compat.retarget_gpu_selectors(from_documents([doc]), doc, two, ["H200"], pointers(doc)) == []


def test_a_required_affinity_keeps_its_mechanism() -> None:
    doc = dgd()
    doc["spec"]["services"]["VllmWorker"]["extraPodSpec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-h100-80gb"]}]}]}}}
    nodes = [node("h200-0", "NVIDIA-H200", **{"cloud.google.com/gke-accelerator": "nvidia-h200-141gb"})]
    (proposal,) = compat.retarget_gpu_selectors(from_documents([doc]), doc, nodes, ["H200"], pointers(doc))
    out, _ = patches.apply([doc], proposal)
    expr = out[0]["spec"]["services"]["VllmWorker"]["extraPodSpec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert expr == {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-h200-141gb"]}


def pv(name: str, size: str = "100Gi", modes: tuple[str, ...] = ("ReadWriteMany",), phase: str = "Available",
       cls: str | None = None, claim: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"capacity": {"storage": size}, "accessModes": list(modes)}
    if cls is not None:
        spec["storageClassName"] = cls
    if claim:
        spec["claimRef"] = {"name": claim, "namespace": "ns"}
    return {"metadata": {"name": name}, "spec": spec, "status": {"phase": phase}}


CLAIM = {"metadata": {"name": "model-cache", "namespace": "ns"},
         "spec": {"storageClassName": "", "accessModes": ["ReadWriteMany"],
                  "resources": {"requests": {"storage": "50Gi"}}}}


@pytest.mark.parametrize(("volume", "binds"), [
    (pv("nfs"), True), (pv("small", size="10Gi"), False), (pv("rwo", modes=("ReadWriteOnce",)), False),
    (pv("bound", phase="Bound"), False), (pv("classed", cls="fast"), False),
    (pv("other", claim="someone-else"), False), (pv("mine", claim="model-cache"), True),
])
def test_a_pre_provisioned_claim_binds_only_a_volume_the_pv_controller_would_give_it(
        volume: dict[str, Any], binds: bool) -> None:
    assert compat.binds(CLAIM, volume) is binds


# ------------------------------------------------------------------ retry only after a concrete fix


def test_the_same_copies_after_a_failed_attempt_are_refused_unless_a_cluster_fix_is_named() -> None:
    last = {"at": "2026-12-05T01:00:00Z", "diagnosis": "selector mismatch", "manifests": {"deploy": "a" * 64}}
    message, fix = _unchanged_retry(last, {"deploy": "a" * 64}, None) or ("", "")
    assert "retry only after a concrete fix" in message and "selector mismatch" in message and "--compat-patch" in fix
    assert _unchanged_retry(last, {"deploy": "b" * 64}, None) is None
    assert _unchanged_retry(last, {"deploy": "a" * 64}, "the admin removed the taint") is None
    assert _unchanged_retry({"at": "t", "diagnosis": "d"}, {"deploy": "a" * 64}, None) is None  # an older ledger
    assert _unchanged_retry(None, {"deploy": "a" * 64}, None) is None


def test_an_append_is_recorded_at_the_index_it_took() -> None:
    doc = dgd(tolerations=[{"key": "a", "operator": "Exists"}])
    op = {"op": "add", "path": f"{WORKER}/tolerations/-", "value": {"key": "sku", "operator": "Equal", "value": "gpu"}}
    _, (change,) = patches.apply([doc], patches.Proposal("deploy", (op,), "why"))
    assert change.as_dict() == {"op": "add", "pointer": f"{WORKER}/tolerations/1", "before": None,
                                "after": {"key": "sku", "operator": "Equal", "value": "gpu"}}
