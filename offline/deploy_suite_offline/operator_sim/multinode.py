"""Multinode components (``multinode.nodeCount > 1``): the LeaderWorkerSet path, and its controller.

As ``docs/offline-cluster.md`` ("Multinode") records: the operator detects LWS by API group and
uses it only when both ``leaderworkerset.x-k8s.io`` and ``scheduling.volcano.sh`` are served; per
replica it creates one LeaderWorkerSet ``<component resource>-<i>`` of size nodeCount (one leader
and nodeCount-1 workers, pods labelled ``role: leader|worker``) and a Volcano PodGroup for its
gang. With no orchestrator the DGD fails: ``no multinode orchestrator available``.

There is no LWS controller offline, so :class:`LwsController` plays its observable part: for each
LeaderWorkerSet it creates the group's pods, leader ``<lws>-0`` and workers ``<lws>-0-<j>``, with
LWS's labels, owned by the LeaderWorkerSet (the real one puts them under two StatefulSets), and
recreates a pod that goes away. The real scheduler places them; kwok runs them.
"""

from __future__ import annotations

import copy

from deploy_suite.access.kube import Kube, Resource
from deploy_suite.constants import LABEL_DGD_NAME, Obj
from deploy_suite.errors import Conflict
from deploy_suite_offline.errors import ReconcileError

NO_ORCHESTRATOR = "no multinode orchestrator available"
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS = Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", True, "LeaderWorkerSet")
VOLCANO_API = "scheduling.volcano.sh/v1beta1"
LABEL_LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LABEL_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LABEL_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LABEL_ROLE = "role"


def pod_ready(pod: Obj) -> bool:
    """A pod counts for its group once its Ready condition is True (k8s.io/kubernetes
    pkg/api/v1/pod IsPodReady, which LWS and Grove read) and it is running."""
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


class NoOrchestrator(ReconcileError):
    """A multinode component on a cluster with neither LWS (and Volcano) nor Grove."""


def lws_names(base: str, replicas: int) -> list[str]:
    return [f"{base}-{i}" for i in range(replicas)]


def leader_worker_set(name: str, namespace: str, deployment: Obj, node_count: int, owner: Obj) -> Obj:
    """One LeaderWorkerSet (one replica of the component): a group of ``node_count`` pods."""
    template = copy.deepcopy(deployment["spec"]["template"])
    labels = dict(deployment["metadata"]["labels"])
    return {"apiVersion": LWS_API, "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner]},
            "spec": {"replicas": 1, "startupPolicy": "LeaderCreated",
                     "leaderWorkerTemplate": {"size": node_count, "restartPolicy": "RecreateGroupOnPodRestart",
                                              "leaderTemplate": template, "workerTemplate": copy.deepcopy(template)}}}


def pod_group(name: str, namespace: str, node_count: int, labels: Obj, owner: Obj) -> Obj:
    """The Volcano PodGroup that gang-schedules one LeaderWorkerSet group."""
    return {"apiVersion": VOLCANO_API, "kind": "PodGroup",
            "metadata": {"name": f"{name}-0", "namespace": namespace, "labels": labels, "ownerReferences": [owner]},
            "spec": {"minMember": node_count}}


def group_pods(lws: Obj) -> list[Obj]:
    """The pods LWS makes for group 0 of ``lws``: leader first, then the workers."""
    meta = lws["metadata"]
    spec = lws["spec"]["leaderWorkerTemplate"]
    owner = {"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "name": meta["name"], "uid": meta["uid"],
             "controller": True, "blockOwnerDeletion": True}
    pods = []
    for index in range(int(spec["size"])):
        template = copy.deepcopy(spec["leaderTemplate" if index == 0 else "workerTemplate"])
        labels = {**(template.get("metadata") or {}).get("labels", {}), LABEL_LWS_NAME: meta["name"],
                  LABEL_GROUP_INDEX: "0", LABEL_WORKER_INDEX: str(index),
                  LABEL_ROLE: "leader" if index == 0 else "worker"}
        pod_spec = template["spec"]
        pod_spec.setdefault("subdomain", meta["name"])
        pods.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"{meta['name']}-0" + (f"-{index}" if index else ""),
                                  "namespace": meta["namespace"], "labels": labels,
                                  "annotations": (template.get("metadata") or {}).get("annotations") or {},
                                  "ownerReferences": [owner]},
                     "spec": pod_spec})
    return pods


class LwsController:
    """Creates the pods of LeaderWorkerSets (the offline cluster has no LWS controller)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def ensure(self, lws: Obj) -> None:
        meta = lws["metadata"]
        present = {p["metadata"]["name"] for p in self.kube.list_items(
            "Pod", meta["namespace"], label_selector=f"{LABEL_LWS_NAME}={meta['name']}")[0]}
        for pod in group_pods(lws):
            if pod["metadata"]["name"] not in present:
                try:
                    self.kube.create(pod, meta["namespace"])
                except Conflict:
                    continue  # a pod of that name is still terminating; the next reconcile retries

    def readiness(self, namespace: str, dgd: str, names: list[str], node_count: int) -> tuple[bool, str, Obj]:
        """(ready, reason, replica counts) of a component's groups: a group is ready when all its pods are."""
        pods = self.kube.list_items("Pod", namespace, label_selector=f"{LABEL_DGD_NAME}={dgd}")[0]
        ready_groups = 0
        for name in names:
            mine = [p for p in pods if (p["metadata"].get("labels") or {}).get(LABEL_LWS_NAME) == name
                    and not p["metadata"].get("deletionTimestamp")]
            if len(mine) == node_count and all(pod_ready(p) for p in mine):
                ready_groups += 1
        counts = {"replicas": len(names), "updatedReplicas": len(names), "readyReplicas": ready_groups,
                  "availableReplicas": ready_groups}
        return ready_groups == len(names), f"desired={len(names)}, ready={ready_groups}", counts

