"""The waits' conditions: what each wait watches, and the state it keeps between two looks.

A condition names what it awaits and the collections it watches (by label) for the one wait loop
(:func:`deploy_suite.access.watch.wait`, :meth:`Kube.wait`), and turns what the loop has seen into
``(done, one-line state)``. The verdicts are the pure judges' (:mod:`deploy_suite.judges.conditions`,
:mod:`deploy_suite.judges.triage`); what a judge cannot know from the watched objects lives here:
a pending pod's events read when the scheduler gives a verdict, the progress seen, when the
first GPU pod was bound, how long a failed state has lasted, the contention recorded, and the
reads behind the signs of a legitimate wait (a pod's pull events, a loading container's last line).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from deploy_suite import clock
from deploy_suite.access.kube import Kube
from deploy_suite.access.resources import DGD, Obj
from deploy_suite.access.watch import Judge, Seen, Watch
from deploy_suite.constants import LABEL_DGD_NAME, LABEL_JOB_NAME
from deploy_suite.errors import Forbidden, KubeError, NotFound, StepFailure
from deploy_suite.judges import claims, conditions, operator_status, signatures, triage, wait_signs
from deploy_suite.judges import nodes as node_judge
from deploy_suite.judges.conditions import DgdStatus, gpus_of, milestones, stop, unschedulable
from deploy_suite.judges.membership import pod_ready
from deploy_suite.judges.triage import Verdict  # DgdReady has a field named triage
from deploy_suite.judges.wait_signs import Sign, Waiting
from deploy_suite.model import discovery
from deploy_suite.procedure import holds
from deploy_suite.vocab import FailureCategory, TriageCategory, WaitingSign

# The reads behind the signs of a legitimate wait, at a modest rate (not every tick): a pod's
# events once a container has waited this long to be created, again every EVENTS_EVERY_S until
# they show a pull under way; the loading container's last log line every LINE_EVERY_S.
LOOK_AFTER_S = 10.0
EVENTS_EVERY_S = 30.0
LINE_EVERY_S = 60.0
# A not-ready pod's node is read again at most this often (a node down is judged from it).
NODE_EVERY_S = 10.0


@dataclass(frozen=True)
class Named:
    """A stateless condition: a judge over its watched collections."""

    awaited: str
    watches: Mapping[str, Watch]
    judge: Judge

    def __call__(self, seen: Seen) -> tuple[bool, str]:
        return self.judge(seen)


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


class ClaimBound:
    """A claim ``Bound`` (step 4), its events judged as they come (:func:`claims.triage_claim`): a
    final word of its provisioner or the PV controller (a StorageClass that does not exist, an
    access mode refused) stops the wait at once (:func:`conditions.claim_stop`); a volume being made
    is waited for within the wait's own bound."""

    def __init__(self, namespace: str, name: str) -> None:
        self.namespace = namespace
        self.name = name
        self.awaited = f"pvc/{name} Bound"
        self.watches = {"pvc": Watch("PersistentVolumeClaim", namespace, name),
                        "events": Watch("Event", namespace, field_selector=f"involvedObject.kind=PersistentVolumeClaim,"
                                                                           f"involvedObject.name={name}")}

    def __call__(self, seen: Seen) -> tuple[bool, str]:
        pvc = seen["pvc"].get(f"{self.namespace}/{self.name}")
        phase = ((pvc or {}).get("status") or {}).get("phase")
        if phase == "Bound":
            return True, f"pvc/{self.name} phase=Bound"
        events = list(seen["events"].values())
        verdict = claims.triage_claim(self.name, pvc, events)
        if verdict is not None and not verdict.can_wait:
            conditions.claim_stop(verdict, events)
        said = f": {' '.join(verdict.diagnosis.split())}" if verdict is not None else ""
        return False, f"pvc/{self.name} phase={phase}{said}"


class PendingTriage:
    """Triage each unschedulable pod once per scheduler verdict (a new transition or message),
    reading its events then: the scheduler's words are in them, not in the watched pod."""

    def __init__(self, kube: Kube, namespace: str, nodes: Sequence[Obj] | None = None,
                 recheck_s: float = 30.0,
                 read_logs: Callable[[Obj], Mapping[str, Sequence[str]]] | None = None, *,
                 claims: holds.ClaimHolds | None = None) -> None:
        self.kube = kube
        # Step 6: a pod held on its unbound claims is judged by them (:class:`holds.ClaimHolds`).
        self.claims = claims
        self._claim_said: dict[str, str] = {}
        # The caller reads the terminated containers' last lines (procedure/evidence.py), once per termination.
        self.read_logs = read_logs
        self._logs: dict[str, tuple[str, Mapping[str, Sequence[str]]]] = {}
        self.namespace = namespace
        self.nodes = nodes
        self.recheck_s = recheck_s
        self._seen: dict[str, str] = {}
        # When a pod waiting for capacity is due to be triaged again (clock.monotonic()).
        self._due: dict[str, float] = {}
        # The newest scheduler verdict on each unschedulable pod: a hold decision is a sign of a
        # legitimate wait until its next check says otherwise (judges/wait_signs.py).
        self.held: dict[str, triage.Verdict] = {}
        self._pulls: dict[str, tuple[str, triage.Verdict]] = {}

    def verdict(self, pod: Obj) -> triage.Verdict | None:
        """A new verdict on ``pod``; None when it is not unschedulable or nothing changed. On
        unbound claims (with ``claims``), the claims' verdict whenever it changes: a hold while they
        are being bound or provisioned, the claim's class at its final word."""
        said = self._scheduler(pod)
        if self.claims is None:
            return said
        judged = self.claims.judge(pod, said)
        name = str(pod["metadata"]["name"])
        if judged is said:
            self._claim_said.pop(name, None)
            return said
        if judged is None:
            return None
        self.held[name] = judged
        if self._claim_said.get(name) == judged.diagnosis:
            return None
        self._claim_said[name] = judged.diagnosis
        return judged

    def _scheduler(self, pod: Obj) -> triage.Verdict | None:
        cond = unschedulable(pod)
        name = pod["metadata"]["name"]
        if cond is None:
            self.held.pop(name, None)
            return None
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
        if verdict is not None:
            self.held[name] = verdict
        else:
            self.held.pop(name, None)
        if verdict is not None and verdict.can_wait and verdict.next_check_s:
            self._due[name] = clock.monotonic() + verdict.next_check_s
        else:
            self._due.pop(name, None)
        return verdict

    def _stale_claim(self, verdict: triage.Verdict) -> bool:
        """True when every claim the scheduler called "not found" exists now."""
        missing = conditions.missing_claims(verdict)
        return bool(missing) and all(
            self.kube.get_or_none("PersistentVolumeClaim", claim, self.namespace) is not None for claim in missing)

    def containers(self, pod: Obj) -> triage.Verdict | None:
        """The pod's container verdict (:func:`triage.triage_containers`). An image pull whose
        waiting message does not say why (``Back-off pulling image "x"``) is judged again with the
        pod's pull-failure events, which carry the registry's answer."""
        verdict = triage.triage_containers(pod, logs=self.last_lines(pod))
        if verdict is None or verdict.category != TriageCategory.PULL_RETRY:
            return verdict
        name = pod["metadata"]["name"]
        stamp = " ".join(verdict.evidence)
        if name in self._pulls and self._pulls[name][0] == stamp:  # read the events once per state
            return self._pulls[name][1]
        causes = conditions.pull_causes(self.kube.events_for(name, self.namespace))
        if causes:
            verdict = triage.triage_containers(pod, causes) or verdict
        self._pulls[name] = (stamp, verdict)
        return verdict

    def last_lines(self, pod: Obj) -> Mapping[str, Sequence[str]]:
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


class SignReads:
    """The API reads behind the signs of a legitimate wait (:mod:`deploy_suite.judges.wait_signs`),
    each at a modest rate: a pod's events while only they can tell a pull under way, and the
    loading container's last log line (``read_line``: pod, container -> the line, bounded and
    redacted, or None). A refused read shows no sign: the pod counts as stuck, the wait goes on."""

    def __init__(self, kube: Kube, namespace: str,
                 read_line: Callable[[str, str], str | None] | None = None) -> None:
        self.kube = kube
        self.namespace = namespace
        self.read_line = read_line
        self._since: dict[str, float] = {}  # pod/uid -> when it was first seen waiting for a container
        self._events: dict[str, tuple[float, list[Obj]]] = {}
        self._line: tuple[tuple[str, str | None], float, str | None] | None = None

    def events(self, pods: Sequence[Obj]) -> dict[str, list[Obj]]:
        """The events of each pod that needs them, as last read (read again when due)."""
        now = clock.monotonic()
        out: dict[str, list[Obj]] = {}
        for pod in pods:
            if not wait_signs.needs_events(pod):
                continue
            name = str(pod["metadata"]["name"])
            key = f"{name}/{pod['metadata'].get('uid')}"
            since = self._since.setdefault(key, now)
            read_at, said = self._events.get(key, (None, []))
            due = read_at is None or (now - read_at >= EVENTS_EVERY_S and wait_signs.pulling(pod, said) is None)
            if now - since >= LOOK_AFTER_S and due:
                try:
                    said = self.kube.events_for(name, self.namespace)
                except KubeError:
                    said = []
                self._events[key] = (now, said)
            out[name] = said
        return out

    def line(self, sign: Sign | None, now: datetime) -> str | None:
        """The last log line of the loading container ``sign`` names, once it has loaded a while."""
        if sign is None or self.read_line is None or sign.seconds(now) < LOOK_AFTER_S:
            return None
        key = (sign.pod, sign.container)
        mono = clock.monotonic()
        if self._line is None or self._line[0] != key or mono - self._line[1] >= LINE_EVERY_S:
            self._line = (key, mono, self.read_line(sign.pod, str(sign.container)))
        return self._line[2]


class JobComplete:
    """A Job's ``Complete`` condition (:func:`conditions.judge_job`), its pending pods triaged. A pod
    the scheduler holds on its unbound claims waits as long as they are still being bound or
    provisioned, within ``claim_bound_s`` (:class:`holds.ClaimHolds`); a claim's final word stops
    the wait at once with the claim's class (:func:`conditions.claim_stop`)."""

    def __init__(self, kube: Kube, namespace: str, job: str, kind: str, claim_bound_s: float = 600.0) -> None:
        self.kube = kube
        self.namespace = namespace
        self.job = job
        self.kind = kind
        self.awaited = f"job/{job} Complete"
        self.watches = {"job": Watch("Job", namespace, job),
                        "pods": Watch("Pod", namespace, label_selector=f"{LABEL_JOB_NAME}={job}")}
        self.triage = PendingTriage(kube, namespace)
        self.holds = holds.ClaimHolds(kube, namespace, claim_bound_s)

    def __call__(self, seen: Seen) -> tuple[bool, str]:
        obj = seen["job"].get(f"{self.namespace}/{self.job}") or {}
        # Lazy: the pods are triaged (their events read) only when the Job itself has not failed.
        return conditions.judge_job(self.job, self.kind, obj, map(self.verdict, seen["pods"].values()))

    def verdict(self, pod: Obj) -> Verdict | None:
        """The pod's verdict; on unbound claims, the claims' own (:meth:`holds.ClaimHolds.judge`)."""
        return self.holds.judge(pod, self.triage.verdict(pod))


# ---------------------------------------------------------------------------- readiness
@dataclass
class DgdReady:
    """The DGD Ready with state ``successful`` for its current spec, and each component's wanted
    pods Running and ready (:func:`conditions.dgd_status`).

    A ``failed`` state is a verdict when its text is a known-permanent reconcile error, or when it
    persists for ``failed_grace_s`` (:func:`conditions.reconcile_verdict`); one that clears is
    recorded in ``reconcile_errors``.

    On the way it notes when the first GPU pod was bound (``allocated_at``, reported through
    ``on_allocated``), records contention and image pulls being retried (waiting can help), notes
    the last progress (a pod created, scheduled, its image pulled, a container started, the ready
    count rising: ``last_progress``) and the signs of a legitimate wait (held, pulling, loading:
    ``signs``; the no-progress bound counts from ``counts_from``), and raises for a crash loop that
    persists, an image that does not exist, a reconciliation error, a pending verdict that waiting
    cannot help (a failed attempt when the manifest can never run, a dependency otherwise), a
    container loading longer than ``loading_s``, or the node of a pod not ready staying down for
    ``failed_grace_s`` (blocked, ``platform``: :func:`triage.node_lost`; nodes are read through
    ``read_node``, none when the deployer may not read them).
    """

    triage: PendingTriage
    name: str
    wanted: Mapping[str, int]  # component -> pods it wants ready (replicas x nodes)
    on_allocated: Callable[[str], None] | None = None
    field_manager: str | None = None
    failed_grace_s: float = 30.0
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
    # Signs of a legitimate wait (judges/wait_signs.py): the no-progress bound counts only while
    # something is stuck; a loading container is bounded by loading_s.
    reads: SignReads | None = None
    loading_s: float = 3600.0
    signs: Waiting = field(default_factory=Waiting)  # the last judgement: signs, and what is stuck
    waiting_mono: float = field(default_factory=clock.monotonic)  # the last time nothing was stuck
    started_at: datetime = field(default_factory=clock.now)
    read_node: Callable[[str], Obj | None] | None = None  # a node by name, None when it does not exist
    _nodes: dict[str, tuple[float, Obj | None]] = field(default_factory=dict)  # name -> (read at, node)
    _node_down: dict[str, float] = field(default_factory=dict)  # name -> first seen down (monotonic)
    _line: str | None = None
    _waits: dict[str, str] = field(default_factory=dict)
    _failed_since: float | None = None
    # Step 6's other reads (procedure/holds.py): a not-ready pod's kubelet words, the workload
    # objects' statuses; the verdict that ended the wait (the ledger's troubleshooting shape).
    kubelet: holds.KubeletWords | None = None
    statuses: holds.WorkloadStatuses | None = None
    stopped: holds.Stopped | None = None
    _gate_since: float | None = None  # when the operator's checkpoint gate was first seen holding replicas
    _platform_since: dict[str, float] = field(default_factory=dict)  # pod -> its kubelet first blamed the node
    # The namespace's DynamoWorkerMetadata (None when not served or not readable): a registration
    # that has not come is named in what is stuck; read at most every NODE_EVERY_S.
    read_registrations: Callable[[], list[Obj]] | None = None
    _registrations: tuple[float, list[Obj]] | None = None

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

    @property
    def counts_from(self) -> float:
        """Where the no-progress bound counts from: the last milestone, or the last moment nothing
        was stuck (every pod not ready showed a sign of a legitimate wait)."""
        return max(self.progress_mono, self.waiting_mono)

    def __call__(self, seen: Seen) -> tuple[bool, str]:
        pods = list(seen["pods"].values())
        warnings = list(seen.get("events", {}).values())
        for pod in pods:
            self._judge_pod(pod, warnings)
        self._judge_nodes(pods)
        new = sorted(set().union(*map(milestones, pods)) - self.reached) if pods else []
        if new:
            self.reached.update(new)
            self.progressed(new[-1] if len(new) == 1 else f"{new[-1]} (and {len(new) - 1} more)")
        obj = seen["dgd"].get(f"{self.triage.namespace}/{self.name}")
        if len(pods) < sum(self.wanted.values()):  # once every pod exists, a refusal to create one is history
            for what, verdict in conditions.below_dgd(self.name, tuple(self.wanted), obj, warnings,
                                                      self.triage.recheck_s):
                if not verdict.can_wait:
                    kind, _, child = what.partition("/")
                    self._stop(kind, child, verdict, ("the Warning events of the DGD's children",))
                self._note_wait(what, verdict, True)
        status = conditions.dgd_status(self.name, obj, pods, self.wanted, self.field_manager)
        if not status.done:
            self._judge_statuses(pods)
        self.dgd_state, self.ready_condition, self.ready_reason = (status.state, status.ready_condition,
                                                                   status.ready_reason)
        self._judge_failed((obj or {}).get("status") or {})
        self.generation_rule = status.generation_rule
        st = (obj or {}).get("status") or {}
        self._judge_waiting(pods, status, operator_status.checkpoint_gate(st))
        desc = _described(status, st)
        if self._failed_since is not None:
            desc += f"; reconcile error for {clock.monotonic() - self._failed_since:.0f}s, not yet a verdict"
        if self.contention:
            desc += f"; contention: {self.contention[-1]['diagnosis'][:120]}"
        said = wait_signs.summary(self.signs, clock.now(), self._line)
        return status.done, f"{desc}; {said}" if said else desc

    def _judge_waiting(self, pods: Sequence[Obj], status: DgdStatus, gate: str | None = None) -> None:
        """What waits with a sign and what is stuck; a container loading past ``loading_s`` ends the
        wait, and so does a checkpoint gate (``gate``: the operator's message) holding replicas at
        zero for as long."""
        now = clock.now()
        events = self.reads.events(pods) if self.reads is not None else {}
        held = self._gate(gate, now)
        pending = None if status.done else status.description
        missing = self._unregistered(pods) if pending is not None else []
        if pending is not None and missing:
            pending += f"; not registered with Kubernetes discovery (no DynamoWorkerMetadata): {', '.join(missing)}"
        self.signs = wait_signs.judge(pods, sum(self.wanted.values()), self.triage.held, events,
                                      dgd_pending=pending, fallback=self.started_at, gate=held)
        if not self.signs.stuck:
            self.waiting_mono = clock.monotonic()
        loads = self.signs.of(WaitingSign.LOADING)
        longest = max(loads, key=lambda s: s.seconds(now)) if loads else None
        self._line = self.reads.line(longest, now) if self.reads is not None else None
        late = wait_signs.overdue(self.signs, now, self.loading_s)
        if late is not None:
            raise wait_signs.loading_failure(late, now, self.loading_s, self._line if late == longest else None)

    def _judge_failed(self, st: Obj) -> None:
        """How long a ``failed`` state has lasted, and the verdict once it is final."""
        if st.get("state") != "failed":
            if self._failed_since is not None:
                self.reconcile_errors[-1].update(outcome="recovered", cleared_at=clock.iso_now(),
                                                 seconds=round(clock.monotonic() - self._failed_since, 3))
                self._failed_since = None
            return
        if self._failed_since is None:
            self._failed_since = clock.monotonic()
            self.reconcile_errors.append({"first_seen_at": clock.iso_now(), "message": operator_status.error_text(st),
                                          "outcome": "pending"})
        lasted = clock.monotonic() - self._failed_since
        verdict = conditions.reconcile_verdict(self.name, st, lasted, self.failed_grace_s)
        if verdict is None:
            return
        self.reconcile_errors[-1].update(message=verdict.message, outcome=verdict.outcome, seconds=round(lasted, 3))
        raise verdict.error

    def _gate(self, gate: str | None, now: datetime) -> Sign | None:
        """The checkpoint gate's sign while it holds, since it was first seen; past ``loading_s`` it
        ends the wait (``timeout``), naming the checkpoints the operator still waits for."""
        if gate is None:
            self._gate_since = None
            return None
        mono = clock.monotonic()
        self._gate_since = mono if self._gate_since is None else self._gate_since
        held_s = mono - self._gate_since
        if held_s >= self.loading_s:
            raise StepFailure(f"dgd/{self.name}: the operator held replicas at zero for {held_s:.0f}s "
                              f"(timeouts.readiness_loading_s {self.loading_s:.0f}s) waiting for a checkpoint: "
                              f"{gate}; the checkpoint never became ready (read its DynamoCheckpoint and its Job)",
                              FailureCategory.TIMEOUT, [f"dgd/{self.name} Ready=False "
                                                        f"{operator_status.CHECKPOINT_GATE}: {gate}"])
        return Sign(f"dgd/{self.name}", WaitingSign.CHECKPOINT, None, now - timedelta(seconds=held_s), gate)

    def _unregistered(self, pods: Sequence[Obj]) -> list[str]:
        """The running pods whose registration (``DynamoWorkerMetadata``) has not come, where their
        runtime registers with Kubernetes discovery (:func:`discovery.unregistered`)."""
        if self.read_registrations is None or not any(map(discovery.registers, pods)):
            return []
        now = clock.monotonic()
        if self._registrations is None or now - self._registrations[0] >= NODE_EVERY_S:
            try:
                self._registrations = (now, self.read_registrations())
            except (Forbidden, NotFound):  # not served here, or not this identity's to read
                self.read_registrations = None
                return []
            except KubeError:
                return []
        return discovery.unregistered(pods, self._registrations[1])

    def _stop(self, kind: str, name: str, verdict: Verdict, checked: Sequence[str] = ()) -> None:
        """A verdict waiting cannot help ends the wait; it is kept for the ledger's diagnosis."""
        self.stopped = holds.Stopped(kind, name, verdict, tuple(checked))
        stop(verdict)

    def _judge_pod(self, pod: Obj, warnings: Sequence[Obj] = ()) -> None:
        if self.allocated_at is None and pod["spec"].get("nodeName") and gpus_of(pod) > 0:
            self.allocated_at = clock.iso_now()
            if self.on_allocated is not None:
                self.on_allocated(self.allocated_at)
        name = str(pod["metadata"]["name"])
        said = self.kubelet.verdict(pod, warnings, self.triage.last_lines(pod)) if self.kubelet else None
        # The kubelet's words on its node (a sandbox it cannot create) may be a node still starting:
        # final once they outlast the reconcile grace, as a node down is (docs/procedure.md, step 6).
        platform = said is not None and said.category == TriageCategory.PLATFORM
        since = self._platform_since.setdefault(name, clock.monotonic()) if platform else \
            self._platform_since.pop(name, None)
        if said is not None and not said.can_wait and (
                not platform or clock.monotonic() - (since or 0.0) >= self.failed_grace_s):
            # Its kubelet's words first: a probe names why a container restarts.
            self._stop("Pod", name, said, ("its status", "its events", "its containers' last log lines"))
        # A container verdict is judged on every pod change, a scheduler verdict once per verdict.
        for verdict, once in ((self.triage.containers(pod), True), (self.triage.verdict(pod), False)):
            if verdict is None:
                continue
            if not verdict.can_wait:
                self._stop("Pod", name, verdict, ("its status", "its events") if once else
                           ("its status", "its scheduling events", "its claims" if claims.waits_on_claims(verdict)
                            else "the nodes"))
            self._note_wait(name, verdict, once)

    def _judge_statuses(self, pods: Sequence[Obj]) -> None:
        """The Grove, LWS and Kueue objects below the DGD (:class:`holds.WorkloadStatuses`), while
        a pod is missing or not ready: a verdict waiting cannot help ends the wait, a wait is noted."""
        if self.statuses is None or (len(pods) >= sum(self.wanted.values()) and all(map(pod_ready, pods))):
            return
        for kind, name, verdict in self.statuses.verdicts():
            if not verdict.can_wait:
                self._stop(kind, name, verdict, (f"the status of {kind}/{name}",))
            self._note_wait(f"{kind}/{name}", verdict, True)

    def _judge_nodes(self, pods: Sequence[Obj]) -> None:
        """The nodes of the bound pods not ready: one down for ``failed_grace_s`` blocks the step."""
        now, down = clock.monotonic(), set()
        for pod in pods:
            node_name = (pod.get("spec") or {}).get("nodeName")
            if self.read_node is None or not node_name or pod_ready(pod) or pod["metadata"].get("deletionTimestamp"):
                continue
            read_at, node = self._nodes.get(node_name, (-NODE_EVERY_S, None))
            if now - read_at >= NODE_EVERY_S:
                try:
                    node = self.read_node(node_name)
                except Forbidden:  # the deployer may not read nodes: the pods' own words must do
                    self.read_node = None
                    return
                except KubeError:  # no answer this time (an API server restarting): read at the next look
                    continue
                self._nodes[node_name] = (now, node)
            # Lost (the kubelet stopped posting), or under pressure / not Ready by its own conditions.
            verdict = triage.node_lost(pod, node) or (node_judge.triage_node(node) if node is not None else None)
            if verdict is None:
                continue
            down.add(node_name)
            if now - self._node_down.setdefault(node_name, now) >= self.failed_grace_s:
                self._stop("Node", node_name, verdict, (f"node/{node_name}: its conditions and taints",))
        for gone in set(self._node_down) - down:  # back, or no pod of ours waits on it any more
            del self._node_down[gone]

    def _note_wait(self, pod: str, verdict: Verdict, once: bool) -> None:
        """Contention, an unclassified scheduler verdict or a pull being retried, recorded."""
        if once and self._waits.get(f"{pod}/{verdict.category}") == verdict.diagnosis:
            return
        self._waits[f"{pod}/{verdict.category}"] = verdict.diagnosis
        self.contention.append({**verdict.as_dict(), "at": clock.iso_now(), "next_check_at_s": verdict.next_check_s})



def _described(status: DgdStatus, st: Obj) -> str:
    """The wait's line on the DGD: its state, what the Ready condition's reason means on the
    current operator, and the components not fully scheduled (``scheduledReplicas``)."""
    desc = status.description
    said = operator_status.not_ready_reason(st)
    if said is not None and not status.done:
        desc += f": {said}"
    short = operator_status.unscheduled(st)
    return f"{desc} ({', '.join(short)})" if short else desc
