"""Pending-pod and container-failure triage, from the words of whoever refused the pod.

The rule (docs/procedure.md, step 6 readiness): a Pending pod is triaged from its scheduler events, not
from a free-GPU count, and each category has a different correct action (``ACTIONS``; the table,
the speakers understood and the ``deploy-suite triage`` command are in docs/triage.md):

* ``failed-deploy``: untolerated taint, node affinity/selector mismatch, or a request no eligible
  node could ever hold. The manifest can never schedule as written: record a failed attempt and
  stop (never wait, never call it contention).
* ``contention``: insufficient GPU/CPU/memory on otherwise-eligible nodes. Waiting is legitimate;
  so are ``provisioning`` (a node or claim being made) and ``gang`` (a pod group being assembled).
* ``dependency``: unbound PVC, quota or admission errors. Neither waiting nor a rewrite helps.
* ``platform``: the cluster is broken (webhook or operator unreachable, no GPU device plugin, a
  node down): blocked, never charged to the candidate.
* ``crash``: a crash loop that persists, an image that does not exist: a failed attempt.
* ``pull-retry``: an image pull failing on the network or the registry: the kubelet retries it.

The words of each speaker (kube-scheduler, KAI, Volcano, Kueue, cluster-autoscaler, Karpenter,
admission, the kubelet) are judged by :mod:`deploy_suite.judges.words`; this module adds what the
pod and the nodes say and combines the speakers (:func:`combine`). Container states are judged by
:func:`triage_containers` (not every first sighting is final).

The result says whether waiting can help (``can_wait``), which the waits that triage pending
pods obey (``deploy_suite.judges.conditions``). Pure logic: events and nodes come in as plain JSON dicts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deploy_suite.constants import GPU_RESOURCE, ObjView
from deploy_suite.judges import signatures, words
from deploy_suite.judges.words import ACTIONS, Words
from deploy_suite.model.scheduling import Taint, Toleration, pod_gpus, pod_request, quantity
from deploy_suite.vocab import Action, TriageCategory


@dataclass
class Verdict:
    category: TriageCategory
    diagnosis: str
    evidence: list[str] = field(default_factory=list)
    can_wait: bool = False
    next_check_s: float | None = None
    # Final whatever other speakers say (an oversized request, an invalid template, a crash loop).
    decisive: bool = False
    # False: a wait the evidence cannot confirm is legitimate (contention unverifiable without node
    # reads); waited on, but never a sign that suspends step 6's no-progress bound (judges/wait_signs.py).
    verified: bool = True
    # The patch or change that fixes it, when the rule knows one (a signature's fix), and the other
    # speakers' verdicts this one outranked (deploy-suite triage --json, docs/triage.md).
    fix: str = ""
    ruled_out: list[str] = field(default_factory=list)

    @property
    def action(self) -> Action:
        """``wait``, ``failed-attempt``, ``fix-dependency`` or ``unknown`` (``ACTIONS``)."""
        return ACTIONS[self.category]

    def as_dict(self) -> dict[str, Any]:
        return {"category": self.category, "diagnosis": self.diagnosis, "evidence": self.evidence,
                "can_wait": self.can_wait, "next_check_s": self.next_check_s}


# What each category asks of a person, for verdicts built from one speaker's words.
_HINTS = {
    TriageCategory.FAILED_DEPLOY: "it can never run as written (a failed attempt)",
    TriageCategory.CRASH: "it can never run as written (a failed attempt)",
    TriageCategory.CONTENTION: "waiting can help", TriageCategory.PROVISIONING: "waiting can help",
    TriageCategory.GANG: "waiting can help",
    TriageCategory.PULL_RETRY: "waiting can help",
    TriageCategory.DEPENDENCY: "fix the dependency, then rerun",
    TriageCategory.PLATFORM: "a platform fault, not the candidate's: fix the cluster, then rerun",
    TriageCategory.UNKNOWN: "not classified: read the evidence",
}
# Which verdict of several speakers decides: something final or to fix beats waiting, and waiting
# beats a placement refusal about existing nodes (a new node or freed capacity may still come).
_RANK = {TriageCategory.DEPENDENCY: 1, TriageCategory.PLATFORM: 2, TriageCategory.PROVISIONING: 3,
         TriageCategory.CONTENTION: 4, TriageCategory.GANG: 5, TriageCategory.PULL_RETRY: 6,
         TriageCategory.FAILED_DEPLOY: 7, TriageCategory.CRASH: 7, TriageCategory.UNKNOWN: 8}


def from_words(subject: str, reason: str, message: str, said: Words, recheck_s: float = 30.0) -> Verdict:
    """A verdict on ``subject`` (``pod x``, ``ReplicaSet/y``) from one speaker's judged words."""
    waits = ACTIONS[said.category] == Action.WAIT or said.category == TriageCategory.UNKNOWN
    line = " ".join(message.split())
    return Verdict(said.category, f"{subject}: {said.why}: {_HINTS[said.category]}; {line}",
                   [f"{subject}: {reason}: {message}"], can_wait=waits,
                   next_check_s=recheck_s if waits else None, decisive=said.decisive)


def combine(verdicts: Iterable[Verdict | None]) -> Verdict | None:
    """One verdict from several speakers': a decisive one first, then by ``_RANK`` (the first of
    equal rank); the evidence of the others follows its own."""
    found = [v for v in verdicts if v is not None]
    if not found:
        return None
    best = min(found, key=lambda v: 0 if v.decisive else _RANK[v.category])
    rest = [line for v in found if v is not best for line in v.evidence if line not in best.evidence]
    outranked = [f"{v.category}: {' '.join(v.diagnosis.split())}" for v in found if v is not best]
    return Verdict(best.category, best.diagnosis, list(dict.fromkeys([*best.evidence, *rest])), best.can_wait,
                   best.next_check_s, best.decisive, best.verified, best.fix,
                   list(dict.fromkeys([*best.ruled_out, *outranked])))


def event_time(event: ObjView) -> str:
    """When an event last happened, to the second (the fields differ by API version and age)."""
    meta = event.get("metadata") or {}
    stamps = [event.get("lastTimestamp"), event.get("eventTime"), (event.get("series") or {}).get("lastObservedTime"),
              event.get("firstTimestamp"), meta.get("creationTimestamp")]
    return max((str(s)[:19] for s in stamps if s), default="")


def heard(events: Sequence[ObjView]) -> list[tuple[ObjView, Words]]:
    """The newest judged word of each speaker (the kubelet: of each reason), oldest first. A
    speaker whose newest word clears its problem (``Scheduled``) is left out."""
    newest: dict[str, tuple[str, int, ObjView, Words]] = {}
    for order, event in enumerate(events):
        count = str(event.get("count") or (event.get("series") or {}).get("count") or 1)
        said = words.judge(str(event.get("reason") or ""), str(event.get("message") or ""),
                           int(count) if count.isdigit() else 1)
        if said is None:
            continue
        key = said.speaker + (f"/{event.get('reason')}" if said.speaker == words.KUBELET else "")
        when = event_time(event)
        if key not in newest or (when, order) >= newest[key][:2]:
            newest[key] = (when, order, event, said)
    return [(e, w) for _, _, e, w in sorted(newest.values(), key=lambda t: t[:2])
            if w.category != TriageCategory.CLEARED]


def _pod_gpus(pod: ObjView) -> int:
    return pod_gpus(pod.get("spec") or {}, GPU_RESOURCE) or 0


def _tolerations(pod: ObjView) -> list[Toleration]:
    return [Toleration(key=t.get("key", ""), operator=t.get("operator", "Equal"), value=t.get("value", ""),
                       effect=t.get("effect", "")) for t in (pod.get("spec") or {}).get("tolerations") or []]


def untolerated_taints(pod: ObjView, nodes: Iterable[ObjView]) -> dict[str, list[str]]:
    """Which NoSchedule/NoExecute taints of each node the pod does not tolerate (the scheduler of
    Kubernetes >= 1.33 no longer names them in its event)."""
    tolerations = _tolerations(pod)
    found: dict[str, list[str]] = {}
    for node in nodes:
        for raw in (node.get("spec") or {}).get("taints") or []:
            if raw.get("effect") not in {"NoSchedule", "NoExecute"}:
                continue
            taint = Taint(key=raw.get("key", ""), value=raw.get("value", ""), effect=raw.get("effect", ""))
            if not any(t.tolerates(taint) for t in tolerations):
                found.setdefault(str(taint), []).append(str((node.get("metadata") or {}).get("name")))
    return found


def _selector_fits(pod: ObjView, node: ObjView) -> bool:
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def _allocatable_gpus(node: ObjView) -> int:
    raw = str(((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE, 0))
    return int(raw) if raw.isdigit() else 0


def _gpu_labelled(node: ObjView) -> bool:
    """GPU Feature Discovery labelled the node (``nvidia.com/gpu.product`` ...): it has GPUs."""
    return any(k.startswith(f"{GPU_RESOURCE}.") for k in ((node.get("metadata") or {}).get("labels") or {}))


def _node_names(nodes: Iterable[ObjView]) -> str:
    return ", ".join(str((n.get("metadata") or {}).get("name")) for n in nodes)


def _short_of_gpus(pod: ObjView, name: str, nodes: Sequence[ObjView], evidence: list[str]) -> Verdict | None:
    """"Insufficient nvidia.com/gpu" read against the nodes: no node advertises a GPU (the device
    plugin is absent: platform), the eligible GPU nodes advertise none (the plugin is broken there:
    platform), or no eligible node could ever hold the request (a failed attempt)."""
    gpus = _pod_gpus(pod)
    if not gpus or not nodes:
        return None
    if all(_allocatable_gpus(n) == 0 for n in nodes):
        labelled = _node_names(n for n in nodes if _gpu_labelled(n))
        return Verdict(TriageCategory.PLATFORM,
                       f"pod {name} asks {gpus} GPUs but no node advertises {GPU_RESOURCE} (allocatable 0 "
                       f"on all {len(nodes)} nodes{'; GPU nodes by their labels: ' + labelled if labelled else ''}"
                       "): the GPU device plugin is absent or not running, a platform fault", evidence)
    eligible = [n for n in nodes if _selector_fits(pod, n) and not untolerated_taints(pod, [n])]
    biggest = max((_allocatable_gpus(n) for n in eligible), default=0)
    if gpus <= biggest:
        return None
    dead = [n for n in eligible if _gpu_labelled(n) and _allocatable_gpus(n) == 0]
    if dead:
        return Verdict(TriageCategory.PLATFORM,
                       f"pod {name} asks {gpus} GPUs; the eligible GPU nodes {_node_names(dead)} advertise "
                       f"no allocatable {GPU_RESOURCE}: their device plugin is not running, a platform fault", evidence)
    return Verdict(TriageCategory.FAILED_DEPLOY, f"pod {name} asks {gpus} GPUs but no eligible node has more than "
                   f"{biggest} allocatable: it can never schedule as written", evidence, decisive=True)


def _beyond_every_node(pod: ObjView, name: str, resources: Iterable[str], nodes: Sequence[ObjView],
                       evidence: list[str]) -> Verdict | None:
    """"Insufficient cpu/memory/..." where the request is more than any eligible node's allocatable:
    no freed capacity can ever make room (a failed attempt, not contention)."""
    eligible = [n for n in nodes if _selector_fits(pod, n) and not untolerated_taints(pod, [n])]
    for resource in sorted(set(resources) - {GPU_RESOURCE}):
        asked = pod_request(pod.get("spec") or {}, resource)
        biggest = max((quantity(((n.get("status") or {}).get("allocatable") or {}).get(resource, 0)) or 0.0
                       for n in eligible), default=0.0)
        if eligible and asked > biggest:
            return Verdict(TriageCategory.FAILED_DEPLOY,
                           f"pod {name} requests {asked:g} {resource} but no eligible node has more "
                           f"than {biggest:g} allocatable: it can never schedule as written", evidence, decisive=True)
    return None


def _scheduler_verdict(pod: ObjView, name: str, reason: str, message: str, said: Words, nodes: Sequence[ObjView] | None,
                       recheck_s: float) -> Verdict:
    """A scheduler's words on ``pod``, with what the pod and the nodes add."""
    if said.speaker not in {words.SCHEDULER, words.GANG_SCHEDULER}:
        return from_words(f"pod {name}", reason, message, said, recheck_s)
    head = words.scheduler_head(message)
    evidence = [f"pod {name}: {reason}: {message}"]
    if said.category == TriageCategory.DEPENDENCY:
        return Verdict(TriageCategory.DEPENDENCY,
                       f"pod {name} waits on a dependency (volume claim, quota or admission): {head}",
                       evidence)
    if said.category == TriageCategory.CONTENTION:
        return _contention(pod, name, head, said, nodes, evidence, recheck_s)
    if said.category == TriageCategory.FAILED_DEPLOY:
        detail = ""
        if nodes is not None and "taint" in said.why:
            named = untolerated_taints(pod, nodes)
            if named:
                detail = "; untolerated: " + "; ".join(f"{t} on {', '.join(ns)}" for t, ns in sorted(named.items()))
                evidence.append("untolerated taints (from node specs): " + detail.removeprefix("; untolerated: "))
        return Verdict(TriageCategory.FAILED_DEPLOY,
                       f"pod {name} can never schedule as written ({said.why}){detail}", evidence,
                       decisive=said.decisive)
    if said.category == TriageCategory.UNKNOWN:
        return Verdict(TriageCategory.UNKNOWN,
                       f"pod {name} is unschedulable for a reason not classified: {head}", evidence,
                       can_wait=True, next_check_s=recheck_s)
    return from_words(f"pod {name}", reason, message, said, recheck_s)


def _contention(pod: ObjView, name: str, head: str, said: Words, nodes: Sequence[ObjView] | None, evidence: list[str],
                recheck_s: float) -> Verdict:
    """The scheduler says nodes are short: contention, unless the nodes show the pod never fits."""
    if nodes is not None:
        # "Insufficient" also covers a request no node could ever hold: 9 GPUs on 8-GPU nodes.
        judged = (_short_of_gpus(pod, name, nodes, evidence) if GPU_RESOURCE in said.capacity else None) or \
            _beyond_every_node(pod, name, said.capacity, nodes, evidence)
        if judged is not None:
            return judged
    elif any(n in head.lower() for n in words.NEVER_FITS):
        return _unverified_contention(name, head, said, evidence, recheck_s)
    return Verdict(TriageCategory.CONTENTION,
                   f"pod {name} is waiting for capacity ({', '.join(sorted(said.capacity))}) on "
                   f"otherwise-eligible nodes; next check in {recheck_s:.0f}s", evidence, can_wait=True,
                   next_check_s=recheck_s)


def _unverified_contention(name: str, head: str, said: Words, evidence: list[str], recheck_s: float) -> Verdict:
    """Some nodes short, the others excluded for good (a taint, a selector), and no node reads:
    nothing tells whether the short ones could ever hold the pod, so the wait is unverified (step 6's
    no-progress bound applies, not the 3-hour one) and the line names the fixes."""
    return Verdict(TriageCategory.CONTENTION,
                   f"pod {name}: the scheduler reports nodes short of {', '.join(sorted(said.capacity))} and "
                   f"others excluded for good ({head}); the nodes are unreadable for this identity, so "
                   "contention cannot be told from a manifest that never fits: waited on only within the "
                   "no-progress bound; grant read access to nodes (docs/security.md) or fix the scheduling "
                   "with --compat-patch and rerun the same iteration", evidence, can_wait=True,
                   next_check_s=recheck_s, verified=False)


_SCHEDULING = {words.SCHEDULER, words.GANG_SCHEDULER, words.AUTOSCALER, words.PROVISIONER, words.QUEUE}


def triage_pending(pod: ObjView, events: Sequence[ObjView], nodes: Sequence[ObjView] | None = None,
                   contention_recheck_s: float = 30.0) -> Verdict | None:
    """Classify a Pending pod from the words of its schedulers (the newest word of each speaker:
    scheduler, gang scheduler, autoscaler, provisioner, queue), combined (:func:`combine`).

    Without a scheduler event the pod's ``PodScheduled=False`` condition speaks for the scheduler
    (``Unschedulable`` with its message, ``SchedulingGated``). Returns None when nobody gave a
    verdict yet (the pod is simply new).
    """
    name = str((pod.get("metadata") or {}).get("name"))
    said = [(e, w) for e, w in heard(events) if w.speaker in _SCHEDULING]
    if not any(w.speaker == words.SCHEDULER for _, w in said):
        cond = next((c for c in (pod.get("status") or {}).get("conditions") or []
                     if c.get("type") == "PodScheduled" and c.get("status") == "False"), None)
        judged = words.judge(str(cond.get("reason") or "Unschedulable"), str(cond.get("message") or "")) \
            if cond is not None and (cond.get("message") or cond.get("reason") == "SchedulingGated") else None
        if cond is not None and judged is not None and judged.category != TriageCategory.CLEARED:
            said.append(({"reason": "FailedScheduling" if judged.speaker == words.SCHEDULER else cond.get("reason"),
                          "message": cond.get("message") or cond.get("reason")}, judged))
    return combine(_scheduler_verdict(pod, name, str(e.get("reason")), str(e.get("message") or ""), w, nodes,
                                      contention_recheck_s) for e, w in said)


# A crash loop is final from the second restart: a container that restarted once may recover
# (docs/procedure.md, "Step 6: slow starts, failures, teardown"; Dynamo's own deploy tests fail fast from the second).
CRASH_LOOP_RESTARTS = 2
# Image pull causes, from the kubelet's waiting message or its "Failed" pull events (containerd's
# gRPC code tells them apart: docs/procedure.md, step 6).
_PULL_AUTH = re.compile(r"\b(401|403)\b|unauthori[sz]ed|denied|authentication required|authorization required|"
                        r"insufficient_scope|authorization failed|no basic auth credentials|failed to authorize",
                        re.IGNORECASE)
_PULL_MISSING = re.compile(r"manifest unknown|code = NotFound|: not found|not found:|repository does not exist",
                           re.IGNORECASE)
_NODE_DISK_FULL = re.compile(r"no space left on device", re.IGNORECASE)
IMAGE_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff")
# Waiting reasons that are final at first sight: the pod spec itself is wrong.
_FINAL_REASONS = ("InvalidImageName", "CreateContainerError", "RunContainerError")


def last_terminated(cs: ObjView) -> str:
    """The container's last termination as a person reads it: reason and exit code (``OOMKilled``, 137)."""
    last = (cs.get("lastState") or {}).get("terminated") or (cs.get("state") or {}).get("terminated") or {}
    if not last:
        return ""
    return f"last terminated: {last.get('reason') or 'Error'} (exit code {last.get('exitCode')})"


def _pull_verdict(container: str, reason: str, message: str, causes: Sequence[str]) -> Verdict:
    """An image pull that failed, judged from the kubelet's message and the pull events' causes."""
    text = " ".join([message, *causes])
    evidence = [f"{container} waiting: {reason}: {message}".rstrip(": "), *[f"{container} event: {c}" for c in causes]]
    if _NODE_DISK_FULL.search(text):
        # The runtime could not write the layers: the node's image filesystem is full, whatever retries.
        return Verdict(TriageCategory.PLATFORM,
                       f"{container}: {reason}: the node's disk is full (no space left on device while unpacking "
                       f"the image): {_HINTS[TriageCategory.PLATFORM]}; {message}", evidence)
    if _PULL_AUTH.search(text):
        return Verdict(TriageCategory.DEPENDENCY,
                       f"{container}: {reason}: the registry refused the pull (authorization): fix the "
                       f"pull secret (imagePullSecrets) or the registry access; {message}", evidence)
    if _PULL_MISSING.search(text):
        return Verdict(TriageCategory.CRASH,
                       f"{container}: {reason}: the image does not exist (manifest unknown / not found): "
                       f"{message}", evidence, decisive=True)
    return Verdict(TriageCategory.PULL_RETRY,
                   f"{container}: {reason}, cause not final (registry or network): the kubelet retries "
                   f"the pull; {message}", evidence, can_wait=True)


def from_signature(container: str, cs: ObjView, lines: Sequence[str], restarts: int) -> Verdict | None:
    """A terminated container judged by its own words (:mod:`deploy_suite.judges.signatures`): a
    decisive signature at the first termination, a transient one once the crash loop persists."""
    ended = signatures.termination(cs)
    if not ended or (ended.get("exitCode") == 0 and ended.get("reason") != signatures.OOM_REASON):
        return None
    found = signatures.judge(cs, lines)
    if found is None or (not found.signature.decisive and restarts < CRASH_LOOP_RESTARTS):
        return None
    sig = found.signature
    named = sig.names + (f": {found.detail}" if found.detail else "")
    ended_as = f" ({last_terminated(cs)}, restarts {restarts})" if cs.get("name") else ""
    return Verdict(sig.category, f"{container}: {sig.id}{ended_as}, naming {named}: {sig.fix} "
                   f"({_HINTS[sig.category]}); its words: {found.line}",
                   [f"{container} said: {found.line}", f"signature {sig.id}: {sig.source}"],
                   decisive=True, fix=sig.fix)


def triage_containers(pod: ObjView, pull_causes: Sequence[str] = (),
                      logs: Mapping[str, Sequence[str]] | None = None) -> Verdict | None:
    """A container's waiting state, judged by whether waiting can help.

    * ``CrashLoopBackOff`` from ``CRASH_LOOP_RESTARTS`` restarts: a failed attempt (``crash``); the
      first restart may recover (None);
    * ``ErrImagePull``/``ImagePullBackOff``: authorization refused is a ``dependency`` (the pull
      secret), an image that does not exist is final (``crash``), anything else (network,
      registry unavailable) is retried by the kubelet (``pull-retry``, can wait); ``pull_causes``
      are the pod's pull-failure event messages, for a back-off whose message omits the cause;
    * ``CreateContainerConfigError`` (a missing secret or key): a ``dependency``;
    * ``InvalidImageName``, ``CreateContainerError``, ``RunContainerError``: final (``crash``);
    * any of these whose message or last termination is the node's GPU runtime failing
      (``nvidia-container-cli``, an OCI hook): ``platform``, the node's fault, not the candidate's.

    The last termination (reason and exit code, e.g. ``OOMKilled`` 137) is named in the diagnosis.
    ``logs`` (container name to its last log lines) and the termination message are read first:
    a failure signature decides at the first termination (:func:`from_signature`).
    """
    name = str((pod.get("metadata") or {}).get("name"))
    status = pod.get("status") or {}
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason", ""))
        message = str(waiting.get("message") or "")
        restarts = int(cs.get("restartCount") or 0)
        container = f"pod {name} container {cs.get('name')}"
        ended = last_terminated(cs)
        detail = f" (restarts {restarts}{', ' + ended if ended else ''})"
        evidence = [f"{container} waiting: {reason}" + (f" ({ended})" if ended else "")]
        runtime = f"{message} {((cs.get('lastState') or {}).get('terminated') or {}).get('message') or ''}"
        if reason in {"CrashLoopBackOff", *_FINAL_REASONS} and words.is_platform(runtime):
            return Verdict(TriageCategory.PLATFORM,
                           f"{container}: {reason}: the node's GPU container runtime fails before the "
                           f"process starts (a platform fault, not the candidate's): {' '.join(runtime.split())}",
                           [*evidence, f"{container}: {' '.join(runtime.split())}"])
        said = from_signature(container, cs, (logs or {}).get(str(cs.get("name")), ()), restarts)
        if said is not None:
            return said
        if reason == "CrashLoopBackOff":
            if restarts < CRASH_LOOP_RESTARTS:
                continue
            cause = signatures.exit_cause(cs)
            return Verdict(TriageCategory.CRASH,
                           f"{container}: CrashLoopBackOff{': ' + message if message else ''}{detail}"
                           f"{'; ' + cause if cause else ''}", evidence, decisive=True)
        if reason in IMAGE_PULL_REASONS:
            return _pull_verdict(container, reason, message, pull_causes)
        if reason == "CreateContainerConfigError":
            return Verdict(TriageCategory.DEPENDENCY,
                           f"{container}: CreateContainerConfigError: {message or 'container config'}: "
                           "fix the referenced Secret/ConfigMap (a dependency, not the candidate's fault)", evidence)
        if reason in _FINAL_REASONS:
            return Verdict(TriageCategory.CRASH,
                           f"{container}: {reason}{': ' + message if message else ''}{detail}", evidence,
                           decisive=True)
    return None


def triage_pull_events(subject: str, messages: Sequence[str]) -> Verdict | None:
    """Image pulls judged from the kubelet's events alone (no pod status at hand)."""
    if not messages:
        return None
    return _pull_verdict(subject, "ErrImagePull", messages[-1], list(messages[:-1]))


# The node's own taints for a node the kubelet no longer reports for (node lifecycle controller).
_NODE_DOWN_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")


def node_lost(pod: ObjView, node: ObjView | None) -> Verdict | None:
    """The node a bound, not-ready pod runs on, when that node is down: a ``platform`` verdict.

    A node whose Ready condition is not ``True`` (``Unknown`` once the kubelet stops posting status:
    the node lifecycle controller's ``NodeStatusUnknown``, "Kubelet stopped posting node status";
    ``False`` when the kubelet itself says it is not ready) cannot run the pod: the node's fault,
    never the candidate's (docs/triage.md). None when the node is Ready, unknown (``node`` None) or
    the pod is not bound.
    """
    node_name = str((pod.get("spec") or {}).get("nodeName") or "")
    if not node_name or node is None:  # a deleted node's pods are deleted by the pod GC: their own words say so
        return None
    pod_name = str((pod.get("metadata") or {}).get("name"))
    conds = {str(c.get("type")): c for c in (node.get("status") or {}).get("conditions") or []}
    ready = conds.get("Ready") or {}
    if ready.get("status") == "True":
        return None
    taints = [str(t.get("key")) for t in (node.get("spec") or {}).get("taints") or []
              if t.get("key") in _NODE_DOWN_TAINTS]
    said = f"{ready.get('reason') or 'no reason'}: {ready.get('message') or 'no message'}" if ready else \
        "no Ready condition"
    evidence = [f"node/{node_name} Ready={ready.get('status', 'missing')} since {ready.get('lastTransitionTime', '?')} "
                f"(last heartbeat {ready.get('lastHeartbeatTime', '?')}): {said}"]
    if taints:
        evidence.append(f"node/{node_name} taints: {', '.join(taints)}")
    return Verdict(TriageCategory.PLATFORM, f"node {node_name} of pod {pod_name} is NotReady ({said}): "
                   f"{_HINTS[TriageCategory.PLATFORM]}", evidence)
