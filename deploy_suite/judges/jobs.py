"""Support Jobs: a failed Job named by its cause, read from its pods' own words.

The Job controller says only that a Job failed (``Failed=True``, reason ``BackoffLimitExceeded``
or ``DeadlineExceeded``, docs/triage.md); why is in its pods: their containers' last log lines and
termination messages (the failure signatures of ``data/signatures.yaml``: a full disk, a cache
the pod may not write, a gated or unauthorized model) and the kubelet's reason for a pod it
evicted or refused. A signature decides the party (``platform``, ``dependency``, ``crash``);
words no rule reads leave the Job ``unknown`` with its pods' last line as evidence. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from deploy_suite.constants import LABEL_JOB_NAME, ObjView
from deploy_suite.judges import signatures, triage, words
from deploy_suite.judges.triage import Verdict
from deploy_suite.vocab import TriageCategory

Logs = Mapping[str, Sequence[str]]  # a pod's containers' last log lines, by container name ("" = any)
# The Job controller's label on its pods, old and new spelling (kubernetes pkg/controller/job).
_JOB_LABELS = (LABEL_JOB_NAME, "batch.kubernetes.io/job-name")


def failed(job: ObjView) -> ObjView | None:
    """The Job's ``Failed=True`` condition (``FailureTarget`` before the controller ends it)."""
    return next((c for c in (job.get("status") or {}).get("conditions") or []
                 if c.get("type") in {"Failed", "FailureTarget"} and c.get("status") == "True"), None)


def pods_of(name: str, pods: Sequence[ObjView]) -> list[ObjView]:
    """The Job's pods (its label or its owner reference), newest first."""
    def owned(pod: ObjView) -> bool:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        return any(labels.get(k) == name for k in _JOB_LABELS) or any(
            o.get("kind") == "Job" and o.get("name") == name for o in meta.get("ownerReferences") or [])
    return sorted((p for p in pods if owned(p)), key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp")),
                  reverse=True)


def _statuses(pod: ObjView) -> list[ObjView]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def pod_cause(pod_name: str, pod: ObjView | None, logs: Logs) -> Verdict | None:
    """Why one of the Job's pods failed: a signature in a container's words (decided at once, the
    Job being over), else the kubelet's reason for evicting or refusing it."""
    subject = f"pod {pod_name}"
    ended = [cs for cs in _statuses(pod or {}) if signatures.termination(cs)]
    for cs in ended:
        lines = logs.get(str(cs.get("name"))) or logs.get("") or ()
        found = triage.from_signature(f"{subject} container {cs.get('name')}", cs, lines, triage.CRASH_LOOP_RESTARTS)
        if found is not None:
            return found
    if not ended:  # no termination recorded (a pod status not given, or cut short): the logs alone
        for container, lines in logs.items():
            found = triage.from_signature(f"{subject} container {container or '?'}",
                                          {"lastState": {"terminated": {"exitCode": 1}}}, lines,
                                          triage.CRASH_LOOP_RESTARTS)
            if found is not None:
                return found
    status = (pod or {}).get("status") or {}
    if status.get("phase") == "Failed" and status.get("reason"):
        reason, message = str(status["reason"]), str(status.get("message") or "")
        said = words.judge_node(reason, message) or words.judge_kubelet(reason, message)
        if said is not None and said.category != TriageCategory.UNKNOWN:
            return triage.from_words(subject, f"status {reason}", message, said)
    return None


def triage_job(name: str, job: ObjView | None, pods: Sequence[ObjView] = (), logs: Mapping[str, Logs] | None = None,
               recheck_s: float = 30.0) -> Verdict | None:
    """A failed Job named by its pods' words (``pods``: any pods, the Job's are picked; ``logs``:
    saved logs by pod name, a pod named ``<job>-...`` counted as the Job's). None when the Job
    has not failed (its pods, pending or crashing, speak for themselves)."""
    cond = failed(job or {})
    if cond is None:
        return None
    subject = f"Job/{name}"
    reason, message = str(cond.get("reason") or cond.get("type")), str(cond.get("message") or "")
    evidence = [f"{subject}: {cond.get('type')}=True {reason}: {message}".rstrip(": ")]
    mine = pods_of(name, pods)
    by_name = {str(p["metadata"]["name"]): p for p in mine}
    logged = [p for p in (logs or {}) if p not in by_name and p.startswith(f"{name}-")]
    for pod_name in [*by_name, *logged]:
        cause = pod_cause(pod_name, by_name.get(pod_name), (logs or {}).get(pod_name) or {})
        if cause is not None:
            return Verdict(cause.category, f"{subject} failed ({reason}): {cause.diagnosis}",
                           [*evidence, *cause.evidence], decisive=True, fix=cause.fix)
    tail = [f"pod {p} container {c or '?'} last line: {lines[-1]}" for p in [*by_name, *logged]
            for c, lines in ((logs or {}).get(p) or {}).items() if lines][:3]
    read = "no rule reads its pods' last lines" if tail else "its pods' logs say why (pass them with --logs)"
    return Verdict(TriageCategory.UNKNOWN, f"{subject} failed ({reason}): {read}", [*evidence, *tail],
                   can_wait=True, next_check_s=recheck_s)
