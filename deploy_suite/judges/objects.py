"""Triage of every object that events and statuses speak of: what ``deploy-suite triage`` prints.

Errors that stop below the DGD leave no pod to triage: a ResourceQuota or an admission webhook
refusing the pods (``FailedCreate`` on a ReplicaSet, StatefulSet, LeaderWorkerSet), an invalid
pod template held at the DynamoComponentDeployment (``Available=False``), a PodGroup or a Kueue
Workload that is not admitted. Each object is judged from its events and its status conditions
by the same words and rules as step 6's pods (:mod:`deploy_suite.judges.triage`); pods by
:func:`triage_pod`. docs/triage.md describes the categories, the actions and the output.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deploy_suite.constants import ObjView
from deploy_suite.judges import claims, jobs, operator_status, shape, signatures, statuses, triage, words
from deploy_suite.judges import nodes as node_judge
from deploy_suite.judges.triage import Verdict
from deploy_suite.vocab import TriageCategory

# Conditions that say something is wrong when False, and those that say so when True.
_BAD_WHEN_FALSE = frozenset({"Available", "Ready", "QuotaReserved", "Admitted"})
_BAD_WHEN_TRUE = frozenset({"PodSchedulingErrors", "Unschedulable", "ReplicaFailure", "Failed"})
DYNAMO_KINDS = frozenset({"DynamoGraphDeployment", "DynamoComponentDeployment"})
PROBE_REASONS = frozenset({"Unhealthy", "Killing"})  # the prober's and the kubelet's words on a probe


@dataclass
class Finding:
    """One object's verdict: ``kind``/``name`` in ``namespace``."""

    kind: str
    name: str
    namespace: str
    verdict: Verdict
    checked: list[str] = field(default_factory=list)  # what was read to judge it (docs/triage.md)

    @property
    def object(self) -> str:
        return f"{self.kind}/{self.name}"

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` shape of ``deploy-suite triage`` (docs/triage.md)."""
        v = self.verdict
        return {"object": self.object, "namespace": self.namespace, "action": v.action, "category": v.category,
                "diagnosis": v.diagnosis, "evidence": list(v.evidence), "can_wait": v.can_wait,
                "next_check_s": v.next_check_s, **shape.troubleshooting(self.kind, self.name, self.namespace, v,
                                                                         self.checked)}


def normalized(event: ObjView) -> dict[str, Any]:
    """An event of either API (core/v1 ``involvedObject``/``message``, events.k8s.io/v1
    ``regarding``/``note``) in the core/v1 shape the triage reads."""
    out = dict(event)
    out.setdefault("involvedObject", event.get("regarding") or {})
    if not out.get("message"):
        out["message"] = event.get("note") or ""
    if not out.get("count"):
        out["count"] = event.get("deprecatedCount") or (event.get("series") or {}).get("count") or 1
    return out


def _pull_messages(events: Sequence[ObjView]) -> list[str]:
    ordered = sorted(enumerate(events), key=lambda p: (triage.event_time(p[1]), p[0]))
    return [str(e.get("message")) for _, e in ordered if e.get("reason") in {"Failed", "BackOff", "ErrImagePull"}
            and words.is_pull_failure(str(e.get("message") or ""))]


def _done(pod: ObjView) -> bool:
    status = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return status.get("phase") == "Succeeded" or (status.get("phase") == "Running" and ready)


Logs = Mapping[str, Sequence[str]]  # a pod's containers' last log lines, by container name ("" = any)


def _logs_of(pod: ObjView, logs: Logs) -> dict[str, Sequence[str]]:
    """Each container's lines; a log saved for the pod as a whole serves each of its containers."""
    status = pod.get("status") or {}
    names = [str(c.get("name")) for c in [*(status.get("initContainerStatuses") or []),
                                           *(status.get("containerStatuses") or [])]]
    return {n: logs.get(n) or logs.get("") or () for n in names}


def triage_logs(subject: str, logs: Logs) -> Verdict | None:
    """Saved logs without the pod's status: only a decisive signature speaks (a transient one
    needs the restart count)."""
    for container, lines in logs.items():
        found = signatures.find(lines)
        if found is not None and found.signature.decisive:
            return triage.from_signature(f"{subject} container {container or '?'}",
                                         {"lastState": {"terminated": {"exitCode": 1}}}, lines, 0)
    return None


def _lost(pod: ObjView) -> ObjView | None:
    """The first container the kubelet lost (its state ``terminated`` as ``ContainerStatusUnknown``)."""
    status = pod.get("status") or {}
    return next((cs for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
                 if ((cs.get("state") or {}).get("terminated") or {}).get("reason") == words.LOST_CONTAINER), None)


def triage_rejected(pod: ObjView, subject: str) -> Verdict | None:
    """A pod ``Failed`` before it ran: the kubelet's admission (``OutOf<resource>``,
    ``UnexpectedAdmissionError``, ``NodeAffinity``) or an eviction, judged by its reason; a pod
    whose container the kubelet lost (``ContainerStatusUnknown``, exit 137 with no OOM kill) by
    the pod's own reason when it has one (an eviction), else as the node's fault."""
    status = pod.get("status") or {}
    lost = _lost(pod)
    if lost is not None and not status.get("reason"):
        ended = (lost.get("state") or {}).get("terminated") or {}
        said = words.judge_node(words.LOST_CONTAINER, str(ended.get("message") or ""))
        return triage.from_words(f"{subject} container {lost.get('name')}", f"terminated {words.LOST_CONTAINER} "
                                 f"(exit code {ended.get('exitCode')})", str(ended.get("message") or ""), said) \
            if said is not None else None
    if status.get("phase") != "Failed" or not status.get("reason"):
        return None
    reason, message = str(status["reason"]), str(status.get("message") or "")
    said = words.judge_node(reason, message) or words.judge_kubelet(reason, message) or \
        words.Words(TriageCategory.UNKNOWN, words.KUBELET, f"the pod failed ({reason})")
    return triage.from_words(subject, f"status {reason}", message, said)


def _last_errors(subject: str, obj: ObjView, recheck_s: float) -> list[Verdict]:
    """Grove's ``status.lastErrors`` (PodCliqueSet, PodClique, PodCliqueScalingGroup: code and
    description of the last reconcile errors), judged by the words they relay."""
    found = []
    for err in (obj.get("status") or {}).get("lastErrors") or []:
        code, text = str(err.get("code") or "lastError"), str(err.get("description") or "")
        said = statuses.last_error(text)
        if said is not None:
            found.append(triage.from_words(subject, f"lastErrors {code}", text, said, recheck_s))
    return found


def triage_pod(pod: ObjView | None, name: str, events: Sequence[ObjView], nodes: Sequence[ObjView] | None = None,
               *, recheck_s: float = 30.0, logs: Logs | None = None) -> Verdict | None:
    """A pod from its status (when given) and its events: containers (:func:`triage.triage_containers`,
    pulls judged with the pull events), scheduling while unbound (:func:`triage.triage_pending`),
    and the kubelet's other words (a missing Secret, a crash loop, the GPU runtime). A ready or
    finished pod has no verdict: its old warnings are history."""
    if pod is not None and _done(pod):
        return None
    subject = f"pod {name}"
    pulls = _pull_messages(events)
    found: list[Verdict | None] = []
    heard = triage.heard(events)
    # The prober's and the kubelet's word on a probe kill names why a container restarts: it comes
    # before the generic crash rule's restart count (docs/triage.md, "Probes").
    found += [triage.from_words(subject, str(e.get("reason")), str(e.get("message")), said, recheck_s)
              for e, said in heard if said.decisive and e.get("reason") in PROBE_REASONS]
    if pod is not None:
        found += [triage.triage_containers(pod, pulls[-2:], _logs_of(pod, logs or {})), triage_rejected(pod, subject)]
    else:
        found += [triage.triage_pull_events(subject, pulls[-2:]), triage_logs(subject, logs or {})]
    if pod is None or not (pod.get("spec") or {}).get("nodeName"):
        found.append(triage.triage_pending(pod or {"metadata": {"name": name}}, events, nodes, recheck_s))
    for event, said in heard:
        if said.speaker in {words.KUBELET, words.OPERATOR, words.CREATE, words.BINDER} and not (
                said.decisive and event.get("reason") in PROBE_REASONS):
            found.append(triage.from_words(subject, str(event.get("reason")), str(event.get("message")), said,
                                           recheck_s))
    return triage.combine(found)


def _condition_verdicts(subject: str, kind: str, obj: ObjView, recheck_s: float) -> list[Verdict]:
    status = obj.get("status") or {}
    found = []
    conditions = [*(status.get("conditions") or []), *(status.get("schedulingConditions") or [])]
    for cond in conditions:
        kind_ = str(cond.get("type") or "")
        known, said = statuses.judge_condition(kind, cond)
        if known:
            if said is not None and said.category != TriageCategory.CLEARED:
                found.append(triage.from_words(subject, f"{kind_}={cond.get('status')} {cond.get('reason') or ''}",
                                               str(cond.get("message") or ""), said, recheck_s))
            continue
        bad = (kind_ in _BAD_WHEN_FALSE and cond.get("status") == "False") or \
              (kind_ in _BAD_WHEN_TRUE and cond.get("status") == "True") or kind_.startswith("Unschedulable")
        if not bad:
            continue
        reason, message = str(cond.get("reason") or kind_), str(cond.get("message") or "")
        said = words.judge(reason, message) or words.judge(kind_, message)
        if said is None and kind in DYNAMO_KINDS:
            # Older operators write the error as the reason alone (docs/operator-generations.md).
            said = words.judge_operator(message or str(cond.get("reason") or ""))
            if said is None and status.get("state") == "failed" and \
                    not operator_status.TRANSIENT_ERRORS.search(message):
                # A reconcile error no rule reads: shown as it is (step 6 judges it by how long it lasts).
                said = words.Words(TriageCategory.UNKNOWN, words.OPERATOR, "a reconcile error no rule here reads")
        if said is None and kind_ == "Failed":
            # A failed Job says only that it failed (reason BackoffLimitExceeded, older messages misspelt):
            # why is in its pods' logs.
            said = words.Words(TriageCategory.UNKNOWN, words.CREATE, f"it failed ({reason}): its pods' logs say why")
        if said is not None and said.category != TriageCategory.CLEARED:
            found.append(triage.from_words(subject, f"{kind_}={cond.get('status')} {reason}", message, said, recheck_s))
    spec = obj.get("spec")
    if kind == "DynamoGraphDeployment" and isinstance(spec, Mapping) and not (spec.get("services") or
                                                                              spec.get("components")):
        # Zero components are trivially all ready: the operator reports Ready for an empty DGD.
        found.append(Verdict(TriageCategory.FAILED_DEPLOY,
                             f"{subject} declares no components: nothing is deployed, whatever "
                             "its Ready condition says", [f"{subject}: spec has no services/components"],
                             decisive=True))
    return found


def triage_object(kind: str, name: str, obj: ObjView | None, events: Sequence[ObjView],
                  recheck_s: float = 30.0) -> Verdict | None:
    """Any object but a pod, from its events and status conditions (``FailedCreate``, DCD
    ``Available=False``, PodGroup ``PodSchedulingErrors``/``Unschedulable``, Workload
    ``QuotaReserved=False``, Deployment ``ReplicaFailure``, DGD ``Ready=False``)."""
    subject = f"{kind}/{name}"
    found = [triage.from_words(subject, str(e.get("reason")), str(e.get("message")), said, recheck_s)
             for e, said in triage.heard(events)]
    if obj is not None:
        found += [*_condition_verdicts(subject, kind, obj, recheck_s), *_last_errors(subject, obj, recheck_s)]
    return triage.combine(found)


Key = tuple[str, str, str]


def _key(obj: ObjView, kind: str | None = None) -> Key:
    meta = obj.get("metadata") or {}
    return (str(kind or obj.get("kind") or ""), str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def triage_all(events: Iterable[ObjView], objects: Iterable[ObjView] = (), nodes: Sequence[ObjView] | None = None,
               recheck_s: float = 30.0, logs: Mapping[str, Logs] | None = None) -> list[Finding]:
    """A finding for each object the events involve or ``objects`` holds (pods, DCDs, ReplicaSets,
    PodGroups, Workloads, ...) that has a verdict, in the order first met. ``nodes`` (or the Node
    objects among ``objects``) let pods be judged against them: oversized requests, the taints
    not tolerated, a GPU device plugin that advertises nothing. ``logs``: saved container logs by
    pod name (then container name), judged by their failure signatures."""
    found: dict[Key, ObjView] = {}
    told: dict[Key, list[ObjView]] = {}
    order: list[Key] = []
    listed_nodes = []
    for obj in objects:
        if obj.get("kind") == "Node":
            listed_nodes.append(obj)
            continue
        key = _key(obj)
        found[key] = obj
        order.append(key)
    for raw in events:
        event = normalized(raw)
        involved = event["involvedObject"]
        key = (str(involved.get("kind") or ""),
               str(involved.get("namespace") or (event.get("metadata") or {}).get("namespace") or ""),
               str(involved.get("name") or ""))
        if key not in found and key not in told:
            # An object listed without a namespace (a bare pod) is the same as its events' one.
            bare = (key[0], "", key[2])
            if bare in found:
                key = bare
            else:
                order.append(key)
        told.setdefault(key, []).append(event)
    for pod_name in logs or {}:
        if not any(k[0] == "Pod" and k[2] == pod_name for k in order):
            order.append(("Pod", "", pod_name))
    node_list = nodes if nodes is not None else (listed_nodes or None)
    seen = Seen(found, told, logs or {}, node_list)
    out = []
    for key in dict.fromkeys(order):
        verdict = seen.verdict(key, recheck_s)
        if verdict is not None:
            out.append(Finding(key[0], key[2], key[1], verdict, seen.checked(key)))
    for node in node_list or []:
        verdict = node_judge.triage_node(node)
        if verdict is not None:
            out.append(Finding("Node", str((node.get("metadata") or {}).get("name")), "", verdict,
                               ["its conditions"]))
    return out


@dataclass
class Seen:
    """What ``triage_all`` was handed, by object: each object's verdict reads what it needs of the
    others (a Job its pods and their logs, a pod its claims, a Multi-Attach its volume's holders)."""

    found: dict[Key, ObjView]
    told: dict[Key, list[ObjView]]
    logs: Mapping[str, Logs]
    nodes: Sequence[ObjView] | None

    def _of_kind(self, kind: str) -> list[ObjView]:
        return [o for k, o in self.found.items() if k[0] == kind]

    def verdict(self, key: Key, recheck_s: float) -> Verdict | None:
        kind, namespace, name = key
        obj, events = self.found.get(key), self.told.get(key, [])
        if kind == "Pod":
            verdict = triage_pod(obj, name, events, self.nodes, recheck_s=recheck_s, logs=self.logs.get(name))
            if verdict is not None and obj is not None and claims.waits_on_claims(verdict):
                held = {c: (self.found.get(("PersistentVolumeClaim", namespace, c)),
                            self.told.get(("PersistentVolumeClaim", namespace, c), []))
                        for c in claims.claims_of(obj)}
                if held and all(pvc is not None for pvc, _ in held.values()):
                    verdict = claims.claim_wait(verdict, held, recheck_s)
            return claims.attach_wait(verdict, self._of_kind("Pod")) if verdict is not None else None
        if kind == "PersistentVolumeClaim":
            return claims.triage_claim(name, obj, events, recheck_s)
        if kind == "Job":
            return jobs.triage_job(name, obj, self._of_kind("Pod"), self.logs, recheck_s) or \
                triage_object(kind, name, obj, events, recheck_s)
        return triage_object(kind, name, obj, events, recheck_s)

    def checked(self, key: Key) -> list[str]:
        """What was read to judge ``key`` (the troubleshooting shape's ``evidence_checked``)."""
        kind, _, name = key
        out = [f"{len(self.told.get(key, []))} event(s) of {kind}/{name}"]
        if key in self.found:
            out.append(f"the status of {kind}/{name}")
        if kind == "Pod" and name in self.logs:
            out.append(f"the saved logs of pod {name}")
        if kind == "Job":
            mine = [str(p["metadata"]["name"]) for p in jobs.pods_of(name, self._of_kind("Pod"))]
            out += [f"the status of its pod {p}" for p in mine]
            out += [f"the saved logs of its pod {p}" for p in self.logs if p in mine or p.startswith(f"{name}-")]
        if kind == "Pod" and self.nodes is not None:
            out.append(f"{len(self.nodes)} node(s)")
        return out
