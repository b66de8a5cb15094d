"""A fault of a real node: its container stopped, the node goes NotReady (the node lifecycle
controller's own judgement, not a Stage of ours); started again, it is Ready with its GPUs, and
`cluster up` on the running cluster restores whatever the restart lost."""

from __future__ import annotations

import pytest

from deploy_suite.access.kube import Kube, Obj
from deploy_suite.access.watch import Watch
from deploy_suite.constants import GPU_RESOURCE
from deploy_suite_offline.kind import docker
from deploy_suite_offline.kind.config import POOL_NODE_LABEL
from deploy_suite_offline.kind.provider import KindProvider

pytestmark = [pytest.mark.kind, pytest.mark.matrix]


def _wait_ready(kube: Kube, node: str, ready: bool, timeout: float = 240.0) -> Obj:
    def judge(objs: dict[str, Obj]) -> tuple[bool, str]:
        obj = next(iter(objs.values()), {})
        state = next((c.get("status") for c in (obj.get("status") or {}).get("conditions") or []
                      if c.get("type") == "Ready"), None)
        return (state == "True") == ready, f"Ready={state}"

    kube.wait_for(Watch("Node", name=node), judge, awaited=f"node {node} Ready={ready}", timeout=timeout)
    return kube.get("Node", node)


def test_a_stopped_worker_goes_not_ready_and_comes_back_with_its_gpus(
        kind_cluster_offline: KindProvider, kind_kube: Kube) -> None:
    items, _ = kind_kube.list_items("Node", label_selector=f"{POOL_NODE_LABEL}=h200-1")
    node = items[0]["metadata"]["name"]
    docker.run("stop", "-t", "5", node)
    try:
        stopped = _wait_ready(kind_kube, node, ready=False)
        ready = next(c for c in stopped["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "Unknown" and ready["reason"] == "NodeStatusUnknown"
    finally:
        docker.run("start", node)
    kind_cluster_offline.up()  # the running cluster: starts stopped nodes, writes CNI routes and GPUs again
    back = _wait_ready(kind_kube, node, ready=True)
    assert back["status"]["allocatable"][GPU_RESOURCE] == "8"
