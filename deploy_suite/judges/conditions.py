"""The readiness judges: observed objects in, a verdict out, no API call and no clock.

Each judge reads what a wait has seen (the DGD, its pods, the Warning events of its children) and
says how far it has come or raises when waiting cannot help: :class:`StepFailure` (a pod that can
never schedule, a crash loop, a failed Job) or :class:`StepBlocked` (the platform at fault). The
stateful side of a wait (API reads of a pod's events, progress, allocation, how long a failed
state has lasted) is the step's: :mod:`deploy_suite.procedure.waits`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NoReturn

from deploy_suite.clock import parse_iso
from deploy_suite.constants import Obj
from deploy_suite.errors import StepBlocked, StepFailure
from deploy_suite.judges import claims, operator_status, triage
from deploy_suite.judges import objects as triage_objects
from deploy_suite.judges.membership import pod_ready as pod_ready  # re-exported: the pod fact the waits read
from deploy_suite.judges.membership import ready_by_component
from deploy_suite.model.scheduling import pod_gpu_total
from deploy_suite.vocab import Action, BlockerClass, FailureCategory, TriageCategory

# kube-scheduler's VolumeBinding filter: `persistentvolumeclaim "model-cache" not found`.
_CLAIM_NOT_FOUND = re.compile(r'persistentvolumeclaim "([^"]+)" not found')
# The objects between a DGD and its pods on every operator path (docs/operator-generations.md): an
# error that stops pods from being created is told in their events (``FailedCreate``), not a pod's.
BELOW_DGD = frozenset({"DynamoComponentDeployment", "Deployment", "ReplicaSet", "StatefulSet", "LeaderWorkerSet",
                       "PodCliqueSet", "PodClique", "PodCliqueScalingGroup", "PodGroup", "Workload"})


# ---------------------------------------------------------------------------- pod facts
def unschedulable(pod: Obj) -> Obj | None:
    """The pod's ``PodScheduled=False, Unschedulable`` condition, if the scheduler gave up on it."""
    return next((c for c in (pod.get("status") or {}).get("conditions") or []
                 if c.get("type") == "PodScheduled" and c.get("status") == "False"
                 and c.get("reason") == "Unschedulable"), None)


def gpus_of(pod: Obj) -> int:
    return pod_gpu_total(pod.get("spec") or {})  # MIG slices too: they open the allocation interval


def missing_claims(verdict: triage.Verdict) -> list[str]:
    """The claims the scheduler called "not found" in a verdict's evidence."""
    found: list[str] = _CLAIM_NOT_FOUND.findall(" ".join(verdict.evidence))
    return found


def pull_causes(events: Iterable[Obj]) -> list[str]:
    """The registry's answers in a pod's pull-failure events, the last two."""
    return [str(e.get("message", "")) for e in events if e.get("reason") in {"Failed", "ErrImagePull"}][-2:]


def stop(verdict: triage.Verdict) -> NoReturn:
    """A verdict waiting cannot help ends the wait: blocked when the platform is at fault, else a
    failure, a failed attempt when the manifest can never run as written (its action)."""
    blocked_by_platform(verdict)
    raise StepFailure(verdict.diagnosis, verdict.category, verdict.evidence,
                      failed_attempt=verdict.action == Action.FAILED_ATTEMPT)


def blocked_by_platform(verdict: triage.Verdict) -> None:
    """A platform fault (webhook, device plugin, GPU runtime) blocks the step: it is not the
    candidate's failure, so it is never a failed run charged to its budget (docs/procedure.md, "Outcomes")."""
    if verdict.category == TriageCategory.PLATFORM:
        raise StepBlocked(BlockerClass.PLATFORM, f"{verdict.diagnosis}; evidence: {' | '.join(verdict.evidence)}",
                          "fix the cluster's platform component named here, then rerun")


# ---------------------------------------------------------------------------- claims
def claim_stop(verdict: triage.Verdict, events: Iterable[Obj]) -> NoReturn:
    """A claim that can never bind as written stops the step at once, blocked with the class of what
    must change (docs/procedure.md, step 4): a StorageClass that does not exist is ``storage-class``,
    a platform fault ``platform``, anything else of the claim's (an access mode its provisioner
    refuses, a volume that does not fit, no class at all) ``pvc``. Never a failed attempt: the
    candidate was not applied."""
    blocked_by_platform(verdict)
    said = f"{verdict.diagnosis}; evidence: {' | '.join(verdict.evidence)}"
    missing = claims.missing_class(events)
    if missing is not None:
        raise StepBlocked(BlockerClass.STORAGE_CLASS, said, f"create StorageClass {missing!r} or name one the cluster "
                          "has in the claim (kubectl get storageclass; the handoff's storage_class), then rerun")
    raise StepBlocked(BlockerClass.PVC, said, "fix the claim in the support manifest (an access mode its class's "
                      "provisioner supports, a volume that fits it, a StorageClass), then rerun")


# ---------------------------------------------------------------------------- Jobs
def job_true_conditions(job: Obj) -> list[str]:
    return [str(c["type"]) for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]


def judge_job(job_name: str, kind: str, job: Obj, pod_verdicts: Iterable[triage.Verdict | None]) -> tuple[bool, str]:
    """A Job's ``Complete`` condition (alone or beside SuccessCriteriaMet). A condition containing
    ``Failed`` raises (category ``job-failed``); so does a pod of the Job the scheduler can never
    place (unbound claim, taint, selector), with its words."""
    true = job_true_conditions(job)
    joined = " ".join(true)
    if "Failed" in joined:
        raise StepFailure(f"{kind} job {job_name} failed (conditions: {joined})", FailureCategory.JOB_FAILED,
                          [f"job/{job_name}: {joined}"])
    for verdict in pod_verdicts:
        if verdict is not None and not verdict.can_wait:
            blocked_by_platform(verdict)
            raise StepFailure(f"{kind} job {job_name} cannot run: {verdict.diagnosis}", verdict.category,
                              verdict.evidence)
    st = job.get("status") or {}
    return "Complete" in joined, (f"job/{job_name} conditions: {joined}" if true else
                                  f"job/{job_name} active={st.get('active', 0)} failed={st.get('failed', 0)}")


# ---------------------------------------------------------------------------- readiness
def milestones(pod: Obj) -> set[str]:
    """How far a pod has come: created, scheduled, each container's image pulled, started, ready.

    Only ever grows while a pod advances; a restart count does not count (a crash loop is no progress).
    """
    name = pod["metadata"]["name"]
    status = pod.get("status") or {}
    reached = {f"pod {name} created"}
    if pod.get("spec", {}).get("nodeName"):
        reached.add(f"pod {name} scheduled on {pod['spec']['nodeName']}")
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        state = cs.get("state") or {}
        if cs.get("imageID") or "running" in state or "terminated" in state:
            reached.add(f"pod {name} container {cs.get('name')} image pulled")
        if cs.get("started") or "running" in state:
            reached.add(f"pod {name} container {cs.get('name')} started")
    if pod_ready(pod):
        reached.add(f"pod {name} ready")
    return reached




@dataclass(frozen=True)
class DgdStatus:
    """What a DGD's status says of readiness: its state, the Ready condition, which rule knew the
    status describes the current spec (:func:`operator_status.generation`), and whether it is done."""

    state: str | None
    ready_condition: str | None
    ready_reason: str | None
    generation_rule: str | None
    done: bool
    description: str


def dgd_status(name: str, obj: Obj | None, pods: Sequence[Obj], wanted: Mapping[str, int],
               field_manager: str | None) -> DgdStatus:
    """Ready with state ``successful`` for the current spec, and every component's wanted pods
    (``wanted``: component -> replicas x nodes) ready: one component's surplus never covers another."""
    st = (obj or {}).get("status") or {}
    cond = operator_status.ready_condition(st)
    counts = ready_by_component(pods, name, wanted)
    short = [f"{c.component} {c.ready}/{c.wanted}" for c in counts if not c.met]
    gen = operator_status.generation(obj, field_manager) if obj is not None else None
    done = (gen is not None and gen.current and st.get("state") == "successful" and cond.get("status") == "True"
            and not short)
    desc = (f"dgd/{name} state={st.get('state')} Ready={cond.get('status')} ({cond.get('reason') or '-'}), "
            f"pods ready {sum(c.ready for c in counts)}/{sum(wanted.values())}")
    if short and len(counts) > 1:
        desc += f" (short: {', '.join(short)})"
    if gen is not None and not gen.current:
        desc += (" (the status describes an older generation: observedGeneration behind" if gen.rule ==
                 "observedGeneration" else " (no observedGeneration and Ready has not turned True since this "
                 "experiment's apply") + ")"
    return DgdStatus(st.get("state"), cond.get("status"), cond.get("reason"), gen.rule if gen is not None else None,
                     done, desc)


@dataclass(frozen=True)
class ReconcileVerdict:
    """A ``failed`` state judged final: ``permanent`` (known text) or ``persisted`` (outlasted the grace)."""

    outcome: str
    message: str
    error: StepBlocked | StepFailure


def reconcile_verdict(name: str, st: Obj, lasted: float, grace_s: float) -> ReconcileVerdict | None:
    """``failed`` is a verdict when its text is known-permanent or it outlasts the grace period
    (``lasted`` seconds so far); None while waiting can still help."""
    text = operator_status.error_text(st)
    permanent = operator_status.permanent_error(text)
    if permanent is None and lasted < grace_s:
        return None
    why = (f"a known-permanent reconcile error ({permanent})" if permanent else
           f"the reconcile error persisted for {lasted:.0f}s (grace {grace_s:.0f}s)")
    outcome = "permanent" if permanent else "persisted"
    if permanent == TriageCategory.PLATFORM:
        return ReconcileVerdict(outcome, text, StepBlocked(
            BlockerClass.PLATFORM, f"the operator cannot run dgd/{name} on this cluster: {text} ({why})",
            "install what the operator names (for multinode: Grove, or LWS with Volcano) or choose a candidate "
            "this cluster can run"))
    reason = operator_status.ready_condition(st).get("reason")
    return ReconcileVerdict(outcome, text, StepFailure(
        f"DGD reconciliation error: {text} ({why})", permanent or FailureCategory.RECONCILE_ERROR,
        [f"dgd/{name} status: failed {reason}: {text}"], failed_attempt=permanent == TriageCategory.FAILED_DEPLOY))


def is_child(dgd_name: str, components: Sequence[str], kind: str, name: str) -> bool:
    """Is ``kind``/``name`` one of the DGD's children, by the names the operator gives them:
    Grove's PodCliqueSet the DGD's own, its PodCliques ``<dgd>-<index>-<component>[-...]``,
    anything else ``<dgd>-<component>[-...]`` (DCD, Deployment, ReplicaSet, LeaderWorkerSet);
    components lowercased as the operator does."""
    if name == dgd_name:
        return True
    comps = "|".join(re.escape(c.lower()) for c in components) or r"[^.]+"
    index = r"-\d+" if kind in {"PodClique", "PodCliqueScalingGroup"} else ""
    return re.match(rf"{re.escape(dgd_name)}{index}-(?:{comps})(?:-|$)", name) is not None


def below_dgd(dgd_name: str, components: Sequence[str], obj: Obj | None, events: Iterable[Obj],
              recheck_s: float) -> list[tuple[str, triage.Verdict]]:
    """Errors that stop pods from being created (a ResourceQuota, an admission webhook, an
    invalid pod template), read from the Warning events of the DGD's children since the DGD was
    created (older ones belong to an earlier DGD of the same name): each child's verdict, in order."""
    created: datetime | None = parse_iso(((obj or {}).get("metadata") or {}).get("creationTimestamp"))
    told: dict[tuple[str, str], list[Obj]] = {}
    for raw in events:
        involved = raw.get("involvedObject") or raw.get("regarding") or {}
        kind, name = str(involved.get("kind") or ""), str(involved.get("name") or "")
        if kind not in BELOW_DGD or not is_child(dgd_name, components, kind, name):
            continue
        event = triage_objects.normalized(raw)
        when = parse_iso(triage.event_time(event))
        if created is None or when is None or when >= created:
            told.setdefault((kind, name), []).append(event)
    out = []
    for (kind, name), said in told.items():
        verdict = triage_objects.triage_object(kind, name, None, said, recheck_s)
        if verdict is not None:
            out.append((f"{kind}/{name}", verdict))
    return out
