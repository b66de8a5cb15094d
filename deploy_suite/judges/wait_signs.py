"""Signs that step 6 waits legitimately while no milestone moves (docs/procedure.md, step 6).

The progress milestones (created, scheduled, pulled, started, ready) stop while pods wait for GPUs
held by others, a large image pulls or a model loads; none of these is "no progress". Each pod
that is not ready either shows a sign of such a wait or is stuck; the no-progress bound applies
to what is stuck only, and a loading container has its own bound (``timeouts.readiness_loading_s``).

* ``held``: the scheduler's newest verdict on the unschedulable pod is one the procedure waits on
  (contention, a node being provisioned, a gang being assembled: a hold decision the wait
  re-checks at its next check);
* ``pulling``: the kubelet's ``Pulling`` event for a container still waiting to be created, and no
  pull failure for it (the kubelet's image manager: ``Pulling`` when a pull starts, ``Pulled`` /
  ``Failed`` / ``BackOff`` / ``InspectFailed`` / ``ErrImageNeverPull`` after it; its event reasons in
  kubernetes ``pkg/kubelet/events/event.go``, https://github.com/kubernetes/kubernetes);
* ``loading``: a container running without restarts and not ready yet (a model loading; its
  startup or readiness probe has not passed), in a pod none of whose containers restarted.

Pure: the pods, the scheduler verdicts the wait holds, the events it last read and the time come in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from deploy_suite.clock import iso, parse_iso
from deploy_suite.constants import Obj
from deploy_suite.errors import StepFailure
from deploy_suite.judges.conditions import pod_ready, unschedulable
from deploy_suite.judges.triage import Verdict, event_time
from deploy_suite.vocab import FailureCategory, TriageCategory, WaitingSign

# The scheduler verdicts that are hold decisions (judges/triage.py: waiting can help).
HOLDS = frozenset({TriageCategory.CONTENTION, TriageCategory.PROVISIONING, TriageCategory.GANG})
PULL_STARTED = "Pulling"
PULL_DONE = "Pulled"
PULL_FAILED = frozenset({"Failed", "BackOff", "InspectFailed", "ErrImageNeverPull"})
# A container waiting on none of these waits on an error (judges/triage.py judges which).
HEALTHY_WAITING = frozenset({"", "ContainerCreating", "PodInitializing"})
LINE_CHARS = 160  # the loading container's last log line, as the live line shows it
_FIELD_PATH = re.compile(r"spec\.(?:initContainers|containers)\{([^}]*)\}")


@dataclass(frozen=True)
class Sign:
    """One pod's sign of a legitimate wait: which, in which container, since when, and its words."""

    pod: str
    kind: WaitingSign
    container: str | None = None
    since: datetime | None = None
    detail: str = ""

    def seconds(self, now: datetime) -> float:
        return max(0.0, (now - self.since).total_seconds()) if self.since is not None else 0.0

    def as_dict(self, now: datetime) -> dict[str, object]:
        return {"pod": self.pod, "sign": self.kind, "container": self.container,
                "seconds": round(self.seconds(now), 3), "detail": self.detail}


@dataclass(frozen=True)
class Waiting:
    """What is waiting with a sign, and what is stuck (one line each): the no-progress bound
    counts only while ``stuck`` is not empty."""

    signs: tuple[Sign, ...] = ()
    stuck: tuple[str, ...] = ()

    def of(self, kind: WaitingSign) -> list[Sign]:
        return [s for s in self.signs if s.kind == kind]


def _statuses(pod: Obj) -> list[Obj]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def _waiting_reason(cs: Obj) -> str | None:
    """The container's waiting reason ("" without one); None when it is not waiting."""
    state = cs.get("state") or {}
    if "running" in state or "terminated" in state:
        return None
    return str((state.get("waiting") or {}).get("reason") or "")


def _not_created(pod: Obj) -> list[Obj]:
    """Containers still waiting to be created, healthily (no image yet): each ``{name, image}``.
    A pod the kubelet has not reported on yet has all of its containers so."""
    spec = pod.get("spec") or {}
    declared = {str(c.get("name")): str(c.get("image") or "")
                for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]}
    statuses = _statuses(pod)
    if not statuses:
        return [{"name": n, "image": i} for n, i in declared.items()]
    return [{"name": str(cs.get("name")), "image": str(cs.get("image") or declared.get(str(cs.get("name")), ""))}
            for cs in statuses if _waiting_reason(cs) in HEALTHY_WAITING and not cs.get("imageID")]


def needs_events(pod: Obj) -> bool:
    """Whether only the pod's events can tell a pull under way: it is scheduled, alive, and a
    container waits to be created."""
    meta = pod.get("metadata") or {}
    return bool((pod.get("spec") or {}).get("nodeName")) and not meta.get("deletionTimestamp") \
        and not pod_ready(pod) and bool(_not_created(pod))


def _pull_events(pod: Obj, events: Sequence[Obj]) -> dict[str, list[Obj]]:
    """The kubelet's image events of ``pod`` (this pod, not an earlier one of the same name) by container."""
    uid = (pod.get("metadata") or {}).get("uid")
    out: dict[str, list[Obj]] = {}
    for event in events:
        involved = event.get("involvedObject") or event.get("regarding") or {}
        if uid and involved.get("uid") and involved.get("uid") != uid:
            continue
        found = _FIELD_PATH.fullmatch(str(involved.get("fieldPath") or ""))
        reason = str(event.get("reason") or "")
        if found and reason in {PULL_STARTED, PULL_DONE, *PULL_FAILED}:
            out.setdefault(found.group(1), []).append(event)
    return out


def pulling(pod: Obj, events: Sequence[Obj]) -> Sign | None:
    """An image pull under way: a container waiting to be created whose image events say
    ``Pulling``, none says a failure, and no ``Pulled`` came at or after the last ``Pulling``."""
    by_container = _pull_events(pod, events)
    for container in _not_created(pod):
        said = by_container.get(container["name"], [])
        started = [event_time(e) for e in said if e.get("reason") == PULL_STARTED]
        if not started or any(e.get("reason") in PULL_FAILED for e in said):
            continue
        if any(e.get("reason") == PULL_DONE and event_time(e) >= max(started) for e in said):
            continue
        firsts = [str(e.get("firstTimestamp") or event_time(e)) for e in said if e.get("reason") == PULL_STARTED]
        return Sign(pod["metadata"]["name"], WaitingSign.PULLING, container["name"], parse_iso(min(firsts)),
                    container["image"])
    return None


def loading(pod: Obj, fallback: datetime) -> Sign | None:
    """The container that loads longest: running, not ready, in a pod none of whose containers
    restarted; since its ``startedAt`` (``fallback`` when the kubelet did not say)."""
    found: list[Sign] = []
    for cs in _statuses(pod):
        running = (cs.get("state") or {}).get("running")
        if running is not None and not cs.get("ready"):
            since = parse_iso(running.get("startedAt")) or fallback
            found.append(Sign(pod["metadata"]["name"], WaitingSign.LOADING, str(cs.get("name")), since))
    return min(found, key=lambda s: s.since or fallback) if found else None


def _container_trouble(pod: Obj) -> str | None:
    """A container that restarted or waits on an error: the pod's wait shows no sign then."""
    name = pod["metadata"]["name"]
    for cs in _statuses(pod):
        restarts = int(cs.get("restartCount") or 0)
        if restarts:
            return f"pod {name} container {cs.get('name')} restarted {restarts} time(s)"
        reason = _waiting_reason(cs)
        if reason not in (None, *HEALTHY_WAITING):
            return f"pod {name} container {cs.get('name')} waiting: {reason}"
    return None


def _unplaced(pod: Obj, hold: Verdict | None) -> Sign | str | None:
    """A pod not on a node yet: held (a hold decision), or stuck; None once it is on a node."""
    name = pod["metadata"]["name"]
    if unschedulable(pod) is not None:
        if hold is not None and hold.can_wait and hold.category in HOLDS and hold.verified:
            return Sign(name, WaitingSign.HELD, detail=hold.diagnosis)
        if hold is not None and not hold.verified:
            return f"pod {name} unschedulable, no hold decision: {hold.diagnosis}"
        return f"pod {name} unschedulable, no hold decision ({hold.category if hold else 'not triaged yet'})"
    if not (pod.get("spec") or {}).get("nodeName"):
        return f"pod {name} not scheduled yet"
    return None


def pod_wait(pod: Obj, hold: Verdict | None, events: Sequence[Obj], fallback: datetime) -> Sign | str | None:
    """One pod: None when ready or on its way out, its sign, or why it is stuck (one line)."""
    if pod_ready(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    name = pod["metadata"]["name"]
    phase = (pod.get("status") or {}).get("phase")
    said = _unplaced(pod, hold) or (f"pod {name} phase {phase}" if phase in {"Succeeded", "Failed"} else None) \
        or _container_trouble(pod) or loading(pod, fallback) or pulling(pod, events)
    if said is not None:
        return said
    waiting = _not_created(pod)
    if waiting:
        return f"pod {name} container {waiting[0]['name']} not created, no image pull under way"
    return f"pod {name} {phase or 'Pending'}, not ready"


def judge(pods: Sequence[Obj], expected: int, holds: Mapping[str, Verdict], events: Mapping[str, Sequence[Obj]], *,
          dgd_pending: str | None, fallback: datetime, gate: Sign | None = None) -> Waiting:
    """The DGD's pods: their signs, and what is stuck. ``holds`` and ``events`` are by pod name (as
    the wait last judged and read them); ``dgd_pending`` is the DGD's state line while it is not
    done, stuck itself once every pod is ready; ``fallback`` dates a container whose start is unsaid;
    ``gate``: the operator holds replicas at zero for a checkpoint, so pods not created are its sign."""
    signs: list[Sign] = []
    stuck: list[str] = []
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    for pod in sorted(live, key=lambda p: str(p["metadata"]["name"])):
        name = str(pod["metadata"]["name"])
        said = pod_wait(pod, holds.get(name), events.get(name, ()), fallback)
        if isinstance(said, Sign):
            signs.append(said)
        elif said is not None:
            stuck.append(said)
    if len(live) < expected and gate is not None:
        signs.append(gate)
    elif len(live) < expected:
        stuck.append(f"{expected - len(live)} of {expected} pods not created")
    if not signs and not stuck and dgd_pending:
        stuck.append(dgd_pending)
    return Waiting(tuple(signs), tuple(stuck))


def overdue(waiting: Waiting, now: datetime, bound_s: float) -> Sign | None:
    """The loading container that has outlasted ``bound_s``, if any (the longest)."""
    late = [s for s in waiting.of(WaitingSign.LOADING) if s.seconds(now) >= bound_s]
    return max(late, key=lambda s: s.seconds(now)) if late else None


def minutes(seconds: float) -> str:
    return "<1 min" if seconds < 60 else f"{int(seconds // 60)} min"


def clip(line: str) -> str:
    """A log line as the live line shows it: the last carriage-return segment (a progress bar's
    newest state), no colour codes, at most ``LINE_CHARS``."""
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", line).split("\r")
    shown = next((part.strip() for part in reversed(text) if part.strip()), "")
    return shown if len(shown) <= LINE_CHARS else shown[:LINE_CHARS - 3] + "..."


def summary(waiting: Waiting, now: datetime, last_line: str | None) -> str:
    """The live line's part on loading and pulling: ``loading for N min (pod p container c, K more
    loading): "<last log line>"``; empty when neither."""
    parts = []
    loads = sorted(waiting.of(WaitingSign.LOADING), key=lambda s: -s.seconds(now))
    if loads:
        more = f", {len(loads) - 1} more loading" if len(loads) > 1 else ""
        said = f': "{last_line}"' if last_line else ""
        parts.append(f"loading for {minutes(loads[0].seconds(now))} (pod {loads[0].pod} container "
                     f"{loads[0].container}{more}){said}")
    pulls = sorted(waiting.of(WaitingSign.PULLING), key=lambda s: -s.seconds(now))
    if pulls:
        more = f", {len(pulls) - 1} more pulling" if len(pulls) > 1 else ""
        parts.append(f"pulling {pulls[0].detail} for {minutes(pulls[0].seconds(now))} (pod {pulls[0].pod}{more})")
    return "; ".join(parts)


def loading_failure(sign: Sign, now: datetime, bound_s: float, last_line: str | None) -> StepFailure:
    """A container loading longer than its bound: the wait ends (``timeout``, not a failed attempt:
    a slow volume or a hung engine, the evidence says which)."""
    said = f'; its last log line: "{last_line}"' if last_line else ""
    started = iso(sign.since) if sign.since else "an unsaid time"
    return StepFailure(
        f"pod {sign.pod} container {sign.container} has been running without restarts and not ready for "
        f"{sign.seconds(now):.0f}s (timeouts.readiness_loading_s {bound_s:.0f}s): the model did not finish "
        f"loading{said}", FailureCategory.TIMEOUT,
        [f"pod {sign.pod} container {sign.container}: running since {started}, not ready{said}"])
