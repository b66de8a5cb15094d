"""Cluster DNS on kind: kubeadm's CoreDNS Deployment, from the image built here, answers pods.

The node image holds CoreDNS under the tag kubeadm names (offline/deploy_suite_offline/kind/nodeimage.py),
so kubeadm's ``addon/coredns`` phase runs; a pod of the default dnsPolicy (ClusterFirst) resolves a
Service by its full name and by its short name in its own namespace, and reaches it.
Marked ``kind`` (docs/offline-cluster.md, "The kind provider").
"""

from __future__ import annotations

import pytest

from deploy_suite.access.kube import Kube, Obj
from deploy_suite.access.watch import Watch
from deploy_suite_offline.kind import docker
from tests.kind.test_kind_cluster import HTTP_SERVER, _pod, wait_pod

pytestmark = pytest.mark.kind

COREDNS_IMAGE = "registry.k8s.io/coredns/coredns:v1.14.2"  # what kubeadm v1.36.1 names


def _client_script(namespace: str) -> str:
    """Print the pod's resolv.conf and both lookups, then ask the Service by its short name (a few
    tries: kube-proxy writes the Service's rules a moment after the backend is ready)."""
    return "\n".join([
        "cat /etc/resolv.conf",
        f"echo \"fqdn: $(getent hosts web.{namespace}.svc.cluster.local)\"",
        "echo \"short: $(getent hosts web)\"",
        "for i in $(seq 1 20); do",
        "  printf 'GET / HTTP/1.0\\r\\n\\r\\n' | socat -t 5 - TCP:web:8000 && exit 0",
        "  sleep 1",
        "done",
        "exit 1",
    ])


def _finished(kube: Kube, namespace: str, name: str, timeout: float = 120.0) -> Obj:
    def judge(objs: dict[str, Obj]) -> tuple[bool, str]:
        phase = ((next(iter(objs.values()), None) or {}).get("status") or {}).get("phase", "")
        return phase in ("Succeeded", "Failed"), f"phase {phase!r}"

    kube.wait_for(Watch("Pod", namespace, name), judge, awaited=f"pod {name} finished", timeout=timeout)
    return kube.get("Pod", name, namespace)


def _all_ready(objs: dict[str, Obj]) -> tuple[bool, str]:
    status = (next(iter(objs.values()), None) or {}).get("status") or {}
    return status.get("readyReplicas") == 2, f"{status.get('readyReplicas')}/2 ready"


def test_coredns_pods_are_real_ready_containers_of_the_image_built_here(kind_kube: Kube) -> None:
    # `up` waits for the Deployment to be Available: one ready replica is enough for that.
    kind_kube.wait_for(Watch("Deployment", "kube-system", "coredns"), _all_ready, awaited="both CoreDNS replicas ready",
                       timeout=120.0)
    service = kind_kube.get("Service", "kube-dns", "kube-system")
    assert service["spec"]["clusterIP"] == "10.96.0.10"
    pods, _ = kind_kube.list_items("Pod", "kube-system", label_selector="k8s-app=kube-dns")
    assert len(pods) == 2
    for pod in pods:
        status = pod["status"]["containerStatuses"][0]
        assert status["ready"] and "running" in status["state"]
        assert status["image"] == COREDNS_IMAGE and status["imageID"]
        assert status["restartCount"] == 0  # no loop detected (CoreDNS exits on one), no crash
        listed = docker.exec_in(pod["spec"]["nodeName"], "crictl", "ps", "--name", "coredns", "-o", "json")
        assert status["containerID"].split("://")[-1] in listed  # the kubelet's container in containerd


def test_a_pod_resolves_a_service_by_its_full_and_short_names_and_reaches_it(
        kind_kube: Kube, kind_namespace: str) -> None:
    server = _pod("web", HTTP_SERVER, ports=[{"containerPort": 8000}],
                  readinessProbe={"tcpSocket": {"port": 8000}, "periodSeconds": 1})
    server["metadata"]["labels"] = {"app": "web"}
    kind_kube.create(server, kind_namespace)
    service = kind_kube.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                                "spec": {"selector": {"app": "web"}, "ports": [{"port": 8000}]}}, kind_namespace)
    wait_pod(kind_kube, kind_namespace, "web", "ready")
    client = _pod("client", _client_script(kind_namespace))
    client["spec"]["restartPolicy"] = "Never"  # the default dnsPolicy: ClusterFirst
    kind_kube.create(client, kind_namespace)
    pod = _finished(kind_kube, kind_namespace, "client")
    log = kind_kube.pod_log("client", kind_namespace)
    assert pod["status"]["phase"] == "Succeeded", log
    lines = {line.split(":", 1)[0]: line.split(":", 1)[1].split() for line in log.splitlines() if ":" in line}
    full = f"web.{kind_namespace}.svc.cluster.local"
    assert lines["fqdn"] == [service["spec"]["clusterIP"], full]  # getent: address, canonical name
    assert lines["short"] == [service["spec"]["clusterIP"], full]  # found through the namespace's search path
    assert "nameserver 10.96.0.10" in log
    assert f"search {kind_namespace}.svc.cluster.local svc.cluster.local cluster.local" in log
    assert "served by a real kubelet" in log
