"""The offline fake-GPU cluster behaves like a real one: scheduling, events, Jobs, storage, GC."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from deploy_suite.access.kube import Kube, Obj
from deploy_suite.access.watch import Watch
from deploy_suite.errors import StepFailure
from deploy_suite_offline import binaries, procs
from deploy_suite_offline.cluster import OfflineCluster, workdir

pytestmark = pytest.mark.cluster
CLI = [sys.executable, "-m", "deploy_suite.cli"]


def pod(name: str, gpus: int = 0, **spec: Any) -> Obj:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "busybox", "resources": resources}], **spec}}


def wait_scheduled(kube: Kube, ns: str, name: str) -> Obj:
    def scheduled(objs: dict[str, Obj]) -> tuple[bool, str]:
        p = objs.get(f"{ns}/{name}")
        node = (p or {}).get("spec", {}).get("nodeName")
        phase = (p or {}).get("status", {}).get("phase")
        return bool(node) and phase == "Running", f"node={node} phase={phase}"

    return kube.wait_for(Watch("Pod", ns, name=name), scheduled, awaited=f"pod {name} Running",
                         timeout=30).objects[f"{ns}/{name}"]


def wait_failed_scheduling(kube: Kube, ns: str, name: str) -> str:
    def has_event(objs: dict[str, Obj]) -> tuple[bool, str]:
        msgs = [e.get("message", "") for e in objs.values() if e.get("reason") == "FailedScheduling"]
        return bool(msgs), msgs[-1] if msgs else "no FailedScheduling event yet"

    state = kube.wait_for(Watch("Event", ns, field_selector=f"involvedObject.name={name}"), has_event,
                          awaited=f"FailedScheduling for {name}", timeout=30)
    return state.description


def test_nodes_report_gpu_capacity_and_gfd_labels(cluster_kube: Kube) -> None:
    nodes = {n["metadata"]["name"]: n for n in cluster_kube.list_items("Node")[0]}
    assert set(nodes) == {"h200-0", "h200-1", "h100-reserved-0", "cpu-0"}
    h200 = nodes["h200-0"]
    assert h200["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert h200["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    labels = h200["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.memory"] == "143771"
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["node.kubernetes.io/instance-type"] == "p5en.48xlarge"
    assert labels["topology.kubernetes.io/zone"] == "offline-a"
    assert "nvidia.com/gpu" not in nodes["cpu-0"]["status"]["allocatable"]
    assert nodes["h100-reserved-0"]["spec"]["taints"] == [
        {"key": "example.com/reserved-for", "value": "tenant-b", "effect": "NoSchedule"}]


def test_a_pod_asking_eight_gpus_schedules_on_an_h200_node(cluster_kube: Kube, scratch_namespace: str) -> None:
    cluster_kube.create(pod("eight", 8), scratch_namespace)
    placed = wait_scheduled(cluster_kube, scratch_namespace, "eight")
    assert placed["spec"]["nodeName"] in {"h200-0", "h200-1"}


def test_a_pod_asking_nine_gpus_stays_pending_with_insufficient_gpu(cluster_kube: Kube,
                                                                   scratch_namespace: str) -> None:
    cluster_kube.create(pod("nine", 9), scratch_namespace)
    message = wait_failed_scheduling(cluster_kube, scratch_namespace, "nine")
    assert "Insufficient nvidia.com/gpu" in message
    got = cluster_kube.get("Pod", "nine", scratch_namespace)
    assert got["status"]["phase"] == "Pending" and not got["spec"].get("nodeName")


def test_a_pod_without_the_reservation_toleration_never_lands_on_the_reserved_node(
        cluster_kube: Kube, scratch_namespace: str) -> None:
    selector = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    cluster_kube.create(pod("h100", 1, nodeSelector=selector), scratch_namespace)
    message = wait_failed_scheduling(cluster_kube, scratch_namespace, "h100")
    # Kubernetes 1.36's scheduler says "had untolerated taint(s)" without the key (it logs the key
    # only at -v=4); the triage names it by matching node taints against the pod's tolerations.
    assert "1 node(s) had untolerated taint(s)" in message
    assert "3 node(s) didn't match Pod's node affinity/selector" in message
    assert not cluster_kube.get("Pod", "h100", scratch_namespace)["spec"].get("nodeName")
    # With the tolerations the tenant would have, the same pod does land there.
    tolerate = [{"key": "example.com/reserved-for", "operator": "Equal", "value": "tenant-b",
                 "effect": "NoSchedule"}]
    cluster_kube.create(pod("h100-tolerated", 1, nodeSelector=selector, tolerations=tolerate), scratch_namespace)
    assert wait_scheduled(cluster_kube, scratch_namespace, "h100-tolerated")["spec"]["nodeName"] == "h100-reserved-0"


def test_a_job_reaches_complete(cluster_kube: Kube, scratch_namespace: str) -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "model-download"},
           "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "dl", "image": "python:3.10-slim", "command": ["true"]}]}}}}
    cluster_kube.apply(job, scratch_namespace)

    def complete(objs: dict[str, Obj]) -> tuple[bool, str]:
        conds = [c["type"] for c in (objs.get(f"{scratch_namespace}/model-download") or {})
                 .get("status", {}).get("conditions", []) if c.get("status") == "True"]
        if "Failed" in conds:
            raise StepFailure("job failed")
        return "Complete" in conds, " ".join(conds) or "no condition yet"

    state = cluster_kube.wait_for(Watch("Job", scratch_namespace, name="model-download"), complete,
                                  awaited="job Complete", timeout=60)
    assert "Complete" in state.description


def test_the_controllers_outlive_an_apiserver_outage_longer_than_their_lease(offline_cluster: OfflineCluster,
                                                                             cluster_kube: Kube,
                                                                             scratch_namespace: str) -> None:
    """An apiserver slow to come back (as on a loaded machine) past the 10 s renew deadline of a
    leader lease: the controller manager and scheduler ride it out (``restart_component`` names any
    that exited meanwhile), and a Job still completes afterwards."""
    done = offline_cluster.restart_component("kube-apiserver", hard=True, hold=12.0)
    assert done.outage_s >= 12.0
    test_a_job_reaches_complete(cluster_kube, scratch_namespace)


@pytest.mark.parametrize(("storage_class", "mode", "size"), [
    ("standard", "ReadWriteMany", "2Ti"),
    ("local-wffc", "ReadWriteOnce", "500Gi"),
])
def test_a_model_cache_pvc_reaches_bound(cluster_kube: Kube, scratch_namespace: str, storage_class: str,
                                         mode: str, size: str) -> None:
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "model-cache"},
           "spec": {"accessModes": [mode], "storageClassName": storage_class,
                    "resources": {"requests": {"storage": size}}}}
    cluster_kube.apply(pvc, scratch_namespace)
    if storage_class == "local-wffc":
        # WaitForFirstConsumer: nothing binds until a pod using the claim is scheduled.
        consumer = pod("consumer", 0, volumes=[{"name": "m", "persistentVolumeClaim": {"claimName": "model-cache"}}])
        cluster_kube.create(consumer, scratch_namespace)

    def bound(objs: dict[str, Obj]) -> tuple[bool, str]:
        phase = (objs.get(f"{scratch_namespace}/model-cache") or {}).get("status", {}).get("phase")
        return phase == "Bound", f"phase={phase}"

    cluster_kube.wait_for(Watch("PersistentVolumeClaim", scratch_namespace, name="model-cache"), bound,
                          awaited="PVC Bound", timeout=60)
    got = cluster_kube.get("PersistentVolumeClaim", "model-cache", scratch_namespace)
    assert got["status"]["capacity"]["storage"] == size
    assert got["status"]["accessModes"] == [mode]


# The stand-in provisioner's events, as the external provisioner names its event source
# (``<provisioner>_<identity>``); the PV controller's own events (``persistentvolume-controller``)
# on the same claim are not its words.
PROVISIONER_SOURCE = "deploy-suite.local/hostpath_"


def claim_events(kube: Kube, ns: str, name: str, reason: str, timeout: float = 30) -> list[Obj]:
    """The provisioner's events on claim ``name``, once one of them has ``reason``."""
    def mine(objs: dict[str, Obj]) -> list[Obj]:
        return [e for e in objs.values()
                if str((e.get("source") or {}).get("component", "")).startswith(PROVISIONER_SOURCE)]

    def said(objs: dict[str, Obj]) -> tuple[bool, str]:
        return any(e.get("reason") == reason for e in mine(objs)), f"{len(objs)} event(s)"

    state = kube.wait_for(Watch("Event", ns, field_selector=f"involvedObject.name={name}"), said,
                          awaited=f"the provisioner's {reason} on {name}", timeout=timeout)
    return sorted(mine(state.objects), key=lambda e: str(e.get("firstTimestamp")))


@pytest.mark.parametrize("case", ["refuses-rwx", "slow"])
def test_a_storage_class_parameter_makes_the_provisioner_refuse_or_take_its_time(
        cluster_kube: Kube, scratch_namespace: str, case: str) -> None:
    # The stand-in's words are the external provisioner's (controllers.py cites them).
    storage_class = f"it-{case}-{scratch_namespace}"
    parameters = {"accessModes": "ReadWriteOnce"} if case == "refuses-rwx" else {"provisioningDelaySeconds": "4"}
    cluster_kube.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": storage_class},
                         "provisioner": "deploy-suite.local/hostpath", "volumeBindingMode": "Immediate",
                         "parameters": parameters})
    try:
        started = time.monotonic()
        cluster_kube.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "cache"},
                             "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                                      "resources": {"requests": {"storage": "10Gi"}}}}, scratch_namespace)
        if case == "refuses-rwx":
            (failed,) = [e for e in claim_events(cluster_kube, scratch_namespace, "cache", "ProvisioningFailed")
                         if e["reason"] == "ProvisioningFailed"]
            assert failed["type"] == "Warning" and failed["message"] == (
                f'failed to provision volume with StorageClass "{storage_class}": rpc error: code = InvalidArgument '
                "desc = access mode MULTI_NODE_MULTI_WRITER is not supported (supported: SINGLE_NODE_WRITER)")
            time.sleep(2)  # nothing is provisioned after the refusal
            assert cluster_kube.get("PersistentVolumeClaim", "cache", scratch_namespace)["status"]["phase"] == "Pending"
            return
        first = claim_events(cluster_kube, scratch_namespace, "cache", "Provisioning")
        assert next(e["message"] for e in first if e["reason"] == "Provisioning") == (
            f'External provisioner is provisioning volume for claim "{scratch_namespace}/cache"')
        done = claim_events(cluster_kube, scratch_namespace, "cache", "ProvisioningSucceeded")
        assert time.monotonic() - started >= 4
        assert next(e["message"] for e in done if e["reason"] == "ProvisioningSucceeded").startswith(
            "Successfully provisioned volume pvc-")
    finally:
        cluster_kube.delete("StorageClass", storage_class)


def test_deployments_roll_out_and_garbage_collection_follows_owner_references(
        cluster_kube: Kube, scratch_namespace: str) -> None:
    labels = {"app": "web"}
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
              "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
                  "metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}
    cluster_kube.apply(deploy, scratch_namespace)

    def available(objs: dict[str, Obj]) -> tuple[bool, str]:
        st = (objs.get(f"{scratch_namespace}/web") or {}).get("status", {})
        return st.get("availableReplicas") == 2, f"available={st.get('availableReplicas')}"

    cluster_kube.wait_for(Watch("Deployment", scratch_namespace, name="web"), available, awaited="web available",
                          timeout=60)
    cluster_kube.delete("Deployment", "web", scratch_namespace)

    def no_pods(objs: dict[str, Obj]) -> tuple[bool, str]:
        return not objs, f"{len(objs)} pods left"

    cluster_kube.wait_for(Watch("Pod", scratch_namespace, label_selector="app=web"), no_pods,
                          awaited="web pods collected", timeout=60)


def test_deleting_a_namespace_finishes_and_the_audit_log_shows_our_requests(
        offline_cluster: OfflineCluster, cluster_kube: Kube) -> None:
    agent = "deploy-suite-audit-probe"
    kube = Kube(offline_cluster.context, offline_cluster.info().kubeconfig, user_agent=agent)
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "audit-probe"}})
    kube.create(pod("p"), "audit-probe")
    wait_scheduled(kube, "audit-probe", "p")
    kube.delete("Namespace", "audit-probe")

    def gone(objs: dict[str, Obj]) -> tuple[bool, str]:
        ns = objs.get("/audit-probe")
        return ns is None, f"phase={(ns or {}).get('status', {}).get('phase')}"

    kube.wait_for(Watch("Namespace", name="audit-probe"), gone, awaited="namespace deleted", timeout=90)
    events = [json.loads(line) for line in Path(offline_cluster.info().audit_log).read_text().splitlines()]
    ours = [(e["verb"], e["objectRef"].get("resource"), e["objectRef"].get("name")) for e in events
            if e.get("userAgent") == agent and e.get("stage") == "ResponseComplete"]
    assert ("create", "namespaces", "audit-probe") in ours
    assert ("create", "pods", "p") in ours
    assert ("delete", "namespaces", "audit-probe") in ours
    assert all(e.get("level") == "Metadata" for e in events if e.get("userAgent") == agent)
    assert not any("requestObject" in e or "responseObject" in e for e in events)


def test_up_is_idempotent(offline_cluster: OfflineCluster) -> None:
    again = OfflineCluster(offline_cluster.name, "default", log=lambda _m: None).up()
    assert again.state == "up" and again.context == offline_cluster.context
    assert sorted(again.nodes) == ["cpu-0", "h100-reserved-0", "h200-0", "h200-1"]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, **(env or {})})


def test_down_stops_every_process_of_its_cluster_and_only_those(offline_cluster: OfflineCluster,
                                                                 tmp_path: Path) -> None:
    name = f"d{os.getpid()}"
    kubeconfig = tmp_path / "kc.yaml"
    up = run_cli("cluster", "up", "--name", name, "--pools", "multinode", "--kubeconfig", str(kubeconfig))
    try:
        assert up.returncode == 0, up.stderr
        assert f"context: offline-{name}" in up.stdout and str(kubeconfig) in up.stdout
        check_down(offline_cluster, name, kubeconfig)
    finally:
        OfflineCluster(name, log=lambda _m: None).down()  # idempotent: nothing left even on failure


def check_down(offline_cluster: OfflineCluster, name: str, kubeconfig: Path) -> None:
    second = OfflineCluster(name)
    pids = second.status().pids
    assert {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller"} <= set(pids)
    # Two clusters at once: the session's cluster is up too, with distinct processes.
    assert not set(pids.values()) & set(offline_cluster.status().pids.values())
    down = run_cli("cluster", "down", "--name", name)
    assert down.returncode == 0, down.stderr
    for pid in pids.values():
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]
    status = run_cli("cluster", "status", "--name", name)
    assert status.returncode != 0 and f"cluster {name}: down" in status.stdout
    assert not kubeconfig.exists()
    assert offline_cluster.status().state == "up"


def one_error_line(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("deploy-suite: error: ") and "fix:" in lines[0]
    for needle in needles:
        assert needle in lines[0]


def test_an_unknown_pool_layout_is_refused() -> None:
    one_error_line(run_cli("cluster", "up", "--name", "bad1", "--pools", "nosuch"), "unknown pool layout", "default")


@pytest.mark.parametrize("content", [
    "kind: NodePools\npools: [\n",
    "kind: NodePools\npools:\n  - name: x\n    count: two\n",
    "- just a list\n",
])
def test_a_malformed_pool_file_is_refused(tmp_path: Path, content: str) -> None:
    f = tmp_path / "pools.yaml"
    f.write_text(content)
    one_error_line(run_cli("cluster", "up", "--name", "bad2", "--pools", str(f)), str(f))
    assert not (workdir() / "clusters" / "bad2").exists()


def test_a_port_in_use_is_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        one_error_line(run_cli("cluster", "up", "--name", "bad3", "--apiserver-port", str(port)), str(port), "in use")


def test_a_stale_state_directory_is_refused_then_cleaned_by_down() -> None:
    stale = workdir() / "clusters" / "stale1"
    (stale / "pids").mkdir(parents=True, exist_ok=True)
    (stale / "pids" / "kube-apiserver.pid").write_text("999999")
    (stale / "deploy-suite.json").write_text(json.dumps({"name": "stale1", "created_by": "deploy-suite"}))
    one_error_line(run_cli("cluster", "up", "--name", "stale1"), "stale state directory")
    assert run_cli("cluster", "down", "--name", "stale1").returncode == 0
    assert not stale.exists()


def test_an_up_interrupted_while_starting_is_cleaned_by_down() -> None:
    # SIGTERM as soon as kwokctl has started a control-plane process: the marker must already exist.
    name = f"int{os.getpid()}"
    state = workdir() / "clusters" / name
    up = subprocess.Popen([*CLI, "cluster", "up", "--name", name], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not list((state / "pids").glob("*.pid")) and up.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        up.send_signal(signal.SIGTERM)
        up.wait(30)
        started = [int(p.read_text()) for p in (state / "pids").glob("*.pid") if p.read_text().strip().isdigit()]
        assert started, "no control-plane process was started before the interruption"
    finally:
        down = run_cli("cluster", "down", "--name", name)
    assert down.returncode == 0, down.stderr
    assert not state.exists()
    # Orphans are reaped by init a moment after they exit: wait for that, bounded.
    deadline = time.monotonic() + 10
    while [p for p in started if procs.alive(p)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in started if procs.alive(p)]


def test_a_directory_we_did_not_create_is_never_touched() -> None:
    foreign = workdir() / "clusters" / "foreign1"
    foreign.mkdir(parents=True, exist_ok=True)
    (foreign / "keep.txt").write_text("not ours")
    try:
        one_error_line(run_cli("cluster", "up", "--name", "foreign1"), "not created by deploy-suite")
        one_error_line(run_cli("cluster", "down", "--name", "foreign1"), "not created by deploy-suite")
        assert (foreign / "keep.txt").read_text() == "not ours"
    finally:
        (foreign / "keep.txt").unlink()
        foreign.rmdir()


def test_a_missing_go_toolchain_is_reported_when_a_build_is_needed(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "DEPLOY_SUITE_NO_DOWNLOAD": "1"}
    proc = run_cli("binaries", env=env)
    one_error_line(proc, "Go toolchain not found")
    assert not (tmp_path / "deploy-suite" / "bin" / binaries.bin_dir().name).exists()
