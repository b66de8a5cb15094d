"""Which component each pod belongs to, how many of each component's pods are ready, and a
multinode component's leader and workers, judged from the pods as listed: step 6's readiness (every
component's wanted pods ready, not a total that one component's surplus could fill), the ledger's
``readiness.components`` and the iteration page's layout."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deploy_suite.constants import LABEL_COMPONENT, LABEL_SELECTOR, Obj
from deploy_suite.model.dgd import Dgd


def pod_ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


@dataclass(frozen=True)
class ComponentReady:
    """One component's pods: how many it wants (replicas x nodes) and how many are ready."""

    component: str
    wanted: int
    ready: int

    @property
    def met(self) -> bool:
        return self.ready >= self.wanted


def ready_by_component(pods: Sequence[Obj], dgd_name: str, wanted: Mapping[str, int]) -> list[ComponentReady]:
    """Each component's ready pods against its wanted count, in the order of ``wanted``."""
    return [ComponentReady(name, count, sum(pod_ready(p) for p in pods if belongs(p, dgd_name, name)))
            for name, count in wanted.items()]


def components(pods: Sequence[Obj], dgd: Dgd, expected: Mapping[str, int]) -> dict[str, Any]:
    """Per component: pods expected and ready, their names and nodes; a multinode component's
    ``layout`` (leader first, each pod on its node)."""
    out: dict[str, Any] = {}
    for comp in dgd.components:
        mine = [p for p in pods if belongs(p, dgd.name, comp.name)]
        out[comp.name] = {"expected": expected[comp.name], "ready": sum(map(pod_ready, mine)),
                          "pods": sorted(p["metadata"]["name"] for p in mine),
                          "nodes": sorted({p["spec"].get("nodeName", "") for p in mine})}
        roles = {p["metadata"]["name"]: (role, p["spec"].get("nodeName", "")) for p in mine
                 if (role := multinode_role(p)) is not None}
        if roles:
            out[comp.name]["layout"] = [{"pod": name, "role": role, "node": node} for name, (role, node) in
                                        sorted(roles.items(), key=lambda kv: (kv[1][0] != "leader", kv[0]))]
    return out


def multinode_role(pod: Obj) -> str | None:
    """``leader`` or ``worker`` of a multinode pod, by the labels each orchestrator puts on it
    (docs/operator-generations.md): the operator's ``role`` (LWS path), LWS's worker index (0 leads),
    Grove's clique name (``<component>-ldr``/``-wkr``); None for a single-node pod."""
    labels = pod["metadata"].get("labels") or {}
    if labels.get("role") in {"leader", "worker"}:
        return str(labels["role"])
    index = labels.get("leaderworkerset.sigs.k8s.io/worker-index")
    if index is not None:
        return "leader" if str(index) == "0" else "worker"
    clique = str(labels.get("grove.io/podclique") or "")
    return "leader" if clique.endswith("-ldr") else "worker" if clique.endswith("-wkr") else None


def belongs(pod: Obj, dgd_name: str, component: str) -> bool:
    """A pod of ``component``: the operator's component label, or its selector label."""
    labels = pod["metadata"].get("labels") or {}
    return labels.get(LABEL_COMPONENT) == component or labels.get(LABEL_SELECTOR) == f"{dgd_name}-{component.lower()}"
