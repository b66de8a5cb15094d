"""The kind cluster as the harness sees it: real kubelets, the layout's nodes, real containers.

One session cluster (deploy_suite_offline.fixtures.kind: pytest-kind's KindCluster with our kind and node image).
Marked ``kind``; ``make test`` runs those not also marked ``matrix`` (the kind slice), ``make
test-all`` and ``make test-kind`` all of them.
"""

from __future__ import annotations

import httpx
import pytest

from deploy_suite import clock
from deploy_suite.access.kube import Kube, Obj
from deploy_suite.access.watch import Watch
from deploy_suite.constants import GPU_PRODUCT_LABEL, GPU_RESOURCE
from deploy_suite.errors import KubeError
from deploy_suite_offline.kind import docker
from deploy_suite_offline.kind.config import POOL_NODE_LABEL
from deploy_suite_offline.kind.nodeimage import TESTBOX
from deploy_suite_offline.kind.provider import KindProvider

pytestmark = pytest.mark.kind

# A one-file HTTP server from the Debian testbox: read the request's head, answer, close (reading
# first matters: closing with the request unread resets the connection before the reply arrives).
HTTP_SERVER = r"""cat > /tmp/h.sh <<'END'
while IFS= read -r line; do case "$line" in "$(printf '\r')"|"") break;; esac; done
printf 'HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nserved by a real kubelet\n'
END
exec socat TCP-LISTEN:8000,fork,reuseaddr EXEC:'sh /tmp/h.sh'"""


def _nodes(kube: Kube) -> dict[str, Obj]:
    items, _ = kube.list_items("Node")
    return {n["metadata"]["labels"].get(POOL_NODE_LABEL, n["metadata"]["name"]): n for n in items}


def test_the_cluster_is_up_with_context_kind_and_the_provider_in_its_marker(
        kind_cluster_offline: KindProvider) -> None:
    info = kind_cluster_offline.status()
    assert info.state == "up"
    assert info.provider == "kind"
    assert info.context == f"kind-{kind_cluster_offline.name}"
    assert len(info.nodes) == 5  # control plane + the default layout's four pool nodes
    assert (kind_cluster_offline._marker() or {}).get("provider") == "kind"


def test_gpu_workers_advertise_gpus_with_gfd_labels_and_the_reserved_node_keeps_its_taint(kind_kube: Kube) -> None:
    nodes = _nodes(kind_kube)
    h200 = nodes["h200-0"]
    assert h200["status"]["allocatable"][GPU_RESOURCE] == "8"
    assert h200["status"]["capacity"][GPU_RESOURCE] == "8"
    assert h200["metadata"]["labels"][GPU_PRODUCT_LABEL] == "NVIDIA-H200"
    assert h200["status"]["nodeInfo"]["kubeletVersion"] == "v1.36.1"  # a real kubelet, not kwok's "fake"
    reserved = nodes["h100-reserved-0"]
    taint = {"key": "example.com/reserved-for", "value": "tenant-b", "effect": "NoSchedule"}
    assert taint in reserved["spec"]["taints"]
    assert GPU_RESOURCE not in nodes["cpu-0"]["status"]["allocatable"]


def _pod(name: str, command: str, **extra: object) -> Obj:
    container: dict[str, object] = {"name": "main", "image": TESTBOX, "imagePullPolicy": "IfNotPresent",
                                    "command": ["sh", "-c", command]}
    container.update(extra)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [container], "terminationGracePeriodSeconds": 1,
                     "nodeSelector": {POOL_NODE_LABEL: "cpu-0"}}}


def wait_pod(kube: Kube, namespace: str, name: str, done: str, timeout: float = 180.0) -> Obj:
    """Until the pod's first container reaches ``done``: ready, a waiting reason, or restarts>=N."""
    def judge(objs: dict[str, Obj]) -> tuple[bool, str]:
        pod = next(iter(objs.values()), None)
        statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
        if not statuses:
            return False, "no container status yet"
        cs = statuses[0]
        waiting = ((cs.get("state") or {}).get("waiting") or {}).get("reason", "")
        if done == "ready":
            return bool(cs.get("ready")), f"ready={cs.get('ready')}"
        if done.startswith("restarts>="):
            ok = int(cs.get("restartCount") or 0) >= int(done.split(">=")[1]) and waiting == "CrashLoopBackOff"
            return ok, f"restarts {cs.get('restartCount')}, waiting {waiting!r}"
        return waiting == done, f"waiting {waiting!r}"

    kube.wait_for(Watch("Pod", namespace, name), judge, awaited=f"pod {name}: {done}", timeout=timeout)
    return kube.get("Pod", name, namespace)


def test_a_pod_is_a_real_container_on_its_node_and_port_forward_goes_through_the_kubelet(
        kind_kube: Kube, kind_namespace: str, kind_cluster_offline: KindProvider) -> None:
    pod = _pod("web", HTTP_SERVER, ports=[{"containerPort": 8000}],
               readinessProbe={"tcpSocket": {"port": 8000}, "periodSeconds": 1})
    kind_kube.create(pod, kind_namespace)
    wait_pod(kind_kube, kind_namespace, "web", "ready")
    node = kind_kube.get("Pod", "web", kind_namespace)["spec"]["nodeName"]
    listed = docker.exec_in(node, "crictl", "ps", "--name", "main", "-o", "json")
    assert kind_namespace in listed  # the container the kubelet started, in the node's containerd
    with kind_kube.port_forward("pod/web", kind_namespace, 8000) as forward:
        port = forward.wait_ready(30.0)
        reply = httpx.get(f"http://127.0.0.1:{port}/", timeout=10.0)
    assert reply.status_code == 200
    assert "served by a real kubelet" in reply.text


@pytest.mark.matrix
def test_a_claim_of_the_default_class_binds_and_is_shared_by_pods_on_two_nodes(
        kind_kube: Kube, kind_namespace: str) -> None:
    kind_kube.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "cache"},
                      "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}},
                     kind_namespace)
    for name, node, command in (("writer", "cpu-0", "echo from-cpu-0 > /cache/f; sleep 3600"),
                                ("reader", "h200-0", "until cat /cache/f; do sleep 1; done; sleep 3600")):
        pod = _pod(name, command, volumeMounts=[{"name": "c", "mountPath": "/cache"}])
        pod["spec"]["nodeSelector"] = {POOL_NODE_LABEL: node}
        pod["spec"]["tolerations"] = [{"operator": "Exists"}]
        pod["spec"]["volumes"] = [{"name": "c", "persistentVolumeClaim": {"claimName": "cache"}}]
        kind_kube.create(pod, kind_namespace)
    deadline = clock.monotonic() + 120
    log = ""
    while clock.monotonic() < deadline and "from-cpu-0" not in log:
        try:
            log = kind_kube.pod_log("reader", kind_namespace)
        except KubeError:  # the container has not started yet
            log = ""
        clock.sleep(1.0)
    assert "from-cpu-0" in log
