"""The status conditions of the workload objects below a DGD, judged by their kind, type and reason.

Grove (PodCliqueSet, PodClique, PodCliqueScalingGroup, PodGang), LeaderWorkerSet and Kueue's
Workload each write conditions of their own. Some name a cause (Kueue's ``QuotaReserved=False``
reasons, Grove's ``TopologyLevelsUnavailable``); others only count pods (Grove's
``MinAvailableBreached``/``PodCliqueScheduled``, LWS's ``Available``/``Progressing``, a PodGang's
``Initialized``): those carry no cause of their own (their pods' words do) and give no verdict.
Grove's ``status.lastErrors`` relay the API server's refusal in their cause clause. The table of
what each means is in docs/triage.md. Pure: plain JSON dicts in, :class:`words.Words` out.
"""

from __future__ import annotations

import re

from deploy_suite.constants import ObjView
from deploy_suite.judges import words
from deploy_suite.judges.words import Words
from deploy_suite.vocab import TriageCategory

GROVE_KINDS = frozenset({"PodCliqueSet", "PodClique", "PodCliqueScalingGroup", "PodGang"})
# Conditions that count pods or replicas and name no cause: the pods' own words say why.
_SUMMARIES: dict[str, frozenset[str]] = {
    "PodClique": frozenset({"MinAvailableBreached", "PodCliqueScheduled"}),
    "PodCliqueScalingGroup": frozenset({"MinAvailableBreached", "GangTerminationInProgress"}),
    "PodCliqueSet": frozenset(),
    "PodGang": frozenset({"Initialized", "Scheduled", "Ready", "Unhealthy", "DisruptionTarget"}),
    "LeaderWorkerSet": frozenset({"Available", "Progressing", "UpdateInProgress"}),
    "Workload": frozenset({"PodsReady", "Requeued", "Finished", "WaitingForReplacementPods"}),
}
# Grove's PodCliqueSet TopologyLevelsUnavailable (True, or Unknown with a reason): the DGD's topology
# constraints against the cluster's ClusterTopologyBinding and Grove's configuration.
_TOPOLOGY: dict[str, tuple[TriageCategory, str]] = {
    "ClusterTopologyLevelsUnavailable": (TriageCategory.FAILED_DEPLOY, "its topology constraints name levels the "
                                                                       "cluster's ClusterTopologyBinding lacks"),
    "TopologyNameMissing": (TriageCategory.FAILED_DEPLOY, "its topology constraints name no topology"),
    "ClusterTopologyNotFound": (TriageCategory.DEPENDENCY, "the ClusterTopologyBinding its topology constraints "
                                                           "name does not exist"),
    "TopologyAwareSchedulingDisabled": (TriageCategory.PLATFORM, "Grove's topology-aware scheduling is disabled: "
                                                                 "its topology constraints would be ignored"),
}
# Grove's GroveError text: "[Operation: <op>, Code: <code>] message: <message>[, cause: <cause>]".
_GROVE_ERROR = re.compile(r"\[Operation: [^,\]]*, Code: [^\]]*\] message: (?P<message>.*?)(?:, cause: (?P<cause>.*))?$",
                          re.DOTALL)


def judge_condition(kind: str, cond: ObjView) -> tuple[bool, Words | None]:
    """``(known, words)``: whether this kind's condition is one this module reads, and its verdict
    (None: no cause of its own, or nothing wrong). Unknown conditions are left to the generic rules."""
    type_, status = str(cond.get("type") or ""), str(cond.get("status") or "")
    reason, message = str(cond.get("reason") or ""), str(cond.get("message") or "")
    if type_ in _SUMMARIES.get(kind, frozenset()):
        return True, None
    if kind == "PodCliqueSet" and type_ == "TopologyLevelsUnavailable":
        known = _TOPOLOGY.get(reason)
        if status == "False" or known is None:
            return True, None
        return True, Words(known[0], words.CREATE, known[1])
    if kind == "Workload":
        return True, _workload(type_, status, reason, message)
    return False, None


def _workload(type_: str, status: str, reason: str, message: str) -> Words | None:
    """Kueue's conditions on a Workload: the reason names the structure (:func:`words.judge_queue`)."""
    if type_ in {"QuotaReserved", "Admitted"} and status == "False":
        if reason == "NoReservation":
            return None  # QuotaReserved says why
        return words.judge_queue(message, reason)
    if type_ == "Evicted" and status == "True":
        return words.judge_queue(message, reason)
    if type_ == "Preempted" and status == "True":
        return Words(TriageCategory.CONTENTION, words.QUEUE, "preempted by a workload of higher priority: requeued")
    if type_ in {"DeactivationTarget", "BlockedOnPreemptionGates"} and status == "True":
        return words.judge_queue(message, "Deactivated" if type_ == "DeactivationTarget" else "PreemptionGated")
    return None


def last_error(description: str) -> Words | None:
    """One of Grove's ``status.lastErrors``: judged by its cause clause (the API server's or a
    webhook's words it relays), else its message; None for a conflict Grove retries."""
    found = _GROVE_ERROR.search(description)
    cause = (found.group("cause") or found.group("message")) if found else description
    return words.judge_relayed(cause)
