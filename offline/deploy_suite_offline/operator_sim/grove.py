"""The Grove path (``cluster up --with grove``): PodCliqueSet, PodCliques, PodCliqueScalingGroups.

As ``docs/offline-cluster.md`` ("Grove and KAI") records: with Grove installed the newest operator
turns a DGD into one PodCliqueSet named like the DGD; a single-node component becomes a PodClique
``<pcs>-0-<component>``; a multinode component a PodCliqueScalingGroup ``<pcs>-0-<component>``
whose replicas each hold a leader clique ``<pcsg>-<r>-<component>-ldr`` (1 pod) and a worker
clique ``<pcsg>-<r>-<component>-wkr`` (nodeCount-1 pods). Pods are created with the scheduling
gate ``grove.io/podgang-pending-creation``, which is lifted once the gang's PodGang exists; they go
to KAI (``schedulerName: kai-scheduler``, queue label ``kai.scheduler/queue``), played by
:mod:`deploy_suite_offline.kai`.

There is no Grove operator offline, so :class:`GrovePath` also plays its observable part: it
creates the cliques' pods (``<pclq>-<5 random characters>``, owned by the PodClique, with Grove's
labels), the PodGang, lifts the gates, and makes a pod that went away again.
"""

from __future__ import annotations

import copy
import secrets

from deploy_suite.access.kube import Kube, Resource, translate
from deploy_suite.constants import LABEL_DGD_NAME, Obj
from deploy_suite.errors import Conflict, NotFound
from deploy_suite_offline.operator_sim.multinode import pod_ready
from deploy_suite_offline.operator_sim.plan import Plan
from deploy_suite_offline.operator_sim.spec import Part

GROVE_API = "grove.io/v1alpha1"
PCS = Resource("grove.io", "v1alpha1", "podcliquesets", True, "PodCliqueSet")
PCLQ = Resource("grove.io", "v1alpha1", "podcliques", True, "PodClique")
PCSG = Resource("grove.io", "v1alpha1", "podcliquescalinggroups", True, "PodCliqueScalingGroup")
PODGANG_API = "scheduler.grove.io/v1alpha1"
PODGANG = Resource("scheduler.grove.io", "v1alpha1", "podgangs", True, "PodGang")
GATE = "grove.io/podgang-pending-creation"
KAI_SCHEDULER = "kai-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
QUEUE_ANNOTATION = "nvidia.com/kai-scheduler-queue"
DEFAULT_QUEUE = "dynamo"
ENABLE_ANNOTATION = "nvidia.com/enable-grove"
LABEL_PODCLIQUE = "grove.io/podclique"
LABEL_PODGANG = "grove.io/podgang"
LABEL_PCSG = "grove.io/podcliquescalinggroup"
LABEL_PCSG_REPLICA = "grove.io/podcliquescalinggroup-replica-index"
LABEL_PCS_REPLICA = "grove.io/podcliqueset-replica-index"


def wanted(obj: Obj) -> bool:
    """The operator takes the Grove path unless the DGD opts out."""
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(ENABLE_ANNOTATION) != "false"


def _owner(obj: Obj) -> Obj:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def _grove_labels(plan: Plan, extra: dict[str, str]) -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": "grove-operator", "app.kubernetes.io/part-of": plan.name,
            LABEL_PCS_REPLICA: "0", LABEL_PODGANG: f"{plan.name}-0", LABEL_DGD_NAME: plan.name, **extra}


def cliques(plan: Plan, c: Part) -> list[tuple[str, int, dict[str, str]]]:
    """(PodClique name, pods, extra labels) of one component."""
    base = f"{plan.name}-0-{c.name.lower()}"
    if c.node_count <= 1:
        return [(base, c.replicas, {"app.kubernetes.io/component": "pcs-podclique"})]
    out = []
    for r in range(c.replicas):
        extra = {"app.kubernetes.io/component": "pcsg-podclique", LABEL_PCSG: base, LABEL_PCSG_REPLICA: str(r)}
        out.append((f"{base}-{r}-{c.name.lower()}-ldr", 1, {**extra, "role": "leader"}))
        out.append((f"{base}-{r}-{c.name.lower()}-wkr", c.node_count - 1, {**extra, "role": "worker"}))
    return out


class GrovePath:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def apply(self, plan: Plan, dgd_owner: Obj, queue: str) -> None:
        """The PodCliqueSet and, owned by it, the PodCliques and PodCliqueScalingGroups."""
        ns = plan.namespace
        pcs = self.kube.apply({"apiVersion": GROVE_API, "kind": "PodCliqueSet",
                               "metadata": {"name": plan.name, "namespace": ns, "ownerReferences": [dgd_owner],
                                            "labels": {LABEL_DGD_NAME: plan.name}},
                               "spec": {"replicas": 1, "template": {"cliques": [
                                   {"name": c.name.lower(), "spec": {"replicas": c.replicas,
                                                                     "nodeCount": c.node_count}}
                                   for c in plan.model.components]}}}, ns)
        for c in plan.model.components:
            owner = _owner(pcs)
            if c.node_count > 1:
                component = {"app.kubernetes.io/component": "pcs-podcliquescalinggroup"}
                pcsg = self.kube.apply({
                    "apiVersion": GROVE_API, "kind": "PodCliqueScalingGroup",
                    "metadata": {"name": f"{plan.name}-0-{c.name.lower()}", "namespace": ns,
                                 "ownerReferences": [owner], "labels": _grove_labels(plan, component)},
                    "spec": {"replicas": c.replicas, "minAvailable": 1,
                             "cliqueNames": [f"{c.name.lower()}-ldr", f"{c.name.lower()}-wkr"]}}, ns)
                owner = _owner(pcsg)
            template = self._pod_template(plan, c, queue)
            for name, pods, extra in cliques(plan, c):
                self.kube.apply({"apiVersion": GROVE_API, "kind": "PodClique",
                                 "metadata": {"name": name, "namespace": ns, "ownerReferences": [owner],
                                              "labels": _grove_labels(plan, extra)},
                                 "spec": {"replicas": pods, "podSpec": template["spec"],
                                          "labels": template["metadata"]["labels"]}}, ns)

    @staticmethod
    def _pod_template(plan: Plan, c: Part, queue: str) -> Obj:
        template: Obj = copy.deepcopy(plan.deployments[c.name]["spec"]["template"])
        template["spec"]["schedulerName"] = KAI_SCHEDULER
        template["metadata"]["labels"][QUEUE_LABEL] = queue
        return template

    def ensure_pods(self, plan: Plan) -> None:
        """Grove's part: each clique's pods (created gated), the PodGang, then the gates lifted."""
        ns = plan.namespace
        sel = f"{LABEL_DGD_NAME}={plan.name}"
        pclqs = self.kube.list_items(PCLQ, ns, label_selector=sel)[0]
        pods = [p for p in self.kube.list_items("Pod", ns, label_selector=sel)[0]
                if not p["metadata"].get("deletionTimestamp")]
        for pclq in pclqs:
            name = pclq["metadata"]["name"]
            have = [p for p in pods if (p["metadata"].get("labels") or {}).get(LABEL_PODCLIQUE) == name]
            for _ in range(int(pclq["spec"]["replicas"]) - len(have)):
                pods.append(self.kube.create(self._pod(pclq), ns))
        if pclqs and self.kube.get_or_none(PODGANG, f"{plan.name}-0", ns) is None:
            groups = [{"name": q["metadata"]["name"], "minReplicas": int(q["spec"]["replicas"]),
                       "podReferences": [{"namespace": ns, "name": p["metadata"]["name"]} for p in pods
                                         if p["metadata"]["labels"].get(LABEL_PODCLIQUE) == q["metadata"]["name"]]}
                      for q in pclqs]
            pcs = self.kube.get(PCS, plan.name, ns)
            self.kube.apply({"apiVersion": PODGANG_API, "kind": "PodGang",
                             "metadata": {"name": f"{plan.name}-0", "namespace": ns, "ownerReferences": [_owner(pcs)],
                                          "labels": _grove_labels(plan, {"app.kubernetes.io/component": "podgang"})},
                             "spec": {"podgroups": groups}}, ns)
        for pod in pods:
            if any(g.get("name") == GATE for g in pod["spec"].get("schedulingGates") or []):
                self._lift_gate(pod)

    @staticmethod
    def _pod(pclq: Obj) -> Obj:
        meta = pclq["metadata"]
        labels = {**pclq["spec"].get("labels", {}), **meta["labels"], LABEL_PODCLIQUE: meta["name"]}
        labels.pop("app.kubernetes.io/component", None)
        spec = copy.deepcopy(pclq["spec"]["podSpec"])
        spec["schedulingGates"] = [{"name": GATE}]
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{meta['name']}-{secrets.token_hex(3)[:5]}", "namespace": meta["namespace"],
                             "labels": labels, "ownerReferences": [_owner(pclq)]},
                "spec": spec}

    def _lift_gate(self, pod: Obj) -> None:
        meta = pod["metadata"]
        path = Resource("", "v1", "pods", True, "Pod").path(meta["namespace"], meta["name"])
        gates = [g for g in pod["spec"].get("schedulingGates") or [] if g.get("name") != GATE]
        try:
            self.kube.transport.request("PATCH", path, {}, {"spec": {"schedulingGates": gates or None}},
                                        "application/strategic-merge-patch+json")
        except Exception as exc:
            err = translate(exc, f"lift the scheduling gate of pod {meta['name']}")
            if not isinstance(err, NotFound | Conflict):
                raise err from exc

    def readiness(self, plan: Plan, c: Part) -> tuple[bool, str, Obj, str, list[str]]:
        """(ready, reason, counts, componentKind, componentNames) of one component on the Grove path."""
        pods = self.kube.list_items("Pod", plan.namespace, label_selector=f"{LABEL_DGD_NAME}={plan.name}")[0]

        def ready_pods(clique: str) -> int:
            return sum(1 for p in pods if (p["metadata"].get("labels") or {}).get(LABEL_PODCLIQUE) == clique
                       and not p["metadata"].get("deletionTimestamp") and pod_ready(p))

        groups = cliques(plan, c)
        if c.node_count <= 1:
            name, want, _ = groups[0]
            ready = ready_pods(name)
            counts = {"replicas": want, "updatedReplicas": want, "readyReplicas": ready, "availableReplicas": ready}
            return ready >= want, f"desired={want}, ready={ready}", counts, "PodClique", [name]
        ready_replicas = sum(1 for i in range(0, len(groups), 2)
                             if all(ready_pods(n) >= w for n, w, _ in groups[i:i + 2]))
        counts = {"replicas": c.replicas, "updatedReplicas": c.replicas, "readyReplicas": ready_replicas,
                  "availableReplicas": ready_replicas}
        return (ready_replicas >= c.replicas, f"desired={c.replicas}, ready={ready_replicas}", counts,
                "PodCliqueScalingGroup", [f"{plan.name}-0-{c.name.lower()}"])

