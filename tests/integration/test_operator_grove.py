"""The Grove path with the KAI-like binder (``cluster up --with grove``) on a real offline cluster.

A multinode DGD becomes a PodCliqueSet, PodCliques and a PodCliqueScalingGroup with Grove's names
and labels; its pods are created gated, released once the PodGang exists, and bound as one gang by
the binder (``schedulerName: kai-scheduler``). An oversized pod is left Pending with KAI's wording.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_suite.access.kube import Kube, Obj
from deploy_suite.access.watch import Watch
from deploy_suite_offline.cluster import OfflineCluster
from deploy_suite_offline.kai import KAI_PODGROUP
from deploy_suite_offline.operator_sim.grove import PCLQ, PCS, PCSG, PODGANG
from tests.integration.replica import BETA, manifest, namespace, pods_of, ready_condition, session_cluster, wait_state

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def grove_cluster(offline_clusters: Any) -> Iterator[tuple[OfflineCluster, Kube]]:
    with session_cluster(offline_clusters, "multinode", orchestrators=("grove",)) as pair:
        yield pair


def test_a_multinode_dgd_becomes_grove_objects_and_a_kai_bound_gang(
        grove_cluster: tuple[OfflineCluster, Kube]) -> None:
    cluster, kube = grove_cluster
    with namespace(kube) as ns:
        kube.apply(manifest("dgd-multinode.yaml"), ns)
        dgd = wait_state(kube, BETA, ns, "multinode", "successful")
        assert dgd["status"]["components"]["TrtllmWorker"]["componentKind"] == "PodCliqueScalingGroup"
        assert dgd["status"]["components"]["TrtllmWorker"]["componentNames"] == ["multinode-0-trtllmworker"]
        assert dgd["status"]["components"]["Frontend"]["componentKind"] == "PodClique"
        pcs = kube.get(PCS, "multinode", ns)
        assert pcs["metadata"]["ownerReferences"][0]["uid"] == dgd["metadata"]["uid"]
        pcsg = kube.get(PCSG, "multinode-0-trtllmworker", ns)
        assert pcsg["metadata"]["ownerReferences"][0]["kind"] == "PodCliqueSet"
        cliques = {q["metadata"]["name"]: q["spec"]["replicas"] for q in kube.list_items(PCLQ, ns)[0]}
        assert cliques == {"multinode-0-frontend": 1, "multinode-0-trtllmworker-0-trtllmworker-ldr": 1,
                           "multinode-0-trtllmworker-0-trtllmworker-wkr": 1}
        pods = pods_of(kube, ns, "multinode")
        workers = [p for p in pods if p["metadata"]["labels"]["nvidia.com/dynamo-component"] == "TrtllmWorker"]
        assert sorted(p["metadata"]["labels"]["role"] for p in workers) == ["leader", "worker"]
        assert len({p["spec"]["nodeName"] for p in workers}) == 2  # 8 GPUs each: one node per pod
        for p in pods:
            labels = p["metadata"]["labels"]
            assert p["spec"]["schedulerName"] == "kai-scheduler" and not p["spec"].get("schedulingGates")
            assert labels["kai.scheduler/queue"] == "dynamo" and labels["grove.io/podgang"] == "multinode-0"
            assert labels["app.kubernetes.io/managed-by"] == "grove-operator"
            assert p["metadata"]["name"].startswith(labels["grove.io/podclique"] + "-")
        gang = kube.get(PODGANG, "multinode-0", ns)
        assert sorted(r["name"] for g in gang["spec"]["podgroups"] for r in g["podReferences"]) == \
            sorted(p["metadata"]["name"] for p in pods)
        # Created gated, released by the replica (a patch of each pod), bound by the binder.
        audit = [json.loads(line) for line in Path(cluster.info().audit_log).read_text().splitlines()]
        names = {p["metadata"]["name"] for p in pods}
        patched = {a["objectRef"]["name"] for a in audit if a.get("verb") == "patch"
                   and (a.get("objectRef") or {}).get("resource") == "pods"
                   and a.get("userAgent", "").startswith("deploy-suite-operator-sim")}
        bound = {a["objectRef"]["name"] for a in audit if a.get("verb") == "create"
                 and (a.get("objectRef") or {}).get("subresource") == "binding"
                 and a.get("userAgent", "").startswith("deploy-suite-kai")}
        assert names <= patched and names <= bound


def test_an_oversized_pod_is_unschedulable_in_kai_words(grove_cluster: tuple[OfflineCluster, Kube]) -> None:
    _cluster, kube = grove_cluster
    with namespace(kube) as ns:
        kube.apply(manifest("dgd-nine-gpus.yaml"), ns)

        def unschedulable(objs: dict[str, Obj]) -> tuple[bool, str]:
            msgs = [e["message"] for e in objs.values() if e.get("reason") == "Unschedulable"]
            return bool(msgs), msgs[-1] if msgs else "no Unschedulable yet"

        state = kube.wait_for(Watch("Event", ns), unschedulable, awaited="KAI Unschedulable", timeout=30)
        assert state.description == \
            "No nodes with enough resources were found: 5 node(s) didn't have enough resources: GPUs."  # CPU node too
        pods = pods_of(kube, ns, "nine-gpus")
        assert all(not p["spec"].get("nodeName") for p in pods)  # a gang binds whole or not at all
        cond = next(c for c in pods[0]["status"]["conditions"] if c["type"] == "PodScheduled")
        assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
        def with_conditions(objs: dict[str, Obj]) -> tuple[bool, str]:
            pg = objs.get(f"{ns}/pg-nine-gpus-0") or {}
            return bool((pg.get("status") or {}).get("schedulingConditions")), str(pg.get("status"))

        state = kube.wait_for(Watch(KAI_PODGROUP, ns, name="pg-nine-gpus-0"), with_conditions,
                              awaited="KAI PodGroup conditions", timeout=30)
        reasons = state.objects[f"{ns}/pg-nine-gpus-0"]["status"]["schedulingConditions"][0]["reasons"]
        assert reasons[0]["reason"] == "PodSchedulingErrors"
        assert "no nodes with enough resources were found" in reasons[0]["message"]
        dgd = wait_state(kube, BETA, ns, "nine-gpus", "pending")  # the replica may write it after KAI's verdict
        assert ready_condition(dgd)["status"] == "False"
