"""A small KAI-like gang binder for pods with ``schedulerName: kai-scheduler`` (``--with grove``).

The real KAI scheduler cannot run offline; this binder, run by the controllers process, plays its
observable part, as ``docs/offline-cluster.md`` ("Grove and KAI") records: it binds the pods of
one gang (the ``grove.io/podgang`` label) all together or not at all, once none of them is still
gated; when they do not fit it leaves them Pending and writes KAI's words: a Warning event
``Unschedulable`` on each pod (``No nodes with enough resources were found: N node(s) didn't
have enough resources: GPUs.``), the pod condition ``PodScheduled=False`` reason
``Unschedulable``, and on the gang's KAI PodGroup (``scheduling.run.ai/v2alpha2``, ``pg-<gang>``)
a scheduling condition with reason ``PodSchedulingErrors``.

Fit is judged on GPUs (``nvidia.com/gpu`` allocatable minus the requests of pods bound to the
node), the pod's nodeSelector and NoSchedule/NoExecute taints; not on CPU, memory or affinity.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from deploy_suite import clock
from deploy_suite.access.kube import Kube, Resource, translate
from deploy_suite.constants import GPU_RESOURCE, Obj
from deploy_suite.errors import Conflict, KubeError, NotFound
from deploy_suite_offline.procs import Log

Loop = tuple[str, Callable[[], Iterator[tuple[str, Obj]]], Callable[[str, Obj], None]]

SCHEDULER = "kai-scheduler"
LABEL_GANG = "grove.io/podgang"
KAI_PODGROUP_API = "scheduling.run.ai/v2alpha2"
KAI_PODGROUP = Resource("scheduling.run.ai", "v2alpha2", "podgroups", True, "PodGroup")
RETRY_S = 1.0
EVENT_EVERY_S = 30.0


def _gpus(pod: Obj) -> int:
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        value = (res.get("requests") or {}).get(GPU_RESOURCE) or (res.get("limits") or {}).get(GPU_RESOURCE)
        total += int(value or 0)
    return total


def _tolerated(pod: Obj, taint: Obj) -> bool:
    if taint.get("effect") not in ("NoSchedule", "NoExecute"):
        return True
    for t in (pod.get("spec") or {}).get("tolerations") or []:
        if t.get("operator") == "Exists" and not t.get("key"):
            return True
        same_value = t.get("operator") == "Exists" or t.get("value") == taint.get("value")
        if t.get("key") == taint.get("key") and same_value and t.get("effect") in (None, "", taint.get("effect")):
            return True
    return False


def _node_ready(node: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def place(pods: list[Obj], nodes: list[Obj], bound: list[Obj]) -> tuple[dict[str, str], str]:
    """Node per pod name for the whole gang (first fit, largest pods first), or ({}, KAI's reason)."""
    free = {n["metadata"]["name"]: int(((n.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE) or 0)
            for n in nodes}
    for p in bound:
        node = (p.get("spec") or {}).get("nodeName")
        if node in free and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            free[node] -= _gpus(p)
    placement: dict[str, str] = {}
    short_gpu = 0
    for pod in sorted(pods, key=_gpus, reverse=True):
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        short_gpu = 0
        for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
            name = node["metadata"]["name"]
            labels = node["metadata"].get("labels") or {}
            if not _node_ready(node) or any(labels.get(k) != v for k, v in selector.items()) or \
                    not all(_tolerated(pod, t) for t in (node.get("spec") or {}).get("taints") or []):
                continue
            if free[name] < _gpus(pod):
                short_gpu += 1
                continue
            free[name] -= _gpus(pod)
            placement[pod["metadata"]["name"]] = name
            break
        else:
            return {}, (f"No nodes with enough resources were found: {short_gpu} node(s) didn't have enough "
                        "resources: GPUs.")
    return placement, ""


class KaiBinder:
    def __init__(self, kube: Kube, log: Log) -> None:
        self.kube = kube
        self.log = log
        self._pending: set[tuple[str, str]] = set()  # (namespace, gang)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._warned: dict[str, float] = {}  # pod uid -> monotonic time of the last Unschedulable event

    def loops(self, stop: threading.Event) -> list[Loop]:
        def events() -> Iterator[tuple[str, Obj]]:
            return self.kube.watch_events("Pod", stop, field_selector=f"spec.schedulerName={SCHEDULER}")

        return [("kai/pods", events, self.on_pod)]

    def on_pod(self, etype: str, pod: Obj) -> None:
        meta = pod.get("metadata") or {}
        gang = (meta.get("labels") or {}).get(LABEL_GANG)
        if etype == "DELETED" or not gang or (pod.get("spec") or {}).get("nodeName"):
            return
        with self._lock:
            self._pending.add((str(meta.get("namespace")), gang))
        self._wake.set()

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self._run, args=(stop,), daemon=True, name="kai/binder")
        thread.start()
        return thread

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self._wake.wait(RETRY_S)  # woken by a pod event; else retried, as capacity may have freed
            self._wake.clear()
            with self._lock:
                gangs = sorted(self._pending)
            for ns, gang in gangs:
                try:
                    if self._schedule(ns, gang):
                        with self._lock:
                            self._pending.discard((ns, gang))
                except KubeError as exc:
                    self.log(f"kai: gang {ns}/{gang}: {exc}")

    def _schedule(self, ns: str, gang: str) -> bool:
        """True when nothing of the gang is left to bind."""
        pods = [p for p in self.kube.list_items("Pod", ns, label_selector=f"{LABEL_GANG}={gang}")[0]
                if (p.get("spec") or {}).get("schedulerName") == SCHEDULER
                and not p["metadata"].get("deletionTimestamp")]
        unbound = [p for p in pods if not p["spec"].get("nodeName")]
        if not unbound:
            return True
        if any(p["spec"].get("schedulingGates") for p in unbound):
            return False  # the gang is not complete yet (Grove lifts the gates)
        nodes = self.kube.list_items("Node")[0]
        bound = self.kube.list_items("Pod", field_selector="spec.nodeName!=")[0]  # terminating ones still hold GPUs
        placement, reason = place(unbound, nodes, bound)
        if not placement:
            self._unschedulable(ns, gang, unbound, reason)
            return False
        for pod in unbound:
            self._bind(pod, placement[pod["metadata"]["name"]])
        self.log(f"kai: bound gang {ns}/{gang} ({len(unbound)} pods)")
        return True

    def _bind(self, pod: Obj, node: str) -> None:
        meta = pod["metadata"]
        path = Resource("", "v1", "pods", True, "Pod").path(meta["namespace"], meta["name"], "binding")
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        try:
            self.kube.transport.request("POST", path, {}, body)
        except Exception as exc:
            err = translate(exc, f"bind pod {meta['name']}")
            if not isinstance(err, Conflict | NotFound):
                raise err from exc

    def _unschedulable(self, ns: str, gang: str, pods: list[Obj], reason: str) -> None:
        now = clock.monotonic()
        stamp = clock.iso_now()
        for pod in pods:
            meta = pod["metadata"]
            if now - self._warned.get(meta["uid"], -EVENT_EVERY_S) < EVENT_EVERY_S:
                continue
            self._warned[meta["uid"]] = now
            self.kube.patch_status("Pod", meta["name"], ns, {"conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": reason,
                 "lastTransitionTime": stamp}]})
            detail = f"Resources were not found for pod {ns}/{meta['name']} due to: {reason[0].lower()}{reason[1:]}"
            self._podgroup(ns, gang, len(pods), detail, stamp)
            # The event last: whoever reacts to it finds the pod condition and the PodGroup written.
            self.kube.create({"apiVersion": "v1", "kind": "Event",
                              "metadata": {"name": f"{meta['name']}.{time.time_ns():x}", "namespace": ns},
                              "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                                 "namespace": ns, "uid": meta["uid"]},
                              "reason": "Unschedulable", "message": reason, "type": "Warning", "count": 1,
                              "firstTimestamp": stamp, "lastTimestamp": stamp,
                              "source": {"component": SCHEDULER}}, ns)

    def _podgroup(self, ns: str, gang: str, members: int, detail: str, stamp: str) -> None:
        name = f"pg-{gang}"
        self.kube.apply({"apiVersion": KAI_PODGROUP_API, "kind": "PodGroup",
                              "metadata": {"name": name, "namespace": ns, "labels": {LABEL_GANG: gang}},
                              "spec": {"minMember": members, "queue": "dynamo"}}, ns)
        self.kube.patch_status(KAI_PODGROUP, name, ns, {"schedulingConditions": [
            {"type": "UnschedulableOnNodePool", "nodePool": "default", "transitionID": "0",
             "lastTransitionTime": stamp,
             "reasons": [{"reason": "PodSchedulingErrors", "message": detail}]}]})
