"""The operator simulator, the DGD CRDs and the kwok fault switches on a real offline cluster.

Each DGD is applied as a user would (server-side apply), becomes Ready through the real scheduler,
Deployment controller and kwok, and is reached through the real ``kubectl port-forward`` to a
real Dynamo frontend + mocker. Faults are kwok Stages applied at runtime.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from deploy_suite.access.kube import Kube, Obj
from deploy_suite.access.watch import Watch
from deploy_suite.errors import Invalid, KubeError
from deploy_suite_offline import faults
from deploy_suite_offline.cluster import OfflineCluster
from deploy_suite_offline.operator_sim.components import worker_hash
from deploy_suite_offline.operator_sim.controller import DGD_BETA
from deploy_suite_offline.procs import wait_exit

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
DATA = Path(__file__).with_name("data")
KUBECTL = str(Path(sys.executable).with_name("kubectl"))
DGD_LABEL = "nvidia.com/dynamo-graph-deployment-name"
READY_TIMEOUT = 60.0


# ------------------------------------------------------------------ helpers


def manifest(name: str) -> Obj:
    doc: Obj = yaml.safe_load((DATA / name).read_text())
    return doc


def kubectl(cluster: OfflineCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KUBECTL, "--context", cluster.context, "--kubeconfig", cluster.info().kubeconfig, *args],
                          capture_output=True, text=True, timeout=60, check=False)


def ready_condition(dgd: Obj) -> Obj:
    return next((c for c in (dgd.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})


def wait_dgd(kube: Kube, ns: str, name: str, want: str, timeout: float = READY_TIMEOUT) -> Obj:
    """Watch the DGD until status.state == want (and Ready matches it)."""

    def done(objs: dict[str, Obj]) -> tuple[bool, str]:
        dgd = objs.get(f"{ns}/{name}") or {}
        st = dgd.get("status") or {}
        cond = ready_condition(dgd)
        ok = st.get("state") == want and cond.get("status") == ("True" if want == "successful" else "False")
        return ok, f"state={st.get('state')} ready={cond.get('status')} {cond.get('reason')}: {cond.get('message')}"

    state = kube.wait_for(Watch(DGD_BETA, ns, name=name), done, awaited=f"DGD {name} state {want}", timeout=timeout)
    return state.objects[f"{ns}/{name}"]


def pods_of(kube: Kube, ns: str, dgd: str) -> list[Obj]:
    return kube.list_items("Pod", ns, label_selector=f"{DGD_LABEL}={dgd}")[0]


def chat(base: str, model: str, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "Simply output the phrase: NVIDIA Dynamo"}],
            "max_tokens": 16}
    return httpx.post(f"{base}/v1/chat/completions", json=body, headers=headers or {}, timeout=30)


@contextmanager
def forward(kube: Kube, target: str, ns: str) -> Iterator[str]:
    """``kubectl port-forward <target> :8000`` (the real binary, pinned context); yields the base URL."""
    pf = kube.port_forward(target, ns, 8000, kubectl=KUBECTL)
    try:
        yield f"http://127.0.0.1:{pf.wait_ready(20)}"
    finally:
        pf.stop()
        # Kube.PortForward leaves its stdout pipe open (a ResourceWarning, an error under our filters).
        if pf.proc.stdout is not None:
            pf.proc.stdout.close()


def assert_serves(kube: Kube, ns: str, target: str, model: str) -> float:
    """Port-forward ``target`` 8000 with the real kubectl; the model is listed and chat works."""
    started = time.monotonic()
    with forward(kube, target, ns) as base:
        models = httpx.get(f"{base}/v1/models", timeout=10)
        assert models.status_code == 200, models.text
        assert model in [m["id"] for m in models.json()["data"]]
        listed = time.monotonic() - started
        resp = chat(base, model)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["object"] == "chat.completion" and body["choices"]
    return listed


def serving_dir(cluster: OfflineCluster, ns: str, name: str) -> Path:
    return Path(cluster.info().cluster_dir) / "dynamo" / ns / name


@pytest.fixture
def multinode_ns(offline_clusters: Any) -> Iterator[tuple[OfflineCluster, Kube, str]]:
    cluster = offline_clusters.get("multinode", orchestrators=("lws",))  # a multinode DGD needs LWS (or Grove)
    kube = cluster.kube()
    ns = f"t-{uuid.uuid4().hex[:8]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    yield cluster, kube, ns
    kube.delete("Namespace", ns)
    kube.close()


# ------------------------------------------------------------------ DGDs become Ready and serve


@pytest.mark.parametrize(("file", "name", "model", "workers"), [
    ("dgd-alpha-agg.yaml", "alpha-agg", "qwen3-alpha-agg", {"VllmDecodeWorker": (1, 1)}),
    ("dgd-alpha-disagg.yaml", "alpha-disagg", "r1-distill", {"prefill": (1, 2), "decode": (2, 2)}),
    ("dgd-beta-agg.yaml", "beta-agg", "llama-beta", {"decode": (1, 1)}),
])
def test_a_dgd_becomes_ready_and_serves_through_kubectl_port_forward(
        offline_cluster: OfflineCluster, cluster_kube: Kube, scratch_namespace: str, file: str, name: str,
        model: str, workers: dict[str, tuple[int, int]]) -> None:
    ns = scratch_namespace
    started = time.monotonic()
    cluster_kube.apply(manifest(file), ns)
    dgd = wait_dgd(cluster_kube, ns, name, "successful")
    ready_s = time.monotonic() - started
    cond = ready_condition(dgd)
    assert (cond["reason"], cond["message"]) == ("all_resources_are_ready", "All resources are ready")
    assert dgd["status"]["observedGeneration"] == dgd["metadata"]["generation"]
    status_map = dgd["status"]["services" if "services" in dgd["spec"] else "components"]
    pods = pods_of(cluster_kube, ns, name)
    for comp, (replicas, gpus) in workers.items():
        entry = status_map[comp]
        assert entry["componentKind"] == "Deployment"
        # The newest operator's DCD (and Deployment) name: a worker's carries the worker hash.
        dcd = f"{name}-{comp.lower()}-{worker_hash(dgd)}"
        assert entry["componentNames"] == [dcd]
        assert entry["readyReplicas"] == entry["availableReplicas"] == entry["updatedReplicas"] == replicas
        mine = [p for p in pods if p["metadata"]["labels"]["nvidia.com/dynamo-component"] == comp]
        assert len(mine) == replicas
        for p in mine:
            labels = p["metadata"]["labels"]
            assert labels["nvidia.com/dynamo-namespace"] == f"{ns}-{name}"
            assert labels["nvidia.com/selector"] == dcd
            assert p["spec"]["nodeName"].startswith("h200-")  # placed by the real scheduler on GPU nodes
            main = p["spec"]["containers"][0]
            assert main["resources"]["requests"]["nvidia.com/gpu"] == main["resources"]["limits"]["nvidia.com/gpu"] \
                == str(gpus)
            env = {e["name"]: e.get("value") for e in main["env"]}
            assert env["DYN_NAMESPACE"] == f"{ns}-{name}" and env["DYN_COMPONENT"] == comp
            assert any(v.get("emptyDir", {}).get("medium") == "Memory" for v in p["spec"]["volumes"])
    svc = cluster_kube.get("Service", f"{name}-frontend", ns)
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]
    assert svc["metadata"]["ownerReferences"][0]["controller"] is True
    listed_s = assert_serves(cluster_kube, ns, f"svc/{name}-frontend", model)
    print(f"{name}: apply -> Ready {ready_s:.1f}s; port-forward -> model listed {listed_s:.2f}s")


def test_v1alpha1_fields_reach_the_pod_spec(cluster_kube: Kube, scratch_namespace: str) -> None:
    cluster_kube.apply(manifest("dgd-alpha-agg.yaml"), scratch_namespace)
    dgd = wait_dgd(cluster_kube, scratch_namespace, "alpha-agg", "successful")
    dep = cluster_kube.get("Deployment", f"alpha-agg-vllmdecodeworker-{worker_hash(dgd)}", scratch_namespace)
    spec = dep["spec"]["template"]["spec"]
    main = spec["containers"][0]
    assert main["envFrom"] == [{"secretRef": {"name": "hf-token-secret"}}]
    assert {"name": "HF_HOME", "value": "/opt/models"} in main["env"]  # graph-level envs
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert spec["imagePullSecrets"] == [{"name": "nvcr-pull"}]
    assert {"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in spec["volumes"]
    assert dep["metadata"]["ownerReferences"][0]["kind"] == "DynamoComponentDeployment"
    fe = cluster_kube.get("Deployment", "alpha-agg-frontend", scratch_namespace)["spec"]["template"]["spec"]
    assert fe["containers"][0]["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]


def test_a_multinode_dgd_runs_replicas_times_node_count_pods(multinode_ns: tuple[OfflineCluster, Kube, str]) -> None:
    _cluster, kube, ns = multinode_ns
    started = time.monotonic()
    kube.apply(manifest("dgd-multinode.yaml"), ns)
    dgd = wait_dgd(kube, ns, "multinode", "successful")
    print(f"multinode: apply -> Ready {time.monotonic() - started:.1f}s")
    lws = f"multinode-trtllmworker-{worker_hash(dgd)}-0"  # one LeaderWorkerSet per replica, named after the DCD
    assert dgd["status"]["components"]["TrtllmWorker"] == {
        "componentKind": "LeaderWorkerSet", "componentNames": [lws], "replicas": 1, "updatedReplicas": 1,
        "readyReplicas": 1, "availableReplicas": 1}
    workers = [p for p in pods_of(kube, ns, "multinode")
               if p["metadata"]["labels"]["nvidia.com/dynamo-component"] == "TrtllmWorker"]
    assert sorted((p["metadata"]["name"], p["metadata"]["labels"]["role"]) for p in workers) == [
        (f"{lws}-0", "leader"), (f"{lws}-0-1", "worker")]
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "LeaderWorkerSet" for p in workers)
    assert len({p["spec"]["nodeName"] for p in workers}) == 2  # 8 GPUs each: one node per pod
    assert_serves(kube, ns, "svc/multinode-frontend", "r1-multinode")


def test_a_gaie_direct_routing_dgd_is_reached_on_a_worker_pod(
        offline_cluster: OfflineCluster, cluster_kube: Kube, scratch_namespace: str) -> None:
    ns = scratch_namespace
    cluster_kube.apply(manifest("dgd-gaie-direct.yaml"), ns)
    wait_dgd(cluster_kube, ns, "gaie-direct", "successful")
    assert cluster_kube.get_or_none("Service", "gaie-direct-frontend", ns) is None
    worker = next(p for p in pods_of(cluster_kube, ns, "gaie-direct")
                  if p["metadata"]["labels"]["nvidia.com/dynamo-component"] == "VllmWorker")
    pod = worker["metadata"]["name"]
    logs = kubectl(offline_cluster, "logs", "-n", ns, pod, "-c", "frontend-sidecar")
    assert logs.returncode == 0, logs.stderr
    hex_ids = re.findall(r"instance_id=0x([0-9a-f]+)", logs.stdout)
    assert hex_ids, logs.stdout
    instance = str(int(hex_ids[0], 16))  # the header takes the id in decimal
    with forward(cluster_kube, f"pod/{pod}", ns) as base:
        assert "qwen3-gaie" in [m["id"] for m in httpx.get(f"{base}/v1/models", timeout=10).json()["data"]]
        assert chat(base, "qwen3-gaie").status_code == 400
        ok = chat(base, "qwen3-gaie", {"x-dynamo-worker-instance-id": instance})
        assert ok.status_code == 200, ok.text
        assert ok.json()["object"] == "chat.completion"


# ------------------------------------------------------------------ not ready, failed, deleted


def test_a_dgd_that_cannot_schedule_stays_pending_with_failed_scheduling_events(
        cluster_kube: Kube, scratch_namespace: str) -> None:
    ns = scratch_namespace
    cluster_kube.apply(manifest("dgd-nine-gpus.yaml"), ns)

    def failed_scheduling(objs: dict[str, Obj]) -> tuple[bool, str]:
        msgs = [e.get("message", "") for e in objs.values() if e.get("reason") == "FailedScheduling"
                and e["involvedObject"]["name"].startswith("nine-gpus-worker-")]
        return bool(msgs), msgs[-1] if msgs else "no FailedScheduling yet"

    state = cluster_kube.wait_for(Watch("Event", ns), failed_scheduling, awaited="FailedScheduling", timeout=30)
    assert "Insufficient nvidia.com/gpu" in state.description

    def only_worker_pending(objs: dict[str, Obj]) -> tuple[bool, str]:
        # The frontend is up within seconds; the worker never is.
        dgd = objs.get(f"{ns}/nine-gpus") or {}
        cond = ready_condition(dgd)
        done = (dgd.get("status") or {}).get("state") == "pending" and cond.get("status") == "False" \
            and "nine-gpus-frontend" not in cond.get("message", "")
        return done, f"{cond.get('reason')}: {cond.get('message')}"

    state = cluster_kube.wait_for(Watch(DGD_BETA, ns, name="nine-gpus"), only_worker_pending,
                                  awaited="only the worker not ready", timeout=30)
    dgd = state.objects[f"{ns}/nine-gpus"]
    cond = ready_condition(dgd)
    assert cond["reason"] == "some_resources_are_not_ready"
    # The newest operator reports the worker's DCD, not its pods.
    assert cond["message"] == (f"Resources not ready: nine-gpus-worker-{worker_hash(dgd)}: "
                               "Component deployment not ready - Available condition not true")
    assert state.objects[f"{ns}/nine-gpus"]["status"]["components"]["Frontend"]["readyReplicas"] == 1


def test_a_multinode_dgd_without_an_orchestrator_fails_as_the_operator_does(
        cluster_kube: Kube, scratch_namespace: str) -> None:
    cluster_kube.apply(manifest("dgd-multinode.yaml"), scratch_namespace)  # the default cluster: no LWS, no Grove
    dgd = wait_dgd(cluster_kube, scratch_namespace, "multinode", "failed", timeout=30)
    cond = ready_condition(dgd)
    assert (cond["reason"], cond["message"]) == ("no_multinode_orchestrator_available",
                                                 "no multinode orchestrator available")
    assert not cluster_kube.list_items("Pod", scratch_namespace)[0]


def test_a_missing_pvc_is_reported_as_a_failed_reconcile(cluster_kube: Kube, scratch_namespace: str) -> None:
    cluster_kube.apply(manifest("dgd-missing-pvc.yaml"), scratch_namespace)
    dgd = wait_dgd(cluster_kube, scratch_namespace, "missing-pvc", "failed", timeout=30)
    cond = ready_condition(dgd)
    assert cond["reason"] == "failed_to_reconcile_the_resources"
    assert 'persistentvolumeclaims "model-cache-pvc" not found' in cond["message"]
    assert "observedGeneration" not in dgd["status"]
    assert not cluster_kube.list_items("Deployment", scratch_namespace)[0]


def test_an_unconvertible_v1alpha1_component_type_is_reported(cluster_kube: Kube, scratch_namespace: str) -> None:
    doc = manifest("dgd-alpha-agg.yaml")
    doc["spec"]["services"]["VllmDecodeWorker"]["componentType"] = "main"
    cluster_kube.apply(doc, scratch_namespace)
    cond = ready_condition(wait_dgd(cluster_kube, scratch_namespace, "alpha-agg", "failed", timeout=30))
    assert "componentType 'main'" in cond["message"] and "v1beta1" in cond["message"]


def test_deleting_a_dgd_removes_its_pods_services_and_processes(
        offline_cluster: OfflineCluster, cluster_kube: Kube, scratch_namespace: str) -> None:
    ns = scratch_namespace
    cluster_kube.apply(manifest("dgd-beta-agg.yaml"), ns)
    wait_dgd(cluster_kube, ns, "beta-agg", "successful")
    roles = json.loads((serving_dir(offline_cluster, ns, "beta-agg") / "serving.json").read_text())["roles"]
    assert roles and all(Path(f"/proc/{pid}").exists() for pid in roles.values())
    cluster_kube.delete(DGD_BETA, "beta-agg", ns)

    def none_left(objs: dict[str, Obj]) -> tuple[bool, str]:
        return not objs, f"{len(objs)} left"

    cluster_kube.wait_for(Watch("Pod", ns, label_selector=f"{DGD_LABEL}=beta-agg"), none_left,
                          awaited="pods collected", timeout=60)
    cluster_kube.wait_for(Watch("Service", ns, name="beta-agg-frontend"), none_left, awaited="service collected",
                          timeout=60)
    for role, pid in roles.items():
        assert wait_exit(pid, 30), f"{role} process {pid} still running"


@pytest.mark.parametrize(("mutate", "needle"), [
    (lambda d: d["spec"]["components"][1].update(type="bogus"), "Unsupported value"),
    (lambda d: d["spec"]["components"][1].update(name="bad_name"), "should match"),
    (lambda d: d["spec"]["components"][1].update(replicas=-1), "should be greater than or equal to 0"),
    (lambda d: d["spec"]["components"][1].update(multinode={"nodeCount": 1}), "greater than or equal to 2"),
    (lambda d: d["spec"].update(backendFramework="tgi"), "Unsupported value"),
    (lambda d: d["spec"]["components"].extend([{"name": "e1", "type": "epp"}, {"name": "e2", "type": "epp"}]),
     "at most one component may have type epp"),
])
def test_server_side_dry_run_rejects_what_the_real_crd_rejects(cluster_kube: Kube, scratch_namespace: str,
                                                                mutate: Any, needle: str) -> None:
    good = manifest("dgd-beta-agg.yaml")
    cluster_kube.apply(good, scratch_namespace, dry_run=True)  # a valid one passes
    bad = manifest("dgd-beta-agg.yaml")
    mutate(bad)
    with pytest.raises(Invalid) as info:
        cluster_kube.apply(bad, scratch_namespace, dry_run=True)
    assert needle in str(info.value)


def test_the_v1alpha1_schema_validates_services(cluster_kube: Kube, scratch_namespace: str) -> None:
    bad = manifest("dgd-alpha-agg.yaml")
    bad["spec"]["services"]["VllmDecodeWorker"]["resources"]["limits"]["gpu"] = 1  # must be a string
    # Server-side apply refuses it while building the typed patch (HTTP 500, not 422).
    with pytest.raises(KubeError, match=r"limits\.gpu: expected string"):
        cluster_kube.apply(bad, scratch_namespace, dry_run=True)
    bad = manifest("dgd-alpha-agg.yaml")
    bad["spec"]["services"]["VllmDecodeWorker"]["replicas"] = -1
    with pytest.raises(Invalid, match="greater than or equal to 0"):
        cluster_kube.apply(bad, scratch_namespace, dry_run=True)


# ------------------------------------------------------------------ fault switches


@pytest.fixture
def fault_name(scratch_namespace: str) -> str:
    return f"fault-{scratch_namespace}"


def wait_pod(kube: Kube, ns: str, predicate: Any, awaited: str, label_selector: str | None = None,
             name: str | None = None) -> Obj:
    def done(objs: dict[str, Obj]) -> tuple[bool, str]:
        for p in objs.values():
            if predicate(p):
                return True, p["metadata"]["name"]
        return False, json.dumps([p.get("status", {}).get("containerStatuses") for p in objs.values()])[:300]

    state = kube.wait_for(Watch("Pod", ns, name=name, label_selector=label_selector), done, awaited=awaited, timeout=30)
    return state.objects[f"{ns}/{state.description}"]


def waiting_reason(pod: Obj) -> str | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        reason = (cs.get("state") or {}).get("waiting", {}).get("reason")
        if reason:
            return str(reason)
    return None


def test_crash_loop_fault_hits_the_selected_dgd_only(
        offline_cluster: OfflineCluster, cluster_kube: Kube, scratch_namespace: str, fault_name: str) -> None:
    ns = scratch_namespace
    fault = faults.crash_loop(fault_name, faults.by_dgd("beta-agg", namespace=ns))
    faults.apply(cluster_kube, fault)
    try:
        cluster_kube.apply(manifest("dgd-beta-agg.yaml"), ns)
        crashed = wait_pod(cluster_kube, ns, lambda p: waiting_reason(p) == "CrashLoopBackOff", "CrashLoopBackOff",
                           label_selector=f"{DGD_LABEL}=beta-agg")
        cs = crashed["status"]["containerStatuses"][0]
        assert crashed["status"]["phase"] == "Running" and cs["ready"] is False
        assert cs["restartCount"] > 0 and cs["lastState"]["terminated"]["exitCode"] == 1
        shown = kubectl(offline_cluster, "get", "pod", "-n", ns, crashed["metadata"]["name"])
        assert "CrashLoopBackOff" in shown.stdout, shown.stdout + shown.stderr
        cond = ready_condition(wait_dgd(cluster_kube, ns, "beta-agg", "pending"))
        assert cond["reason"] == "some_resources_are_not_ready"
        # A pod outside the selection is untouched.
        cluster_kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bystander"},
                             "spec": {"containers": [{"name": "c", "image": "busybox"}]}}, ns)
        wait_pod(cluster_kube, ns, lambda p: p["status"].get("phase") == "Running" and waiting_reason(p) is None,
                 "bystander Running", name="bystander")
    finally:
        faults.remove(cluster_kube, fault)


def test_crash_output_is_served_by_kubectl_logs(offline_cluster: OfflineCluster, cluster_kube: Kube,
                                                scratch_namespace: str, fault_name: str, tmp_path: Path) -> None:
    ns = scratch_namespace
    fault = faults.crash_loop(fault_name, faults.by_image(f"crashy-{ns}", namespace=ns))
    faults.apply(cluster_kube, fault)
    try:
        cluster_kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "crashy"},
                             "spec": {"containers": [{"name": "main", "image": f"registry.local/crashy-{ns}:1"}]}}, ns)
        pod = wait_pod(cluster_kube, ns, lambda p: waiting_reason(p) == "CrashLoopBackOff", "crash", name="crashy")
        text = "Traceback (most recent call last):\nRuntimeError: CUDA out of memory\n"
        current = faults.write_cri_log(tmp_path / "crash.log", "starting worker\n" + text)
        previous = faults.write_cri_log(tmp_path / "previous.log", text)
        cluster_kube.apply(faults.logs_object({**pod, "apiVersion": "v1", "kind": "Pod"}, current,
                                              previous=previous), ns)

        def logs_served(objs: dict[str, Obj]) -> tuple[bool, str]:
            return bool(objs), "Logs object present"

        cluster_kube.wait_for(Watch(cluster_kube.resource(faults.KWOK_API, "Logs"), ns, name="crashy"), logs_served,
                              awaited="Logs object", timeout=10)
        out = kubectl(offline_cluster, "logs", "-n", ns, "crashy")
        assert out.returncode == 0, out.stderr
        assert "RuntimeError: CUDA out of memory" in out.stdout and "starting worker" in out.stdout
        prev = kubectl(offline_cluster, "logs", "-n", ns, "crashy", "--previous")
        assert "RuntimeError" in prev.stdout and "starting worker" not in prev.stdout
    finally:
        faults.remove(cluster_kube, fault)


@pytest.mark.parametrize("reason", ["ImagePullBackOff", "ErrImagePull"])
def test_image_pull_fault_keeps_a_scheduled_pod_pending(offline_cluster: OfflineCluster, cluster_kube: Kube,
                                                        scratch_namespace: str, fault_name: str, reason: str) -> None:
    ns = scratch_namespace
    fault = faults.image_pull(fault_name, faults.by_image(":does-not-exist", namespace=ns), reason=reason)
    faults.apply(cluster_kube, fault)
    try:
        cluster_kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pull"}, "spec": {
            "containers": [{"name": "main", "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:does-not-exist",
                            "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}, ns)
        pod = wait_pod(cluster_kube, ns, lambda p: waiting_reason(p) == reason, reason, name="pull")
        assert pod["status"]["phase"] == "Pending"
        assert pod["spec"]["nodeName"].startswith("h200-")  # scheduled: it holds its GPUs
        assert "does-not-exist" in pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
        shown = kubectl(offline_cluster, "get", "pod", "-n", ns, "pull")
        assert reason in shown.stdout, shown.stdout
    finally:
        faults.remove(cluster_kube, fault)


def test_job_pod_failure_fault_fails_the_job(cluster_kube: Kube, scratch_namespace: str, fault_name: str) -> None:
    ns = scratch_namespace
    fault = faults.job_pod_failure(fault_name, faults.by_job("model-download", namespace=ns))
    faults.apply(cluster_kube, fault)
    try:
        cluster_kube.apply({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "model-download"},
                            "spec": {"backoffLimit": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [
                                {"name": "dl", "image": "python:3.10-slim", "command": ["hf", "download"]}]}}}}, ns)

        def failed(objs: dict[str, Obj]) -> tuple[bool, str]:
            conds = {c["type"]: c for c in (objs.get(f"{ns}/model-download") or {}).get("status", {})
                     .get("conditions", []) if c.get("status") == "True"}
            return "Failed" in conds, json.dumps(conds)[:300]

        state = cluster_kube.wait_for(Watch("Job", ns, name="model-download"), failed, awaited="Job Failed", timeout=60)
        job = state.objects[f"{ns}/model-download"]
        assert "Complete" not in {c["type"] for c in job["status"]["conditions"] if c["status"] == "True"}
        assert job["status"].get("failed", 0) >= 2  # the first pod and its one retry
        pods = cluster_kube.list_items("Pod", ns, label_selector="batch.kubernetes.io/job-name=model-download")[0]
        assert pods and all(p["status"]["phase"] == "Failed" for p in pods)
        assert pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 1
    finally:
        faults.remove(cluster_kube, fault)


def test_a_serving_fault_from_the_configmap_reaches_the_frontend(
        cluster_kube: Kube, scratch_namespace: str) -> None:
    ns = scratch_namespace
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "deploy-suite-faults", "namespace": "kube-system"},
          "data": {f"{ns}.beta-agg": "chat-500"}}
    cluster_kube.apply(cm)
    try:
        cluster_kube.apply(manifest("dgd-beta-agg.yaml"), ns)
        wait_dgd(cluster_kube, ns, "beta-agg", "successful")
        with forward(cluster_kube, "svc/beta-agg-frontend", ns) as base:
            assert "llama-beta" in [m["id"] for m in httpx.get(f"{base}/v1/models", timeout=10).json()["data"]]
            assert chat(base, "llama-beta").status_code == 500
    finally:
        cluster_kube.delete("ConfigMap", "deploy-suite-faults", "kube-system")
