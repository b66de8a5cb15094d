"""A real node lost during step 6 (issue 20, point 7): the kind worker that runs the DGD's worker is
stopped while step 6 waits on it loading. Its kubelet stops posting, the node lifecycle controller
marks it Unknown, and the harness blocks the run as the platform's fault (``triage.node_lost``),
charging no failed attempt; once the node is started again, a rerun of the same command ends ready.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from deploy_suite.access.kube import Obj
from deploy_suite.access.watch import Watch
from deploy_suite_offline.kind import docker
from deploy_suite_offline.kind.provider import KindProvider
from tests.kind.test_kind_harness import RECIPE, TIMEOUTS
from tests.kind.test_kind_node_faults import _wait_ready
from tests.support import outcomes
from tests.support.targets import Target

pytestmark = [pytest.mark.kind, pytest.mark.matrix]

LOADING_S = 150  # the worker "loads" this long before its engine starts: step 6 waits meanwhile
WORKER_PODS = "nvidia.com/dynamo-component=prefill"




def _running(objs: dict[str, Obj]) -> tuple[bool, str]:
    up = [o for o in objs.values() if any("running" in (c.get("state") or {})
                                          for c in (o.get("status") or {}).get("containerStatuses") or [])]
    return bool(up), f"{len(up)} worker pod(s) running"


def test_a_node_stopped_during_step_6_blocks_as_platform_and_a_rerun_after_it_returns_ends_ready(
        kind_cluster_offline: KindProvider, target: Target) -> None:
    text = RECIPE.read_text(encoding="utf-8").replace("python3 -m dynamo.vllm",
                                                      f"sleep {LOADING_S}; exec python3 -m dynamo.vllm")
    assert f"sleep {LOADING_S}" in text
    loading = target.tmp / "deploy-loading.yaml"
    loading.write_text(text, encoding="utf-8")
    exp = target.experiment(loading, support={}, timeouts=TIMEOUTS)
    stopped: dict[str, Any] = {}

    def stop_the_workers_node() -> None:
        try:
            pods = target.kube.wait_for(Watch("Pod", target.namespace, label_selector=WORKER_PODS), _running,
                                        awaited="the worker loading", timeout=240).objects
            stopped["node"] = str(next(iter(pods.values()))["spec"]["nodeName"])
            docker.run("stop", "-t", "5", stopped["node"])
        except Exception as exc:  # reported by the assertions below
            stopped["error"] = f"{type(exc).__name__}: {exc}"

    helper = threading.Thread(target=stop_the_workers_node, name="stop-node", daemon=True)
    helper.start()
    try:
        run = target.run(exp)
    finally:
        helper.join(timeout=60)
        if "node" in stopped:
            docker.run("start", stopped["node"])
            kind_cluster_offline.up()  # the running cluster: CNI routes and GPUs written again
    assert "error" not in stopped, stopped
    node = stopped["node"]
    data = run.ledger()
    assert data["status"] == "blocked", run.output[-4000:]
    assert outcomes(data)["step6_readiness"] == "blocked"
    assert data["failed_attempts"] == []
    (blocker,) = data["blockers"]
    assert blocker["class"] == "platform", blocker
    assert f"node {node} of pod " in blocker["message"] and "NodeStatusUnknown" in blocker["message"], blocker
    assert data["readiness"]["last_progress"]["milestones"] > 0  # the wait's evidence is kept

    _wait_ready(target.kube, node, ready=True)
    rerun = target.run(exp)
    again = rerun.ledger()
    assert again["status"] == "ready", rerun.output[-4000:]
    assert again["smoke"]["success"] == 1 and again["failed_attempts"] == []
