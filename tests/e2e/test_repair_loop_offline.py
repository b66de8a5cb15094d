"""The repair loop inside an iteration, on the offline cluster, as a user runs `pytest --iter=N`
(issue: no dead end on real-cluster variants).

* a least-privilege identity (nodes unreadable, so step 2 cannot see it) deploys a DGD whose worker
  selects a custom pool label no node has: step 6 counts a failed attempt before the teardown; the
  same copies again are refused ("retry only after a concrete fix"); a handed-over patch touching an
  engine argument is refused with one line and nothing applied; the handed-over selector fix ends
  ready on the rerun of the same iteration, in the same directory;
* a managed cluster's variants (``cloud-variants`` layout: the GPU pool tainted as AKS documents, a
  tenant's reservation taint, no default storage class): the sample ends ready with the recorded
  patches (an exact toleration of ``sku=gpu``, the contract's class on the classless claim) and
  never a toleration of the reservation; a GPU-product selector no node has is retargeted to the
  contract's hardware; a claim on a pre-provisioned volume (``storageClassName: ""``) is blocked
  before any mutation until the volume exists, then binds it, never rewritten.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_suite import yamlio
from deploy_suite.access.kube import DGD, Kube
from deploy_suite.record import ledger
from deploy_suite_offline.cluster import OfflineCluster
from deploy_suite_offline.fixtures.identities import Identity
from tests import support
from tests.support import SuiteRun, outcomes

pytestmark = [pytest.mark.cluster]

DATA = Path(__file__).with_name("data")
WORKER_SPEC = "/spec/components/1/podTemplate/spec"  # dgd-pool-label.yaml's VllmDecodeWorker
READINESS = "--timeout-readiness=120"


def deploy_copy(exp_root: Path) -> Path:
    return exp_root / "artifacts" / "deploy-iter-000" / "applied_manifests" / "deploy.yaml"


def write_patch(path: Path, reason: str, operations: list[dict[str, Any]]) -> Path:
    path.write_text(yamlio.dump({"reason": reason, "file": "deploy.yaml", "operations": operations}), encoding="utf-8")
    return path


def finished(run: SuiteRun) -> dict[str, Any]:
    data = run.ledger()
    ledger.validate(data)  # every ledger the loop leaves is valid against the schema
    return data


# ------------------------------------------------------------------ the loop, least privilege


def test_a_selector_no_node_has_is_a_counted_attempt_then_a_handed_fix_ends_ready(
        offline_cluster: OfflineCluster, cluster_kube: Kube, deployer_identity: Identity, tmp_path: Path) -> None:
    identity = deployer_identity
    exp = support.write_experiment(tmp_path / "scratch", context=identity.context, namespace=identity.namespace,
                                   dgd=DATA / "dgd-pool-label.yaml", support={})
    reports = tmp_path / "reports"

    def run(*args: str) -> SuiteRun:
        return support.run_suite(exp.exp_root, 0, identity.kubeconfig, reports, READINESS, *args)

    first = run()
    led = finished(first)
    assert first.returncode != 0 and led["status"] == "failed", (outcomes(led), led["blockers"])
    assert "node list forbidden" in "\n".join(map(str, led["limitations"]))  # step 2 could not see the mismatch
    (attempt,) = led["failed_attempts"]
    assert attempt["step"] == "step6_readiness" and attempt["category"] == "failed-deploy"
    assert "selector" in attempt["diagnosis"]
    assert attempt["manifests"]["deploy"] == led["applied_manifests"][0]["sha256"]
    assert led["teardown"]["action"] == "deleted"  # its GPUs freed, after the attempt was counted
    assert cluster_kube.get_or_none(DGD, "e2e-pool", identity.namespace) is None

    # The same copies again: refused before any mutation, naming the way out.
    again = run()
    led = finished(again)
    assert again.returncode != 0 and led["status"] == "blocked" and outcomes(led)["step2_validate"] == "blocked"
    assert "retry only after a concrete fix" in led["blockers"][-1]["message"]
    assert "--compat-patch" in led["blockers"][-1]["fix"] and len(led["failed_attempts"]) == 1
    assert cluster_kube.get_or_none(DGD, "e2e-pool", identity.namespace) is None

    # A "fix" that also changes an engine argument: one line, nothing applied, recorded.
    copy = deploy_copy(exp.exp_root)
    before = copy.read_bytes()
    greedy = write_patch(tmp_path / "greedy.yaml", "run on the H200 pool, and a longer context", [
        {"op": "replace", "path": f"{WORKER_SPEC}/nodeSelector", "value": {"nvidia.com/gpu.product": "NVIDIA-H200"}},
        {"op": "add", "path": f"{WORKER_SPEC}/containers/0/args/-", "value": "--max-model-len=32768"}])
    refused = run(f"--compat-patch={greedy}")
    led = finished(refused)
    assert refused.returncode != 0 and led["status"] == "blocked" and outcomes(led)["step1_inputs"] == "blocked"
    (line,) = [b["message"] for b in led["blockers"] if b["step"] == "step1_inputs"]
    assert "--compat-patch" in line and "operation 2" in line and "performance setting" in line, line
    assert "\n" not in line and copy.read_bytes() == before
    assert not [p for p in led["patches"] if p.get("source") == "handed-over"]

    # The concrete fix: the selector retargeted to the contract's hardware, the mechanism kept.
    fix = write_patch(tmp_path / "fix.yaml", "the target cluster has no example.com/gpu-pool label; its H200 "
                      "nodes carry GPU Feature Discovery's product label", [
                          {"op": "remove", "path": f"{WORKER_SPEC}/nodeSelector/example.com~1gpu-pool"},
                          {"op": "add", "path": f"{WORKER_SPEC}/nodeSelector/nvidia.com~1gpu.product",
                           "value": "NVIDIA-H200"}])
    fixed = run(f"--compat-patch={fix}")
    led = finished(fixed)
    assert fixed.returncode == 0 and led["status"] == "ready", (outcomes(led), led["blockers"], fixed.output[-3000:])
    (handed,) = [p for p in led["patches"] if p.get("source") == "handed-over"]
    assert [(c["op"], c["before"], c["after"]) for c in handed["changes"]] == [
        ("remove", "pool-a", None), ("add", None, "NVIDIA-H200")]
    assert handed["patch_sha256"] and handed["reason"].startswith("the target cluster")
    assert len(led["failed_attempts"]) == 1 and len(led["resumes"]) == 3  # one directory, one iteration
    # applied_manifests/ holds exactly the files that produced the success.
    assert sorted(p.name for p in copy.parent.iterdir()) == ["deploy.yaml"]
    assert yamlio.load_one(copy)["spec"]["components"][1]["podTemplate"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H200"}
    pods = cluster_kube.list_items("Pod", identity.namespace,
                                   label_selector="nvidia.com/dynamo-graph-deployment-name=e2e-pool")[0]
    assert {p["spec"]["nodeName"] for p in pods if (p["spec"].get("nodeSelector") or {})} <= {"h200-0", "h200-1"}


# ------------------------------------------------------------------ managed-cluster variants


class Target(support.Target):
    def experiment(self, dgd: str | Path | None = None, **kwargs: Any) -> Any:
        return super().experiment(DATA / dgd if isinstance(dgd, str) else dgd, **kwargs)


@pytest.fixture
def cloud(offline_clusters: Any, tmp_path: Path) -> Iterator[Target]:
    with support.admin_target(offline_clusters.get("cloud-variants"), tmp_path, "cloud", Target) as made:
        yield made


def test_an_aks_gpu_pool_and_no_default_class_end_ready_with_recorded_patches(cloud: Target) -> None:
    exp = cloud.experiment(support={"model-cache": DATA / "model-cache-classless.yaml",
                                    "model-download": support.SAMPLE_SUPPORT / "model-download.yaml"})
    run = cloud.run(exp, READINESS)
    led = finished(run)
    assert run.returncode == 0 and led["status"] == "ready", (outcomes(led), led["blockers"], run.output[-3000:])
    by_file = {Path(p["file"]).name: p for p in led["patches"]}
    toleration = by_file["deploy.yaml"]
    assert [c["after"] for c in toleration["changes"] if "/tolerations/" in c["pointer"]] == [
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    assert "VllmDecodeWorker" in toleration["reason"] and toleration["evidence"]["nodes"] == ["h200-0", "h200-1"]
    claim = by_file["model-cache.yaml"]
    assert claim["changes"] == [{"op": "add", "pointer": "/spec/storageClassName", "before": None,
                                 "after": "standard"}]
    assert claim["evidence"]["default_class"] is None
    live = cloud.kube.get(DGD, "demo-agg", cloud.namespace)["spec"]["services"]
    assert "tolerations" not in live["Frontend"].get("extraPodSpec", {})  # CPU-only: nothing added
    tolerations = live["VllmDecodeWorker"]["extraPodSpec"]["tolerations"]
    assert not [t for t in tolerations if t.get("key") == "dedicated"]  # a reservation is never tolerated
    assert cloud.kube.get("PersistentVolumeClaim", "model-cache", cloud.namespace)["status"]["phase"] == "Bound"


def test_a_gpu_product_selector_no_node_has_is_retargeted_to_the_contracts_hardware(cloud: Target) -> None:
    run = cloud.run(cloud.experiment("dgd-a100-selector.yaml", support={}), READINESS)
    led = finished(run)
    assert run.returncode == 0 and led["status"] == "ready", (outcomes(led), led["blockers"])
    (retarget,) = [p for p in led["patches"] if "nodeSelector" in p["change"]]
    assert retarget["changes"] == [{
        "op": "replace", "before": "NVIDIA-A100-SXM4-80GB", "after": "NVIDIA-H200",
        "pointer": "/spec/components/1/podTemplate/spec/nodeSelector/nvidia.com~1gpu.product"}]
    assert retarget["evidence"]["gpu_types"] == ["H200"]
    pods = cloud.kube.list_items("Pod", cloud.namespace,
                                 label_selector="nvidia.com/dynamo-graph-deployment-name=e2e-a100")[0]
    assert {p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeSelector")} <= {"h200-0", "h200-1"}


def test_a_claim_on_a_pre_provisioned_volume_waits_for_it_and_is_never_rewritten(cloud: Target) -> None:
    exp = cloud.experiment(support={"model-cache": DATA / "model-cache-preprovisioned.yaml",
                                    "model-download": support.SAMPLE_SUPPORT / "model-download.yaml"})
    blocked = cloud.run(exp, READINESS)
    led = finished(blocked)
    assert blocked.returncode != 0 and led["status"] == "blocked" and outcomes(led)["step2_validate"] == "blocked"
    (line,) = [b for b in led["blockers"] if b["class"] == "pvc"]
    assert 'storageClassName ""' in line["message"] and "PersistentVolume" in line["fix"]
    assert not [c for c in led["commands"] if c["kind"] == "mutate"]  # nothing created, nothing applied
    volume = f"nfs-model-cache-{cloud.namespace}"
    cloud.kube.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume}, "spec": {
        "capacity": {"storage": "200Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
        "persistentVolumeReclaimPolicy": "Retain", "nfs": {"server": "nfs.example.internal", "path": "/models"},
        "claimRef": {"namespace": cloud.namespace, "name": "model-cache"}}})
    try:
        ready = cloud.run(exp, READINESS)
        led = finished(ready)
        assert ready.returncode == 0 and led["status"] == "ready", (outcomes(led), led["blockers"])
        assert not [p for p in led["patches"] if "model-cache" in p["file"]]
        copy = exp.exp_root / "artifacts" / "deploy-iter-000" / "applied_manifests" / "model-cache.yaml"
        assert yamlio.load_one(copy)["spec"]["storageClassName"] == ""
        claim = cloud.kube.get("PersistentVolumeClaim", "model-cache", cloud.namespace)
        assert claim["spec"]["volumeName"] == volume and claim["status"]["phase"] == "Bound"
    finally:
        cloud.kube.delete("PersistentVolume", volume)


def test_a_mixed_scheduler_message_without_node_reads_ends_at_the_no_progress_bound(
        offline_cluster: OfflineCluster, cluster_kube: Kube, deployer_identity: Identity, tmp_path: Path) -> None:
    """Another tenant holds a GPU on each H200 node: the 8-GPU worker meets "2 Insufficient nvidia.com/gpu"
    beside nodes excluded by the selector and a reservation taint. Without node reads that is no
    verified contention: the wait ends at the no-progress bound (blocked, kept, not charged), never at
    the readiness cap, naming both fixes."""
    identity = deployer_identity
    for node in ("h200-0", "h200-1"):
        holder = {"name": "main", "image": "registry.local/holder:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        cluster_kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"holder-{node}"},
                             "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [holder]}},
                            identity.namespace)
    exp = support.write_experiment(tmp_path / "scratch", context=identity.context, namespace=identity.namespace,
                                   dgd=DATA / "dgd-contention.yaml", support={})
    run = support.run_suite(exp.exp_root, 0, identity.kubeconfig, tmp_path / "reports",
                            "--timeout-readiness=900", "--timeout-readiness-no-progress=30")
    led = finished(run)
    assert run.returncode != 0 and led["status"] == "blocked", (outcomes(led), led["blockers"])
    (blocker,) = [b for b in led["blockers"] if b["step"] == "step6_readiness"]
    assert blocker["class"] == "no-progress" and led["failed_attempts"] == []
    stuck = "\n".join(map(str, led["readiness"]["last_progress"]["stuck"]))
    assert "cannot be told" in stuck and "--compat-patch" in stuck, stuck
    assert outcomes(led)["step6_readiness"] == "blocked"
    step6 = next(s for s in led["steps"] if s["name"] == "step6_readiness")
    assert step6["duration_s"] < 300  # the no-progress bound, far below the 900 s cap
    assert led["teardown"]["action"] == "kept"  # not the candidate's failure: nothing deleted
