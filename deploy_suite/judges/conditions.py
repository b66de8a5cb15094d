"""Named conditions for the one wait loop (:func:`deploy_suite.access.watch.wait`, :meth:`Kube.wait`).

Each condition names what it awaits, the collections it watches (by label) and judges what the
loop has seen: ``(done, one-line state)``. Conditions that watch pods triage the pending ones
from the scheduler's own words (:mod:`deploy_suite.judges.triage`) the moment it gives a verdict, and
raise :class:`StepFailure` when waiting cannot help (a Job that failed, a pod that can never
schedule, a crash loop), so such a wait stops at once instead of running into its bound.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from deploy_suite import clock
from deploy_suite.access.kube import Kube
from deploy_suite.access.resources import DGD, Obj
from deploy_suite.access.watch import Judge, Seen, Watch
from deploy_suite.constants import LABEL_DGD_NAME, LABEL_JOB_NAME
from deploy_suite.errors import StepBlocked, StepFailure
from deploy_suite.judges import objects as triage_objects
from deploy_suite.judges import operator_status, signatures, triage
from deploy_suite.model.scheduling import pod_gpu_total
from deploy_suite.vocab import Action, BlockerClass, FailureCategory, TriageCategory

# kube-scheduler's VolumeBinding filter: `persistentvolumeclaim "model-cache" not found`.
Verdict = triage.Verdict  # the dataclass below has a field named triage
_CLAIM_NOT_FOUND = re.compile(r'persistentvolumeclaim "([^"]+)" not found')
# The objects between a DGD and its pods on every operator path (docs/operator-generations.md): an
# error that stops pods from being created is told in their events (``FailedCreate``), not a pod's.
BELOW_DGD = frozenset({"DynamoComponentDeployment", "Deployment", "ReplicaSet", "StatefulSet", "LeaderWorkerSet",
                       "PodCliqueSet", "PodClique", "PodCliqueScalingGroup", "PodGroup", "Workload"})


@dataclass(frozen=True)
class Named:
    """A stateless condition: a judge over its watched collections."""

    awaited: str
    watches: Mapping[str, Watch]
    judge: Judge

    def __call__(self, seen: Seen) -> tuple[bool, str]:
        return self.judge(seen)


# ---------------------------------------------------------------------------- pod facts
def pod_ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def unschedulable(pod: Obj) -> Obj | None:
    """The pod's ``PodScheduled=False, Unschedulable`` condition, if the scheduler gave up on it."""
    return next((c for c in (pod.get("status") or {}).get("conditions") or []
                 if c.get("type") == "PodScheduled" and c.get("status") == "False"
                 and c.get("reason") == "Unschedulable"), None)


def gpus_of(pod: Obj) -> int:
    return pod_gpu_total(pod.get("spec") or {})  # MIG slices too: they open the allocation interval


class PendingTriage:
    """Triage each unschedulable pod once per scheduler verdict (a new transition or message)."""

    def __init__(self, kube: Kube, namespace: str, nodes: Sequence[Obj] | None = None,
                 recheck_s: float = 30.0,
                 read_logs: Callable[[Obj], Mapping[str, Sequence[str]]] | None = None) -> None:
        self.kube = kube
        # The caller reads the terminated containers' last lines (procedure/evidence.py), once per termination.
        self.read_logs = read_logs
        self._logs: dict[str, tuple[str, Mapping[str, Sequence[str]]]] = {}
        self.namespace = namespace
        self.nodes = nodes
        self.recheck_s = recheck_s
        self._seen: dict[str, str] = {}
        # When a pod waiting for capacity is due to be triaged again (clock.monotonic()).
        self._due: dict[str, float] = {}
        self._pulls: dict[str, tuple[str, triage.Verdict]] = {}

    def verdict(self, pod: Obj) -> triage.Verdict | None:
        """A new verdict on ``pod``; None when it is not unschedulable or nothing changed."""
        cond = unschedulable(pod)
        if cond is None:
            return None
        name = pod["metadata"]["name"]
        stamp = f"{cond.get('lastTransitionTime')}{cond.get('message')}"
        due = self._due.get(name)
        if self._seen.get(name) == stamp and (due is None or clock.monotonic() < due):
            return None
        # A new verdict, or a wait whose recorded next check has come: read the events again (the
        # scheduler rewrites the condition only when its reason changes).
        verdict = triage.triage_pending(pod, self.kube.events_for(name, self.namespace), self.nodes, self.recheck_s)
        if verdict is not None and verdict.category == TriageCategory.DEPENDENCY and self._stale_claim(verdict):
            # The scheduler judged from a cache that had not seen the claim yet (it exists now); it
            # retries on the claim's add event. Not recorded as seen: the next pod update re-judges.
            return None
        self._seen[name] = stamp
        if verdict is not None and verdict.can_wait and verdict.next_check_s:
            self._due[name] = clock.monotonic() + verdict.next_check_s
        else:
            self._due.pop(name, None)
        return verdict

    def _stale_claim(self, verdict: triage.Verdict) -> bool:
        """True when every claim the scheduler called "not found" exists now."""
        missing = _CLAIM_NOT_FOUND.findall(" ".join(verdict.evidence))
        return bool(missing) and all(
            self.kube.get_or_none("PersistentVolumeClaim", claim, self.namespace) is not None for claim in missing)


    def containers(self, pod: Obj) -> triage.Verdict | None:
        """The pod's container verdict (:func:`triage.triage_containers`). An image pull whose
        waiting message does not say why (``Back-off pulling image "x"``) is judged again with the
        pod's pull-failure events, which carry the registry's answer."""
        verdict = triage.triage_containers(pod, logs=self._last_lines(pod))
        if verdict is None or verdict.category != TriageCategory.PULL_RETRY:
            return verdict
        name = pod["metadata"]["name"]
        stamp = " ".join(verdict.evidence)
        if name in self._pulls and self._pulls[name][0] == stamp:  # read the events once per state
            return self._pulls[name][1]
        causes = [str(e.get("message", "")) for e in self.kube.events_for(name, self.namespace)
                  if e.get("reason") in {"Failed", "ErrImagePull"}]
        if causes:
            verdict = triage.triage_containers(pod, causes[-2:]) or verdict
        self._pulls[name] = (stamp, verdict)
        return verdict


    def _last_lines(self, pod: Obj) -> Mapping[str, Sequence[str]]:
        """The last log lines of the pod's terminated containers, read again only when one ends anew."""
        if self.read_logs is None:
            return {}
        status = pod.get("status") or {}
        ended = [f"{cs.get('name')}/{cs.get('restartCount')}/{signatures.termination(cs).get('finishedAt')}"
                 for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
                 if signatures.termination(cs)]
        if not ended:
            return {}
        name, stamp = str(pod["metadata"]["name"]), " ".join(ended)
        if self._logs.get(name, ("", {}))[0] != stamp:
            self._logs[name] = (stamp, self.read_logs(pod))
        return self._logs[name][1]


def stop(verdict: triage.Verdict) -> NoReturn:
    """A verdict waiting cannot help ends the wait: blocked when the platform is at fault, else a
    failure, a failed attempt when the manifest can never run as written (its action)."""
    blocked_by_platform(verdict)
    raise StepFailure(verdict.diagnosis, verdict.category, verdict.evidence,
                      failed_attempt=verdict.action == Action.FAILED_ATTEMPT)


def blocked_by_platform(verdict: triage.Verdict) -> None:
    """A platform fault (webhook, device plugin, GPU runtime) blocks the step: it is not the
    candidate's failure, so it is never a failed run charged to its budget (README.md, step 6)."""
    if verdict.category == TriageCategory.PLATFORM:
        raise StepBlocked(BlockerClass.PLATFORM, f"{verdict.diagnosis}; evidence: {' | '.join(verdict.evidence)}",
                          "fix the cluster's platform component named here, then rerun")


# ---------------------------------------------------------------------------- deletions
def dgd_gone(namespace: str, name: str) -> Named:
    def judge(seen: Seen) -> tuple[bool, str]:
        obj = seen["dgd"].get(f"{namespace}/{name}")
        if obj is None:
            return True, "deleted"
        return False, f"dgd/{name} still present (deletionTimestamp {obj['metadata'].get('deletionTimestamp')})"

    return Named(f"dgd/{name} to disappear", {"dgd": Watch(DGD, namespace, name)}, judge)


def pods_gone(namespace: str, label_selector: str | None = None) -> Named:
    """Every pod of ``namespace`` (those matching ``label_selector`` when given) is gone."""
    def judge(seen: Seen) -> tuple[bool, str]:
        names = sorted(o["metadata"]["name"] for o in seen["pods"].values())
        return not names, f"{len(names)} pods left: {', '.join(names[:4])}" if names else "no pods left"

    which = f"pods labelled {label_selector}" if label_selector else f"the pods of namespace {namespace}"
    return Named(f"{which} to be deleted",
                 {"pods": Watch("Pod", namespace, label_selector=label_selector)}, judge)


def dgd_pods_gone(namespace: str, dgd_name: str) -> Named:
    """Every pod the operator made for ``dgd_name`` is gone."""
    return pods_gone(namespace, f"{LABEL_DGD_NAME}={dgd_name}")


# ---------------------------------------------------------------------------- support manifests
def pvc_bound(namespace: str, name: str) -> Named:
    def judge(seen: Seen) -> tuple[bool, str]:
        phase = (seen["pvc"].get(f"{namespace}/{name}") or {}).get("status", {}).get("phase")
        return phase == "Bound", f"pvc/{name} phase={phase}"

    return Named(f"pvc/{name} Bound", {"pvc": Watch("PersistentVolumeClaim", namespace, name)}, judge)


class JobComplete:
    """A Job's ``Complete`` condition (alone or beside SuccessCriteriaMet).

    A condition containing ``Failed`` raises (category ``job-failed``) at once; so does a pod of
    the Job the scheduler can never place (unbound claim, taint, selector), with its words.
    """

    def __init__(self, kube: Kube, namespace: str, job: str, kind: str) -> None:
        self.namespace = namespace
        self.job = job
        self.kind = kind
        self.awaited = f"job/{job} Complete"
        self.watches = {"job": Watch("Job", namespace, job),
                        "pods": Watch("Pod", namespace, label_selector=f"{LABEL_JOB_NAME}={job}")}
        self.triage = PendingTriage(kube, namespace)

    def __call__(self, seen: Seen) -> tuple[bool, str]:
        obj = seen["job"].get(f"{self.namespace}/{self.job}") or {}
        true = [str(c["type"]) for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
        joined = " ".join(true)
        if "Failed" in joined:
            raise StepFailure(f"{self.kind} job {self.job} failed (conditions: {joined})", FailureCategory.JOB_FAILED,
                              [f"job/{self.job}: {joined}"])
        for pod in seen["pods"].values():
            verdict = self.triage.verdict(pod)
            if verdict is not None and not verdict.can_wait:
                blocked_by_platform(verdict)
                raise StepFailure(f"{self.kind} job {self.job} cannot run: {verdict.diagnosis}", verdict.category,
                                  verdict.evidence)
        st = obj.get("status") or {}
        return "Complete" in joined, (f"job/{self.job} conditions: {joined}" if true else
                                      f"job/{self.job} active={st.get('active', 0)} failed={st.get('failed', 0)}")


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


@dataclass
class DgdReady:
    """The DGD Ready with state ``successful`` for its current spec, and ``expected_pods`` of its
    pods Running and ready.

    The status counts only when it describes the current spec (:func:`operator_status.generation`:
    observedGeneration where the operator writes it, otherwise a rule safe against a stale Ready).
    A ``failed`` state is a verdict when its text is a known-permanent reconcile error, or when it
    persists for ``failed_grace_s``; one that clears is recorded in ``reconcile_errors``.

    On the way it notes when the first GPU pod was bound (``allocated_at``, reported through
    ``on_allocated``), records contention and image pulls being retried (waiting can help), notes
    the last progress (a pod created, scheduled, its image pulled, a container started, the ready
    count rising: ``last_progress``), and raises for a crash loop that persists, an image that does
    not exist, a reconciliation error or a pending verdict that waiting cannot help (a failed
    attempt when the manifest can never run, a dependency otherwise).
    """

    triage: PendingTriage
    name: str
    expected_pods: int
    on_allocated: Callable[[str], None] | None = None
    field_manager: str | None = None
    failed_grace_s: float = 30.0
    components: tuple[str, ...] = ()  # the DGD's component names: the names its children take
    allocated_at: str | None = None
    contention: list[dict[str, Any]] = field(default_factory=list)
    dgd_state: str | None = None
    ready_condition: str | None = None
    ready_reason: str | None = None
    generation_rule: str | None = None
    reconcile_errors: list[dict[str, Any]] = field(default_factory=list)
    reached: set[str] = field(default_factory=set)
    last_progress: str = "nothing yet"
    last_progress_at: str | None = None
    progress_mono: float = field(default_factory=clock.monotonic)
    _waits: dict[str, str] = field(default_factory=dict)
    _failed_since: float | None = None

    @property
    def awaited(self) -> str:
        return f"dgd/{self.name} Ready with all pods ready"

    @property
    def watches(self) -> Mapping[str, Watch]:
        return {"dgd": Watch(DGD, self.triage.namespace, self.name),
                "pods": Watch("Pod", self.triage.namespace, label_selector=f"{LABEL_DGD_NAME}={self.name}"),
                "events": Watch("Event", self.triage.namespace, field_selector="type=Warning")}

    def progressed(self, what: str) -> None:
        self.last_progress, self.last_progress_at, self.progress_mono = what, clock.iso_now(), clock.monotonic()

    def __call__(self, seen: Seen) -> tuple[bool, str]:
        pods = list(seen["pods"].values())
        for pod in pods:
            self._judge_pod(pod)
        new = sorted(set().union(*map(milestones, pods)) - self.reached) if pods else []
        if new:
            self.reached.update(new)
            self.progressed(new[-1] if len(new) == 1 else f"{new[-1]} (and {len(new) - 1} more)")
        obj = seen["dgd"].get(f"{self.triage.namespace}/{self.name}")
        if len(pods) < self.expected_pods:  # once every pod exists, a refusal to create one is history
            self._judge_below(obj, seen.get("events", {}).values())
        st = (obj or {}).get("status") or {}
        cond = operator_status.ready_condition(st)
        self.dgd_state, self.ready_condition = st.get("state"), cond.get("status")
        self.ready_reason = cond.get("reason")
        self._judge_failed(st)
        ready = sum(pod_ready(p) for p in pods)
        gen = operator_status.generation(obj, self.field_manager) if obj is not None else None
        self.generation_rule = gen.rule if gen is not None else None
        done = (gen is not None and gen.current and st.get("state") == "successful" and cond.get("status") == "True"
                and ready >= self.expected_pods)
        desc = (f"dgd/{self.name} state={st.get('state')} Ready={cond.get('status')} "
                f"({cond.get('reason') or '-'}), pods ready {ready}/{self.expected_pods}")
        if gen is not None and not gen.current:
            desc += (" (the status describes an older generation: observedGeneration behind" if gen.rule ==
                     "observedGeneration" else " (no observedGeneration and Ready has not turned True since this "
                     "experiment's apply") + ")"
        if self._failed_since is not None:
            desc += f"; reconcile error for {clock.monotonic() - self._failed_since:.0f}s, not yet a verdict"
        if self.contention:
            desc += f"; contention: {self.contention[-1]['diagnosis'][:120]}"
        return done, desc

    def _judge_failed(self, st: Obj) -> None:
        """``failed`` is a verdict when its text is known-permanent or it outlasts the grace period."""
        if st.get("state") != "failed":
            if self._failed_since is not None:
                self.reconcile_errors[-1].update(outcome="recovered", cleared_at=clock.iso_now(),
                                                 seconds=round(clock.monotonic() - self._failed_since, 3))
                self._failed_since = None
            return
        text = operator_status.error_text(st)
        if self._failed_since is None:
            self._failed_since = clock.monotonic()
            self.reconcile_errors.append({"first_seen_at": clock.iso_now(), "message": text, "outcome": "pending"})
        permanent = operator_status.permanent_error(text)
        lasted = clock.monotonic() - self._failed_since
        if permanent is None and lasted < self.failed_grace_s:
            return
        entry = self.reconcile_errors[-1]
        entry.update(message=text, outcome="permanent" if permanent else "persisted", seconds=round(lasted, 3))
        why = (f"a known-permanent reconcile error ({permanent})" if permanent else
               f"the reconcile error persisted for {lasted:.0f}s (grace {self.failed_grace_s:.0f}s)")
        if permanent == TriageCategory.PLATFORM:
            raise StepBlocked(BlockerClass.PLATFORM,
                              f"the operator cannot run dgd/{self.name} on this cluster: {text} ({why})",
                              "install what the operator names (for multinode: Grove, or LWS with Volcano) or "
                              "choose a candidate this cluster can run")
        reason = operator_status.ready_condition(st).get("reason")
        raise StepFailure(f"DGD reconciliation error: {text} ({why})", permanent or FailureCategory.RECONCILE_ERROR,
                          [f"dgd/{self.name} status: failed {reason}: {text}"],
                          failed_attempt=permanent == TriageCategory.FAILED_DEPLOY)

    def _is_child(self, kind: str, name: str) -> bool:
        """Is ``kind``/``name`` one of this DGD's children, by the names the operator gives them:
        Grove's PodCliqueSet the DGD's own, its PodCliques ``<dgd>-<index>-<component>[-...]``,
        anything else ``<dgd>-<component>[-...]`` (DCD, Deployment, ReplicaSet, LeaderWorkerSet);
        components lowercased as the operator does."""
        if name == self.name:
            return True
        comps = "|".join(re.escape(c.lower()) for c in self.components) or r"[^.]+"
        index = r"-\d+" if kind in {"PodClique", "PodCliqueScalingGroup"} else ""
        return re.match(rf"{re.escape(self.name)}{index}-(?:{comps})(?:-|$)", name) is not None

    def _judge_below(self, obj: Obj | None, events: Iterable[Obj]) -> None:
        """Errors that stop pods from being created (a ResourceQuota, an admission webhook, an
        invalid pod template), read from the Warning events of the DGD's children since the DGD was
        created (older ones belong to an earlier DGD of the same name)."""
        created = clock.parse_iso(((obj or {}).get("metadata") or {}).get("creationTimestamp"))
        told: dict[tuple[str, str], list[Obj]] = {}
        for raw in events:
            involved = raw.get("involvedObject") or raw.get("regarding") or {}
            kind, name = str(involved.get("kind") or ""), str(involved.get("name") or "")
            if kind not in BELOW_DGD or not self._is_child(kind, name):
                continue
            event = triage_objects.normalized(raw)
            when = clock.parse_iso(triage.event_time(event))
            if created is None or when is None or when >= created:
                told.setdefault((kind, name), []).append(event)
        for (kind, name), said in told.items():
            verdict = triage_objects.triage_object(kind, name, None, said, self.triage.recheck_s)
            if verdict is None:
                continue
            if not verdict.can_wait:
                stop(verdict)
            self._note_wait(f"{kind}/{name}", verdict, True)

    def _judge_pod(self, pod: Obj) -> None:
        if self.allocated_at is None and pod["spec"].get("nodeName") and gpus_of(pod) > 0:
            self.allocated_at = clock.iso_now()
            if self.on_allocated is not None:
                self.on_allocated(self.allocated_at)
        # A container verdict is judged on every pod change, a scheduler verdict once per verdict.
        for verdict, once in ((self.triage.containers(pod), True), (self.triage.verdict(pod), False)):
            if verdict is None:
                continue
            if not verdict.can_wait:
                stop(verdict)
            self._note_wait(pod["metadata"]["name"], verdict, once)

    def _note_wait(self, pod: str, verdict: Verdict, once: bool) -> None:
        """Contention, an unclassified scheduler verdict or a pull being retried, recorded."""
        if once and self._waits.get(f"{pod}/{verdict.category}") == verdict.diagnosis:
            return
        self._waits[f"{pod}/{verdict.category}"] = verdict.diagnosis
        self.contention.append({**verdict.as_dict(), "at": clock.iso_now(), "next_check_at_s": verdict.next_check_s})
