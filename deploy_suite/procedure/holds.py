"""The reads behind step 4's and step 6's pod verdicts that the watched pods alone cannot give.

* :class:`ClaimHolds`: a pod the scheduler holds on its unbound claims (``pod has unbound immediate
  PersistentVolumeClaims``) is judged by those claims (:func:`claims.claim_wait`): a claim still being
  bound or provisioned is a wait bounded by ``claim_bound_s``, whatever the identity could read
  in step 4; a claim's final word (a StorageClass that does not exist, an access mode its
  provisioner refuses) stops the wait at once with the claim's class (:func:`conditions.claim_stop`);
* :class:`KubeletWords`: a scheduled pod that is not ready, judged with its own events
  (:func:`objects.triage_pod`): the prober's ``Unhealthy`` and the kubelet's ``Killing`` (a startup
  probe that kills it each time), ``Multi-Attach`` (:func:`claims.attach_wait`), an eviction;
* :class:`WorkloadStatuses`: the Grove (PodCliqueSet, PodClique, PodGang), LeaderWorkerSet and Kueue
  Workload objects of a DGD, judged by :func:`objects.triage_object` (``judges.statuses``).

Each read happens at a modest rate (docs/procedure.md, step 6); a refused or failed read gives no
verdict. ``stopped`` keeps the verdict that ended a wait, for the ledger's troubleshooting shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from deploy_suite import clock
from deploy_suite.access.kube import Kube, Obj
from deploy_suite.constants import LABEL_DGD_NAME
from deploy_suite.errors import Forbidden, KubeError, NotFound
from deploy_suite.judges import claims, conditions, objects, signatures
from deploy_suite.judges.conditions import unschedulable
from deploy_suite.judges.membership import pod_ready
from deploy_suite.judges.triage import Verdict
from deploy_suite.vocab import TriageCategory

# A pod held on its unbound claims reads them (and their events) again at most this often.
CLAIM_EVERY_S = 5.0
# The workload objects below a DGD are read again at most this often while a pod is missing or not ready.
STATUS_EVERY_S = 10.0
# The objects the orchestrators write between a DGD and its pods, with a status of their own (kind,
# its API version): Grove's, LeaderWorkerSet's, Kueue's.
WORKLOAD_KINDS = (("PodCliqueSet", "grove.io/v1alpha1"), ("PodClique", "grove.io/v1alpha1"),
                  ("PodGang", "scheduler.grove.io/v1alpha1"), ("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1"),
                  ("Workload", "kueue.x-k8s.io/v1beta1"))


@dataclass(frozen=True)
class Stopped:
    """The verdict that ended a wait, on which object, and what was read to reach it."""

    kind: str
    name: str
    verdict: Verdict
    checked: tuple[str, ...] = ()


class ClaimHolds:
    """Pods held on their unbound claims: since when, the scheduler's verdict, the claims' last reading."""

    def __init__(self, kube: Kube, namespace: str, claim_bound_s: float = 600.0) -> None:
        self.kube = kube
        self.namespace = namespace
        self.claim_bound_s = claim_bound_s
        self._held: dict[str, tuple[float, Verdict]] = {}
        self._read: dict[str, tuple[float, Verdict]] = {}
        self.stopped: Stopped | None = None

    def judge(self, pod: Obj, said: Verdict | None) -> Verdict | None:
        """The pod's verdict: ``said`` (the scheduler's, None when nothing new), or on unbound
        claims the claims' own (read at most every CLAIM_EVERY_S), bounded by ``claim_bound_s``."""
        name = str(pod["metadata"]["name"])
        if said is not None and claims.waits_on_claims(said):
            self._held[name] = (self._held.get(name, (clock.monotonic(), said))[0], said)
        elif said is not None or unschedulable(pod) is None:
            self._held.pop(name, None)
            return said
        if name not in self._held:
            return said
        since, scheduler = self._held[name]
        now = clock.monotonic()
        read_at, judged = self._read.get(name, (None, None))
        if read_at is None or judged is None or now - read_at >= CLAIM_EVERY_S:
            judged = self._claims(pod, scheduler)
            self._read[name] = (now, judged)
        if judged.can_wait and now - since >= self.claim_bound_s:
            return Verdict(TriageCategory.DEPENDENCY, f"pod {name}: its PersistentVolumeClaim(s) "
                           f"{', '.join(claims.claims_of(pod))} not bound within {self.claim_bound_s:.0f}s "
                           "(timeouts.pvc_bound_s), though nothing said they failed: a dependency, not the "
                           "candidate's: fix the storage class or its provisioner (waiting longer does not help); "
                           f"{judged.diagnosis}", judged.evidence)
        return judged

    def _claims(self, pod: Obj, scheduler: Verdict) -> Verdict:
        held: dict[str, tuple[Obj | None, Sequence[Obj]]] = {}
        try:
            for claim in claims.claims_of(pod):
                held[claim] = (self.kube.get_or_none("PersistentVolumeClaim", claim, self.namespace),
                               self.kube.events_for(claim, self.namespace, "PersistentVolumeClaim"))
        except KubeError as exc:  # no answer now: the claims are read again at the next look
            return Verdict(TriageCategory.PROVISIONING, f"its claims could not be read ({exc}): waiting",
                           list(scheduler.evidence), can_wait=True)
        judged = claims.claim_wait(scheduler, held)
        if not judged.can_wait and judged is not scheduler:  # the claim's own final word, not a missing claim
            final = next((c for c, (pvc, events) in held.items()
                          if (v := claims.triage_claim(c, pvc, events)) is not None and not v.can_wait), "")
            self.stopped = Stopped("PersistentVolumeClaim", final or str(pod["metadata"]["name"]), judged,
                                   tuple(f"claim {c}: its status and {len(e)} event(s)" for c, (_, e) in held.items()))
            conditions.claim_stop(judged, [e for _, events in held.values() for e in events])
        return judged


def _own(pod: Obj, events: Sequence[Obj]) -> list[Obj]:
    """The events of this pod, not of an earlier pod of the same name (a StatefulSet's, LWS's)."""
    uid = (pod.get("metadata") or {}).get("uid")
    return [objects.normalized(e) for e in events
            if not uid or not (e.get("involvedObject") or e.get("regarding") or {}).get("uid")
            or (e.get("involvedObject") or e.get("regarding") or {}).get("uid") == uid]


def _ended(pod: Obj) -> str:
    """The pod's containers' terminations, one stamp (it changes when one ends anew)."""
    status = pod.get("status") or {}
    return " ".join(f"{cs.get('name')}/{cs.get('restartCount')}/{signatures.termination(cs).get('finishedAt')}"
                    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
                    if signatures.termination(cs))


class KubeletWords:
    """A scheduled pod not ready, judged with its own events (the prober's ``Unhealthy``, the
    kubelet's ``Killing``: :func:`objects.triage_pod` through ``words.judge_kubelet``). Its events
    are read when its containers end anew (``Killing`` is a Normal event: a startup probe's kill
    shows as the termination that follows); the Warnings about it come with the wait's own watch."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self._read: dict[str, tuple[str, list[Obj]]] = {}  # pod -> (terminations when read, its events)
        self._said: dict[str, tuple[str, Verdict | None]] = {}

    def verdict(self, pod: Obj, warnings: Sequence[Obj], logs: Mapping[str, Sequence[str]]) -> Verdict | None:
        """The pod's verdict from its events, or None (ready, not scheduled, nothing said)."""
        meta = pod.get("metadata") or {}
        name = str(meta.get("name"))
        if pod_ready(pod) or meta.get("deletionTimestamp") or not (pod.get("spec") or {}).get("nodeName"):
            self._said.pop(name, None)
            return None
        warned = _own(pod, [e for e in warnings if (e.get("involvedObject") or {}).get("kind") == "Pod"
                            and (e.get("involvedObject") or {}).get("name") == name])
        ended = _ended(pod)
        if not ended and not warned:
            return None
        if ended and self._read.get(name, ("", []))[0] != ended:
            try:
                self._read[name] = (ended, _own(pod, self.kube.events_for(name, self.namespace)))
            except KubeError:  # read again at the next change
                return None
        read = self._read.get(name, ("", []))[1]
        known = {str((e.get("metadata") or {}).get("name")) for e in warned}
        events = [*[e for e in read if str((e.get("metadata") or {}).get("name")) not in known], *warned]
        stamp = " ".join([ended, *(f"{(e.get('metadata') or {}).get('name')}/{e.get('count')}" for e in events)])
        if name in self._said and self._said[name][0] == stamp:
            return self._said[name][1]
        said = objects.triage_pod(pod, name, events, logs=logs)
        if said is not None and said.category == TriageCategory.FAILED_DEPLOY:
            said = claims.attach_wait(said, self._pods())
        self._said[name] = (stamp, said)
        return said

    def _pods(self) -> list[Obj]:
        try:
            return self.kube.list_items("Pod", self.namespace)[0]
        except KubeError:
            return []


@dataclass
class WorkloadStatuses:
    """The DGD's Grove, LWS and Kueue objects, read at most every STATUS_EVERY_S and judged by
    their kind, type and reason; a kind this cluster does not serve, or this identity may not read,
    is not read again."""

    kube: Kube
    namespace: str
    dgd: str
    components: Sequence[str]
    kinds: list[tuple[str, str]] = field(default_factory=lambda: list(WORKLOAD_KINDS))
    _read_at: float | None = None
    _found: list[tuple[str, str, Verdict]] = field(default_factory=list)

    def verdicts(self) -> list[tuple[str, str, Verdict]]:
        """(kind, name, verdict) of each of the DGD's workload objects that has one."""
        now = clock.monotonic()
        if self._read_at is not None and now - self._read_at < STATUS_EVERY_S:
            return self._found
        self._read_at, found = now, []
        for kind, api_version in list(self.kinds):
            try:
                items = self.kube.list_items(self.kube.resource(api_version, kind), self.namespace)[0]
            except (Forbidden, NotFound):  # not served here, or not this identity's to read
                self.kinds.remove((kind, api_version))
                continue
            except KubeError:
                continue
            for obj in items:
                name = str((obj.get("metadata") or {}).get("name"))
                if not self._mine(kind, obj, name):
                    continue
                verdict = objects.triage_object(kind, name, obj, [])
                if verdict is not None:
                    found.append((kind, name, verdict))
        self._found = found
        return found

    def _mine(self, kind: str, obj: Obj, name: str) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL_DGD_NAME) == self.dgd:
            return True
        if kind == "Workload":  # Kueue names a pod's Workload after its owner: pod-<owner>-<hash>
            return any(o.get("name", "").startswith(f"{self.dgd}-") for o in
                       (obj.get("metadata") or {}).get("ownerReferences") or [])
        return conditions.is_child(self.dgd, self.components, kind, name)
