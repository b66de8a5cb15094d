"""The kind provider's pure parts: kind's configuration of a layout, the worker <-> pool node
mapping (labels, taints, GPUs), each node's CNI configuration and routes. No Docker needed."""

from __future__ import annotations

import json
import re

import pytest

from deploy_suite.constants import GPU_PRODUCT_LABEL
from deploy_suite_offline import pools
from deploy_suite_offline.errors import ClusterError
from deploy_suite_offline.kind import config, nodeimage, tools


def test_one_worker_per_pool_node_and_a_control_plane_all_mounting_the_shared_directory() -> None:
    layout = pools.load("default")
    doc = config.kind_config(layout, "/tmp/shared", built_here=True)
    roles = [n["role"] for n in doc["nodes"]]
    assert roles == ["control-plane"] + ["worker"] * len(layout.node_names())
    assert all(n["extraMounts"] == [{"hostPath": "/tmp/shared", "containerPath": config.SHARED_MOUNT}]
               for n in doc["nodes"])
    assert doc["networking"]["apiServerAddress"] == "127.0.0.1"
    assert doc["networking"]["disableDefaultCNI"] is True


def test_the_kubelet_is_allowed_on_cgroup_v1_with_every_image() -> None:
    layout = pools.load("default")
    for built_here in (True, False):
        patches = config.kind_config(layout, "/s", built_here=built_here)["kubeadmConfigPatches"]
        assert any("KubeletConfiguration" in p and "failCgroupV1: false" in p for p in patches)


def test_our_image_names_its_own_etcd_tag_and_runs_kubeadms_coredns_phase_a_stock_image_patches_neither() -> None:
    layout = pools.load("default")
    ours = "\n".join(config.kind_config(layout, "/s", built_here=True)["kubeadmConfigPatches"])
    stock = "\n".join(config.kind_config(layout, "/s", built_here=False)["kubeadmConfigPatches"])
    assert f'imageTag: "{nodeimage.ETCD_TAG}"' in ours and "- preflight" in ours
    assert "coredns" not in ours  # the addon phase runs: the image holds kubeadm's CoreDNS
    assert "skipPhases" not in stock and "imageTag" not in stock


def test_pods_are_refused_service_addresses_kube_proxy_has_not_rewritten_in_the_configured_subnet() -> None:
    doc = config.kind_config(pools.load("default"), "/s", built_here=True)
    assert doc["networking"]["serviceSubnet"] == config.SERVICE_SUBNET == "10.96.0.0/16"  # kube-dns: .10
    guard = config.service_guard()
    rule = f"FORWARD -d {config.SERVICE_SUBNET} -j REJECT"
    assert guard == f"iptables -C {rule} 2>/dev/null || iptables -I {rule}"  # checked first: once per node


def test_workers_are_named_as_kind_names_them() -> None:
    assert config.worker_names("c", 3) == ["c-worker", "c-worker2", "c-worker3"]


def test_each_worker_plays_its_pool_node_labels_taints_and_gpus() -> None:
    roles = {r.pool_node: r for r in config.worker_roles("c", pools.load("default"))}
    h100 = roles["h100-reserved-0"]
    assert h100.node == "c-worker3"
    assert h100.gpus == 8
    assert h100.labels[GPU_PRODUCT_LABEL] == "NVIDIA-H100-80GB-HBM3"
    assert h100.labels["nvidia.com/gpu.present"] == "true"
    assert h100.labels[config.POOL_NODE_LABEL] == "h100-reserved-0"
    assert h100.taints == [{"key": "example.com/reserved-for", "value": "tenant-b", "effect": "NoSchedule"}]
    assert "type" not in h100.labels and "kubernetes.io/hostname" not in h100.labels
    cpu = roles["cpu-0"]
    assert cpu.gpus == 0 and GPU_PRODUCT_LABEL not in cpu.labels and cpu.taints == []


def test_cni_configuration_allocates_from_the_nodes_pod_cidr() -> None:
    doc = json.loads(config.cni_conflist("10.244.3.0/24"))
    ptp = doc["plugins"][0]
    assert ptp["type"] == "ptp"
    assert ptp["ipam"]["ranges"] == [[{"subnet": "10.244.3.0/24"}]]
    assert {p["type"] for p in doc["plugins"]} == {"ptp", "portmap"}


def test_routes_lead_to_every_other_nodes_pod_cidr_through_that_node() -> None:
    cidrs = {"a": "10.244.0.0/24", "b": "10.244.1.0/24", "c": "10.244.2.0/24"}
    addresses = {"a": "172.20.0.2", "b": "172.20.0.3", "c": "172.20.0.4"}
    assert config.routes("b", cidrs, addresses) == [("10.244.0.0/24", "172.20.0.2"), ("10.244.2.0/24", "172.20.0.4")]


def test_component_images_cover_kubeadms_list_with_our_etcd_tag_and_coredns_under_kubeadms_tag() -> None:
    listed = ["registry.k8s.io/kube-apiserver:v1.36.1", "registry.k8s.io/kube-proxy:v1.36.1",
              "registry.k8s.io/coredns/coredns:v1.14.2", "registry.k8s.io/pause:3.10.2",
              "registry.k8s.io/etcd:3.6.8-0"]
    images = {c.ref: c for c in nodeimage.component_images(listed)}
    assert set(images) == {"registry.k8s.io/kube-apiserver:v1.36.1", "registry.k8s.io/kube-proxy:v1.36.1",
                           "registry.k8s.io/coredns/coredns:v1.14.2", "registry.k8s.io/pause:3.10.2",
                           f"registry.k8s.io/etcd:{nodeimage.ETCD_TAG}"}
    assert images["registry.k8s.io/kube-proxy:v1.36.1"].debian  # it needs iptables
    assert not images["registry.k8s.io/kube-apiserver:v1.36.1"].debian
    coredns = images["registry.k8s.io/coredns/coredns:v1.14.2"]
    assert coredns.binary == "coredns" and not coredns.debian
    assert "coredns" in nodeimage.AT_ROOT  # kubeadm's Deployment gives args only, to the entrypoint /coredns


def test_a_coredns_tag_other_than_the_one_built_is_refused() -> None:
    with pytest.raises(ClusterError, match="COREDNS_VERSION"):
        nodeimage.component_images(["registry.k8s.io/coredns/coredns:v1.99.0"])


def test_the_coredns_module_pins_the_version_kubeadm_names_and_only_the_corefiles_plugins() -> None:
    gomod = (tools.COREDNS_MODULE / "go.mod").read_text()
    assert f"github.com/coredns/coredns {tools.COREDNS_VERSION}\n" in gomod
    main = (tools.COREDNS_MODULE / "main.go").read_text()
    plugins = set(re.findall(r'"github.com/coredns/coredns/plugin/(\w+)"', main))
    # kubeadm v1.36's Corefile (docs/offline-cluster.md, "The kind provider"); `prometheus` is plugin/metrics.
    assert plugins == {"errors", "health", "ready", "kubernetes", "metrics", "forward", "cache", "loop", "reload",
                       "loadbalance"}
    directives = re.findall(r'^\t"(\w+)",$', main.split("var directives")[1].split("}")[0], re.MULTILINE)
    # CoreDNS's own execution order, our plugins only.
    assert directives == ["reload", "ready", "health", "prometheus", "errors", "loadbalance", "cache", "kubernetes",
                          "loop", "forward"]
