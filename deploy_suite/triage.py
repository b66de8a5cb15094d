"""Pending-pod and container-failure triage, from the scheduler's own words.

The rule (README.md, step 6 readiness): a Pending pod is triaged from its scheduler events, not
from a free-GPU count, and each category has a different correct action:

* ``failed-deploy``: untolerated taint, node affinity/selector mismatch, or a request no eligible
  node could ever hold. The manifest can never schedule as written: record a failed attempt and
  stop (never wait, never call it contention).
* ``contention``: insufficient GPU/CPU/memory on otherwise-eligible nodes. Waiting is legitimate.
* ``dependency``: unbound PVC, quota or admission errors. Neither waiting nor a rewrite helps.
* ``crash``: a crash loop that persists, an image that does not exist: a failed attempt.
* ``pull-retry``: an image pull failing on the network or the registry: the kubelet retries it.

Container states are judged by :func:`triage_containers` (not every first sighting is final).

The result says whether waiting can help (``can_wait``), which the waits that triage pending
pods obey (``deploy_suite.conditions``). Pure logic: events and nodes come in as plain JSON dicts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deploy_suite.constants import GPU_RESOURCE
from deploy_suite.scheduling import Taint, Toleration, pod_gpus

Obj = Mapping[str, Any]

FAILED_DEPLOY = "failed-deploy"
CONTENTION = "contention"
DEPENDENCY = "dependency"
CRASH = "crash"
UNKNOWN = "unknown"
PULL_RETRY = "pull-retry"

# "<n> node(s) <reason>" fragments of a FailedScheduling message, by category.
_NEVER = (
    "untolerated taint", "that the pod didn't tolerate", "didn't match pod's node affinity/selector",
    "didn't match node selector", "didn't match pod anti-affinity", "didn't match pod affinity",
    "didn't satisfy existing pods anti-affinity", "were unschedulable", "had volume node affinity conflict",
)
# The resource name, without the sentence's full stop ("2 Insufficient nvidia.com/gpu. no new ...").
_CAPACITY = re.compile(r"Insufficient ([\w./-]*[\w-])")
_DEPENDENCY = (
    "unbound immediate persistentvolumeclaims", "persistentvolumeclaim", "didn't find available persistent volumes",
    "exceeded quota", "admission webhook", "is forbidden", "forbidden:",
)
_FRAGMENT = re.compile(r"(\d+) (node\(s\)|Insufficient) ?([^,.]*)")


@dataclass
class Verdict:
    category: str
    diagnosis: str
    evidence: list[str] = field(default_factory=list)
    can_wait: bool = False
    next_check_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"category": self.category, "diagnosis": self.diagnosis, "evidence": self.evidence,
                "can_wait": self.can_wait, "next_check_s": self.next_check_s}


def _pod_gpus(pod: Obj) -> int:
    return pod_gpus(pod.get("spec") or {}, GPU_RESOURCE) or 0


def _tolerations(pod: Obj) -> list[Toleration]:
    return [Toleration(key=t.get("key", ""), operator=t.get("operator", "Equal"), value=t.get("value", ""),
                       effect=t.get("effect", "")) for t in (pod.get("spec") or {}).get("tolerations") or []]


def untolerated_taints(pod: Obj, nodes: Iterable[Obj]) -> dict[str, list[str]]:
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


def _selector_fits(pod: Obj, node: Obj) -> bool:
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def triage_pending(pod: Obj, events: Sequence[Obj], nodes: Sequence[Obj] | None = None,
                   contention_recheck_s: float = 30.0) -> Verdict | None:
    """Classify a Pending pod from its FailedScheduling events (the newest one decides).

    Returns None when there is no scheduler verdict yet (the pod is simply new).
    """
    messages = [str(e.get("message", "")) for e in events if e.get("reason") == "FailedScheduling"]
    name = str((pod.get("metadata") or {}).get("name"))
    if not messages:
        cond = next((c for c in (pod.get("status") or {}).get("conditions") or []
                     if c.get("type") == "PodScheduled" and c.get("status") == "False"), None)
        if cond is None or not cond.get("message"):
            return None
        messages = [str(cond["message"])]
    message = messages[-1]
    head = message.split("preemption:")[0]
    low = head.lower()
    evidence = [f"pod {name}: FailedScheduling: {message}"]
    if any(d in low for d in _DEPENDENCY):
        return Verdict(DEPENDENCY, f"pod {name} waits on a dependency (volume claim, quota or admission): "
                       f"{head.strip()}", evidence)
    capacity = _CAPACITY.findall(head)
    never = [frag for frag in _NEVER if frag in low]
    gpus = _pod_gpus(pod)
    if nodes is not None and capacity:
        # "Insufficient" also covers a request no node could ever hold: 9 GPUs on 8-GPU nodes.
        eligible = [n for n in nodes if _selector_fits(pod, n) and not untolerated_taints(pod, [n])]
        biggest = max((int(str((n.get("status") or {}).get("allocatable", {}).get(GPU_RESOURCE, 0)))
                       for n in eligible), default=0)
        if gpus > biggest:
            return Verdict(FAILED_DEPLOY, f"pod {name} asks {gpus} GPUs but no eligible node has more than "
                           f"{biggest} allocatable: it can never schedule as written", evidence)
    if capacity:
        what = ", ".join(sorted(set(capacity)))
        return Verdict(CONTENTION, f"pod {name} is waiting for capacity ({what}) on otherwise-eligible nodes; "
                       f"next check in {contention_recheck_s:.0f}s", evidence, can_wait=True,
                       next_check_s=contention_recheck_s)
    if never:
        detail = ""
        if nodes is not None and any("taint" in f for f in never):
            named = untolerated_taints(pod, nodes)
            if named:
                detail = "; untolerated: " + "; ".join(f"{t} on {', '.join(ns)}" for t, ns in sorted(named.items()))
                evidence.append("untolerated taints (from node specs): " + detail.removeprefix("; untolerated: "))
        return Verdict(FAILED_DEPLOY, f"pod {name} can never schedule as written ({', '.join(never)}){detail}",
                       evidence)
    return Verdict(UNKNOWN, f"pod {name} is unschedulable for a reason not classified: {head.strip()}", evidence,
                   can_wait=True, next_check_s=contention_recheck_s)


# A crash loop is final from the second restart: a container that restarted once may recover
# (the rule of docs of step 6 in README.md; Dynamo's own deploy tests fail fast from the second).
CRASH_LOOP_RESTARTS = 2
# Image pull causes, from the kubelet's waiting message or its "Failed" pull events (containerd's
# gRPC code tells them apart: see README.md, step 6).
_PULL_AUTH = re.compile(r"\b(401|403)\b|unauthori[sz]ed|denied|authentication required|authorization required",
                        re.IGNORECASE)
_PULL_MISSING = re.compile(r"manifest unknown|code = NotFound|: not found|not found:|repository does not exist",
                           re.IGNORECASE)
IMAGE_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff")
# Waiting reasons that are final at first sight: the pod spec itself is wrong.
_FINAL_REASONS = ("InvalidImageName", "CreateContainerError", "RunContainerError")


def last_terminated(cs: Obj) -> str:
    """The container's last termination as a person reads it: reason and exit code (``OOMKilled``, 137)."""
    last = (cs.get("lastState") or {}).get("terminated") or (cs.get("state") or {}).get("terminated") or {}
    if not last:
        return ""
    return f"last terminated: {last.get('reason') or 'Error'} (exit code {last.get('exitCode')})"


def _pull_verdict(name: str, cs: Obj, reason: str, message: str, causes: Sequence[str]) -> Verdict:
    container = f"pod {name} container {cs.get('name')}"
    text = " ".join([message, *causes])
    evidence = [f"{container} waiting: {reason}: {message}".rstrip(": "), *[f"{container} event: {c}" for c in causes]]
    if _PULL_AUTH.search(text):
        return Verdict(DEPENDENCY, f"{container}: {reason}: the registry refused the pull (authorization): fix the "
                       f"pull secret (imagePullSecrets) or the registry access; {message}", evidence)
    if _PULL_MISSING.search(text):
        return Verdict(CRASH, f"{container}: {reason}: the image does not exist (manifest unknown / not found): "
                       f"{message}", evidence)
    return Verdict(PULL_RETRY, f"{container}: {reason}, cause not final (registry or network): the kubelet retries "
                   f"the pull; {message}", evidence, can_wait=True)


def triage_containers(pod: Obj, pull_causes: Sequence[str] = ()) -> Verdict | None:
    """A container's waiting state, judged by whether waiting can help.

    * ``CrashLoopBackOff`` from ``CRASH_LOOP_RESTARTS`` restarts: a failed attempt (``crash``); the
      first restart may recover (None);
    * ``ErrImagePull``/``ImagePullBackOff``: authorization refused is a ``dependency`` (the pull
      secret), an image that does not exist is final (``crash``), anything else (network,
      registry unavailable) is retried by the kubelet (``pull-retry``, can wait); ``pull_causes``
      are the pod's pull-failure event messages, for a back-off whose message omits the cause;
    * ``CreateContainerConfigError`` (a missing secret or key): a ``dependency``;
    * ``InvalidImageName``, ``CreateContainerError``, ``RunContainerError``: final (``crash``).

    The last termination (reason and exit code, e.g. ``OOMKilled`` 137) is named in the diagnosis.
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
        if reason == "CrashLoopBackOff":
            if restarts < CRASH_LOOP_RESTARTS:
                continue
            return Verdict(CRASH, f"{container}: CrashLoopBackOff{': ' + message if message else ''}{detail}", evidence)
        if reason in IMAGE_PULL_REASONS:
            return _pull_verdict(name, cs, reason, message, pull_causes)
        if reason == "CreateContainerConfigError":
            return Verdict(DEPENDENCY, f"{container}: CreateContainerConfigError: {message or 'container config'}: "
                           "fix the referenced Secret/ConfigMap (a dependency, not the candidate's fault)", evidence)
        if reason in _FINAL_REASONS:
            return Verdict(CRASH, f"{container}: {reason}{': ' + message if message else ''}{detail}", evidence)
    return None
