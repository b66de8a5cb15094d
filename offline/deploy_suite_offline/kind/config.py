"""What a kind cluster of a pool layout is made of: kind's configuration, the node mapping, CNI.

Pure functions (unit-tested): the kind ``Cluster`` document for a layout, which kind worker plays
which pool node (its labels, taints and GPUs), and each node's CNI configuration. The provider
(``provider.py``) applies them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from deploy_suite.constants import GPU_RESOURCE
from deploy_suite_offline import pools
from deploy_suite_offline.kind.nodeimage import ETCD_TAG

SHARED_MOUNT = "/var/lib/deploy-suite/pv"  # where the controllers' provisioner puts hostPath volumes
POD_SUBNET = "10.244.0.0/16"
SERVICE_SUBNET = "10.96.0.0/16"  # kind's default, named here so each node's service_guard matches it
POOL_NODE_LABEL = "deploy-suite.local/node"  # the pool node a kind worker plays
# kwok's own and the kubelet's: never copied from the kwok node manifest.
_NOT_COPIED = ("type", "kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch")


@dataclass(frozen=True)
class WorkerRole:
    node: str  # kind's node (and container) name
    pool_node: str
    labels: dict[str, str]
    taints: list[dict[str, str]]
    gpus: int


def worker_names(cluster: str, count: int) -> list[str]:
    """kind's names for the workers, in the order of the configuration: <c>-worker, <c>-worker2, ..."""
    return [f"{cluster}-worker" + (str(i + 1) if i else "") for i in range(count)]


def worker_roles(cluster: str, layout: pools.Layout) -> list[WorkerRole]:
    manifests = layout.nodes()
    roles = []
    for kind_name, manifest in zip(worker_names(cluster, len(manifests)), manifests, strict=True):
        meta = manifest["metadata"]
        labels = {k: v for k, v in meta["labels"].items() if k not in _NOT_COPIED}
        labels[POOL_NODE_LABEL] = meta["name"]
        gpus = int(manifest["status"]["capacity"].get(GPU_RESOURCE, "0"))
        roles.append(WorkerRole(kind_name, meta["name"], labels, list(manifest["spec"]["taints"]), gpus))
    return roles


def kind_config(layout: pools.Layout, shared_dir: str, built_here: bool) -> dict[str, Any]:
    """kind's ``Cluster`` document: one control plane, one worker per pool node.

    ``built_here`` is our node image, whose etcd carries its own version and for which kubeadm's
    preflight phase is skipped; a stock ``kindest/node`` image needs neither patch. Both run
    kubeadm's ``addon/coredns`` phase: our image holds CoreDNS under kubeadm's own tag, and pods
    resolve Service names through it (the kubelet's ``clusterDNS``, kubeadm's default 10.96.0.10).
    """
    mounts = [{"hostPath": shared_dir, "containerPath": SHARED_MOUNT}]
    # Kubernetes 1.35 and later refuse cgroup v1 hosts unless the kubelet allows it.
    patches = ["kind: KubeletConfiguration\nfailCgroupV1: false\n"]
    if built_here:
        patches.append(f"kind: ClusterConfiguration\netcd:\n  local:\n    imageTag: \"{ETCD_TAG}\"\n")
        patches.append("kind: InitConfiguration\nskipPhases:\n  - preflight\n")
    return {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "networking": {
            "apiServerAddress": "127.0.0.1",  # published on this machine's loopback only
            "disableDefaultCNI": True,        # no kindnetd image: configure_cni writes the CNI files
            "kubeProxyMode": "iptables",
            "podSubnet": POD_SUBNET,
            "serviceSubnet": SERVICE_SUBNET,
        },
        "kubeadmConfigPatches": patches,
        "nodes": [{"role": "control-plane", "extraMounts": mounts}]
        + [{"role": "worker", "extraMounts": mounts} for _ in layout.node_names()],
    }


def cni_conflist(pod_cidr: str) -> str:
    """Point-to-point veths with addresses from the node's pod CIDR (the CNI plugins Debian ships);
    traffic to other nodes' pods follows the routes ``routes`` gives."""
    return json.dumps({
        "cniVersion": "0.4.0",
        "name": "deploy-suite",
        "plugins": [
            {"type": "ptp", "ipMasq": False, "mtu": 1500,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }, indent=2)


def service_guard() -> str:
    """A node's shell command (idempotent) refusing pod traffic to a Service address that
    kube-proxy has not rewritten. Sent out through Docker's gateway instead, the first connection
    of a pod started before kube-proxy's rules leaves a conntrack entry the rules never rewrite,
    and the client waits out its dial timeout: CoreDNS reached the API server 30 s late
    (docs/offline-cluster.md, "The kind provider"). Refused, it is retried at once."""
    rule = f"FORWARD -d {SERVICE_SUBNET} -j REJECT"
    return f"iptables -C {rule} 2>/dev/null || iptables -I {rule}"


def routes(node: str, pod_cidrs: dict[str, str], addresses: dict[str, str]) -> list[tuple[str, str]]:
    """(pod CIDR, via address) for every other node: pod traffic between nodes goes node to node."""
    return [(cidr, addresses[other]) for other, cidr in sorted(pod_cidrs.items())
            if other != node and other in addresses]
