"""Step 6's evidence before teardown: what a person needs to see why an attempt failed.

On a readiness failure, before anything is deleted (docs/procedure.md, "Step 6: slow starts,
failures, teardown"): the DGD's status and conditions, the events of the DGD and its pods (warnings
first, bounded), and for each container that crash-loops, failed or waits on an error its last log
lines (``--previous`` when it restarted: the crashed run's output, not the new one's), bounded and
redacted of secret-looking values (:func:`deploy_suite.record.ledger.redact`). All of it goes into
one file under ``logs/`` and an excerpt into the ledger's ``readiness.failure_evidence``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy_suite.access.kube import DGD, Kube, Obj
from deploy_suite.constants import LABEL_DGD_NAME
from deploy_suite.errors import KubeError
from deploy_suite.judges import triage, wait_signs
from deploy_suite.record.ledger import redact

LOG_LINES = 40  # per container, as `kubectl logs --tail=40`
EXCERPT_CHARS = 1500  # per container in the ledger (the whole tail is in the file)
MAX_EVENTS = 20
MAX_CONTAINERS = 6  # containers whose logs are fetched: the failing ones of a large DGD are alike
_HEALTHY_WAITING = ("", "ContainerCreating", "PodInitializing")
# The live line of a loading container: its last lines, bounded in count and bytes (one line of a
# progress bar can hold thousands of carriage-return updates).
LINE_TAIL = 5
LINE_BYTES = 16384


@dataclass
class ContainerEvidence:
    pod: str
    container: str
    state: str  # the waiting reason, or "terminated"
    restarts: int
    last_terminated: str
    previous: bool  # the log is the previous (crashed) run's
    log_excerpt: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"pod": self.pod, "container": self.container, "state": self.state, "restarts": self.restarts,
                "last_terminated": self.last_terminated, "previous": self.previous,
                "log_excerpt": self.log_excerpt}


@dataclass
class FailureEvidence:
    dgd_status: dict[str, Any] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    containers: list[ContainerEvidence] = field(default_factory=list)
    log_file: str | None = None  # EXP_ROOT-relative
    errors: list[str] = field(default_factory=list)  # what could not be read

    def as_dict(self) -> dict[str, Any]:
        return {"dgd_status": self.dgd_status, "events": self.events,
                "containers": [c.as_dict() for c in self.containers], "log_file": self.log_file,
                "errors": self.errors}


def failing_containers(pod: Obj) -> list[tuple[Obj, str]]:
    """(container status, state) of containers that wait on an error, restarted, or terminated non-zero."""
    status = pod.get("status") or {}
    out = []
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        state = cs.get("state") or {}
        reason = str((state.get("waiting") or {}).get("reason") or "")
        ended = state.get("terminated") or {}
        if reason not in _HEALTHY_WAITING or int(cs.get("restartCount") or 0) > 0 or ended.get("exitCode", 0):
            out.append((cs, reason or ("terminated" if ended else "restarted")))
    return out


def last_lines(kube: Kube, namespace: str, pod: Obj) -> dict[str, list[str]]:
    """The last lines of each terminated container of ``pod`` (the crashed run's), redacted, for
    step 6's triage to read the failure signatures in (judges/signatures.py); unreadable is empty."""
    out: dict[str, list[str]] = {}
    status = pod.get("status") or {}
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        if not ((cs.get("lastState") or {}).get("terminated") or (cs.get("state") or {}).get("terminated")):
            continue
        previous = not (cs.get("state") or {}).get("terminated")
        try:
            log, _ = terminated_log(kube, namespace, pod["metadata"]["name"], cs, previous)
        except KubeError:
            continue
        out[str(cs.get("name"))] = redact(log).splitlines()
    return out


def terminated_log(kube: Kube, namespace: str, pod: str, cs: Obj, previous: bool) -> tuple[str, bool]:
    """The log of the run container status ``cs`` describes, and whether it was read as ``--previous``.

    A real kubelet restarts a crashed container at once: a status read while it showed
    ``terminated`` may describe what is the previous run by the time its log is read
    (docs/offline-cluster.md, "Differences found"). So after reading the current log, the container
    that status named is looked up again; when it is no longer the current one, its log is the
    ``--previous`` one."""
    container = str(cs.get("name"))
    log = kube.pod_log(pod, namespace, container, tail=LOG_LINES, previous=previous)
    ended = str(((cs.get("state") or {}).get("terminated") or {}).get("containerID") or "")
    if previous or not ended:
        return log, previous
    try:
        fresh = kube.get("Pod", pod, namespace)
    except KubeError:
        return log, False
    now: Obj = next((c for c in (fresh.get("status") or {}).get("containerStatuses") or []
                     if c.get("name") == container), {})
    if str(((now.get("state") or {}).get("terminated") or {}).get("containerID") or "") == ended:
        return log, False  # still the current run after the read: the log read was its own
    try:
        return kube.pod_log(pod, namespace, container, tail=LOG_LINES, previous=True), True
    except KubeError:
        return log, False


def last_line(kube: Kube, namespace: str, pod: str, container: str) -> str | None:
    """The last non-empty log line of a running container (a model loading, for step 6's live
    line), redacted as the evidence logs are, then clipped; None when it cannot be read."""
    try:
        log = kube.pod_log(pod, namespace, container, tail=LINE_TAIL, limit_bytes=LINE_BYTES)
    except KubeError:
        return None
    lines = [wait_signs.clip(line) for line in redact(log).splitlines()]
    return next((line for line in reversed(lines) if line), None)


def _event_line(ev: Obj) -> str:
    obj = ev.get("involvedObject") or {}
    count = f" x{ev['count']}" if ev.get("count") else ""
    return redact(f"{ev.get('lastTimestamp') or ev.get('eventTime') or ''} {ev.get('type', '')} "
                  f"{obj.get('kind', '')}/{obj.get('name', '')} {ev.get('reason', '')}{count}: "
                  f"{ev.get('message', '')}".strip())


def collect(kube: Kube, namespace: str, dgd_name: str) -> tuple[FailureEvidence, str]:
    """Read the evidence (never raises for a refused read: it is noted in ``errors``); returns the
    ledger excerpt and the full text for the file under ``logs/``."""
    out = FailureEvidence()
    text: list[str] = []
    try:
        dgd = kube.get_or_none(DGD, dgd_name, namespace) or {}
        st = dgd.get("status") or {}
        out.dgd_status = {"state": st.get("state"), "observedGeneration": st.get("observedGeneration"),
                          "generation": (dgd.get("metadata") or {}).get("generation"),
                          "conditions": [{k: c.get(k) for k in ("type", "status", "reason", "message")}
                                         for c in st.get("conditions") or []]}
        pods, _ = kube.list_items("Pod", namespace, label_selector=f"{LABEL_DGD_NAME}={dgd_name}")
    except KubeError as exc:
        out.errors.append(f"DGD or pods unreadable: {exc}")
        pods = []
    text += [f"== dgd/{dgd_name} status", redact(str(out.dgd_status))]
    out.events = _events(kube, namespace, dgd_name, pods, out.errors)
    text += ["== events (warnings last, each group oldest first)", *out.events]
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        for cs, state in failing_containers(pod):
            if len(out.containers) >= MAX_CONTAINERS:
                break
            out.containers.append(_container(kube, namespace, pod, cs, state, text, out.errors))
    text += [f"== not readable: {e}" for e in out.errors]
    return out, "\n".join(text) + "\n"


def _events(kube: Kube, namespace: str, dgd_name: str, pods: Sequence[Obj], errors: list[str]) -> list[str]:
    events: list[Obj] = []
    names = [("DynamoGraphDeployment", dgd_name)] + [("Pod", p["metadata"]["name"]) for p in pods]
    for kind, name in names[:MAX_CONTAINERS + 1]:
        try:
            events += kube.events_for(name, namespace, kind)
        except KubeError as exc:
            errors.append(f"events of {kind}/{name}: {exc}")
            break
    events.sort(key=lambda e: (e.get("type") == "Warning", e.get("lastTimestamp") or e.get("eventTime") or ""))
    return [_event_line(e) for e in events[-MAX_EVENTS:]]


def _container(kube: Kube, namespace: str, pod: Obj, cs: Obj, state: str, text: list[str],
               errors: list[str]) -> ContainerEvidence:
    name, container = pod["metadata"]["name"], str(cs.get("name"))
    restarts = int(cs.get("restartCount") or 0)
    item = ContainerEvidence(name, container, state, restarts, triage.last_terminated(cs), previous=restarts > 0)
    try:
        log, item.previous = terminated_log(kube, namespace, name, cs, item.previous)
    except KubeError as exc:  # a container that never started has no log: say so, keep going
        log = ""
        errors.append(f"logs of {name}/{container}{' --previous' if item.previous else ''}: {exc}")
    log = redact(log)
    item.log_excerpt = log.strip()[-EXCERPT_CHARS:]
    text += [f"== pod/{name} container {container}: {state}, restarts {restarts}"
             f"{', ' + item.last_terminated if item.last_terminated else ''}; last {LOG_LINES} lines"
             f"{' of the previous run' if item.previous else ''}", log.rstrip()]
    return item


def write(logs_dir: Path, dgd_name: str, text: str) -> Path:
    """The one file of this failure's evidence under ``logs/`` (created only when a failure is kept)."""
    logs_dir.mkdir(parents=True, exist_ok=True)
    path = logs_dir / f"readiness-{dgd_name}.log"
    path.write_text(text)
    return path
