"""What the cluster's components say about a pod or a workload object, judged from their words alone.

Step 6 (docs/procedure.md; docs/triage.md) triages a pod that does not become ready from the words
of whoever refused it, and each speaker has its own wording: kube-scheduler (old and new), KAI and its binder, Volcano,
Kueue, the ResourceQuota and admission plugins (``FailedCreate`` on ReplicaSets and the like), the
refusals Grove and LWS relay, the operator, cluster-autoscaler, Karpenter and the kubelet. Each is
read by its structure (the reason, then the cause clause after a controller's wrapper), never by
one sample's whole text (docs/triage.md). :func:`judge` turns one reason and message into
:class:`Words`: a category, the speaker (a later word of the same speaker replaces its earlier
ones) and, for a shortage, the resources short. What pod and nodes add (a request no node could
ever hold, which taint, a missing GPU device plugin) is judged in :mod:`deploy_suite.judges.triage`.

Categories and the action each implies (the ``deploy-suite triage`` command prints both; the
table is in docs/triage.md):

* ``failed-deploy``, ``crash``: the candidate can never run as written: a failed attempt.
* ``contention``, ``provisioning``, ``gang``, ``pull-retry``: waiting can help (capacity held by
  others, a node or claim being made, a gang being assembled, a pull the kubelet retries).
* ``dependency``: a claim, quota, admission policy, Secret or registry access must be fixed first.
* ``platform``: the cluster itself is broken (a webhook or the operator unreachable, the GPU
  device plugin or runtime absent, a node down or cordoned): blocked, not the candidate's failure.
* ``unknown``: nothing here recognises the words; a person must read them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from deploy_suite.constants import WEBHOOK_UNREACHABLE
from deploy_suite.judges import operator_status, probes
from deploy_suite.vocab import Action, TriageCategory

ACTIONS: dict[TriageCategory, Action] = {
    TriageCategory.FAILED_DEPLOY: Action.FAILED_ATTEMPT, TriageCategory.CRASH: Action.FAILED_ATTEMPT,
    TriageCategory.CONTENTION: Action.WAIT, TriageCategory.PROVISIONING: Action.WAIT, TriageCategory.GANG: Action.WAIT,
    TriageCategory.PULL_RETRY: Action.WAIT,
    TriageCategory.DEPENDENCY: Action.FIX_DEPENDENCY,
    # A platform fault is a dependency of every candidate: someone fixes the cluster, then reruns.
    TriageCategory.PLATFORM: Action.FIX_DEPENDENCY,
    TriageCategory.UNKNOWN: Action.UNKNOWN,
}

# Speakers. Each judges a different thing, so a verdict combines the newest word of each.
SCHEDULER = "scheduler"      # existing nodes (kube-scheduler, KAI, Volcano)
GANG_SCHEDULER = "gang"      # the pod group as a whole (Volcano, KAI)
AUTOSCALER = "autoscaler"    # new nodes (cluster-autoscaler)
PROVISIONER = "provisioner"  # new nodes (Karpenter)
QUEUE = "queue"              # admission by quota queues (Kueue)
CREATE = "create"            # pod creation by a controller (ResourceQuota, admission webhooks, validation)
KUBELET = "kubelet"          # the node: volumes, images, containers
BINDER = "binder"            # KAI's binder: a pod placed by the scheduler, bound (GPU reservations) or not
OPERATOR = "operator"        # the Dynamo operator's objects (DGD, DCD)


@dataclass(frozen=True)
class Words:
    """One speaker's judgement: ``category``, ``why`` (a short phrase), ``capacity`` (resources
    named short, for the oversize check) and ``decisive`` (final whatever others say: a request
    larger than any node, an invalid template)."""

    category: TriageCategory
    speaker: str
    why: str
    capacity: tuple[str, ...] = ()
    decisive: bool = False


# A component of the platform does not answer: no candidate can fix that.
_PLATFORM = re.compile(
    WEBHOOK_UNREACHABLE + r"|no endpoints available for service|"
    r"failed to prepare dynamic resources|nvidia-container-cli|error running hook", re.IGNORECASE)

# Fragments of a scheduler's per-node reasons (kube-scheduler "<n> node(s) ...", Volcano "plugin X
# predicates failed ...", KAI "... didn't have enough resources: GPUs"), lowercased.
_SCHED_DEPENDENCY = (
    "unbound immediate persistentvolumeclaims", "unbound persistentvolumeclaims", "persistentvolumeclaim \"",
    "exceedsgpuquota", "exceeded quota",
)
# Storage that rules a node out: a dependency unless some other node is only short of capacity.
_SCHED_STORAGE = ("didn't find available persistent volumes", "volume node affinity conflict")
# Node health and cordons: the node is out for every pod; it may come back, but not by the candidate.
# kube-scheduler names the node's taint, KAI the node's condition ("node has NotReady condition").
_SCHED_PLATFORM = (
    "node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready", "node.kubernetes.io/network-unavailable",
    "node.kubernetes.io/unschedulable", "node.kubernetes.io/memory-pressure", "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/pid-pressure", "node.kubernetes.io/out-of-service", "were unschedulable",
    "node unregistered", "no nvidia device available", "node is unschedulable",
)
_KAI_NODE_CONDITION = re.compile(r"node has (notready|memorypressure|diskpressure|pidpressure|networkunavailable) "
                                 r"condition")
# KAI knows a node's GPU memory from GPU Feature Discovery's nvidia.com/gpu.memory label; a GPU-memory
# request sees every node without it as "not synced" (docs/triage.md).
_KAI_GPU_SYNC = "gpu memory count on the node was not synced"
NEVER_FITS = (
    "untolerated taint", "that the pod didn't tolerate", "didn't match pod's node affinity/selector",
    "didn't match node selector", "didn't match pod anti-affinity", "didn't match pod affinity",
    "didn't satisfy existing pods anti-affinity", "didn't match pod topology spread constraints (missing required",
)
# A shortage on a node that could take the pod: someone else holds it, waiting can help.
_SCHED_SHORT = re.compile(
    r"Insufficient ([\w./-]*[\w-])|(too many pods)|(didn't have free ports)|(exceed max volume count)|"
    r"(NodeUnfitPod)|(waiting for preemptible or free resource)|didn't have enough resources?: ([\w ./-]*\w)|"
    r"(cannot allocate all claims)", re.IGNORECASE)
# KAI names resources in words ("GPUs"); the oversize check reads the Kubernetes names.
_KAI_RESOURCES = {"gpus": "nvidia.com/gpu", "gpu": "nvidia.com/gpu", "cpu": "cpu", "memory": "memory"}


# What each shortage phrase (the regex's groups 2 to 8) is short of, as a person names it.
_SHORT_OF = {2: "pods", 3: "host ports", 4: "volume slots", 5: "devices (NodeUnfitPod)", 6: "free resources",
             8: "device claims"}


def _shortages(text: str) -> tuple[str, ...]:
    found: list[str] = []
    for match in _SCHED_SHORT.finditer(text):
        group = next(i for i, g in enumerate(match.groups(), 1) if g)
        name = match.group(group)
        found.append(_SHORT_OF.get(group) or (_KAI_RESOURCES.get(name.lower(), name) if group == 7 else name))
    return tuple(dict.fromkeys(found))


def scheduler_head(message: str) -> str:
    """The per-node reasons of a scheduler message, without the preemption tail and the DRA note
    (``... no new claims to deallocate, preemption: ...``) and the condition's ``Unschedulable:``."""
    head = message.split("preemption:", maxsplit=1)[0].removeprefix("Unschedulable:").strip()
    return head.removesuffix(",").replace("no new claims to deallocate", "").strip().rstrip(",").strip()


def judge_scheduler(message: str, speaker: str = SCHEDULER) -> Words:
    """A scheduler's "cannot place this pod" message, judged by its worst-for-waiting reason."""
    head = scheduler_head(message)
    low = head.lower()
    if "maxnodepoolresources" in low or re.search(r"no node in the .*node-pool has", low):
        # KAI: the request exceeds what any node of the pool has at all.
        return Words(TriageCategory.FAILED_DEPLOY,
                     speaker, "no node in the pool has the resources requested", decisive=True)
    if any(g in low for g in ("tasks in gang unschedulable", "are required for gang scheduling",
                              "pod group is not ready")):
        inner = re.split(r"origin reason is [^:]*:|cannot be scheduled due to:", head, flags=re.IGNORECASE)
        if len(inner) > 1:
            return judge_scheduler(inner[-1], GANG_SCHEDULER)
        return Words(TriageCategory.GANG, GANG_SCHEDULER, "the pod group waits for its gang (minAvailable not yet met)")
    dependency = [d for d in _SCHED_DEPENDENCY if d in low]
    if dependency:
        return Words(TriageCategory.DEPENDENCY, speaker, ", ".join(dependency))
    short = _shortages(head)
    if short:
        return Words(TriageCategory.CONTENTION, speaker, "short of " + ", ".join(short), capacity=short)
    storage = [d for d in _SCHED_STORAGE if d in low]
    if storage:
        return Words(TriageCategory.DEPENDENCY, speaker, ", ".join(storage))
    platform = [p for p in _SCHED_PLATFORM if p in low] + [m.group(0) for m in _KAI_NODE_CONDITION.finditer(low)]
    if platform:
        return Words(TriageCategory.PLATFORM, speaker, "nodes out of service: " + ", ".join(dict.fromkeys(platform)))
    if _KAI_GPU_SYNC in low:
        return Words(TriageCategory.PLATFORM, speaker, "no node has a GPU memory count the scheduler knows (GPU "
                     "Feature Discovery's nvidia.com/gpu.memory label missing, or no GPU node)")
    never = [n for n in NEVER_FITS if n in low]
    if never:
        return Words(TriageCategory.FAILED_DEPLOY, speaker, ", ".join(never))
    if "waiting for resource driver" in low:
        return Words(TriageCategory.PROVISIONING, speaker, "a resource driver is allocating the pod's claim")
    return Words(TriageCategory.UNKNOWN, speaker, "not a reason this triage knows")


def judge_autoscaler(reason: str, message: str) -> Words:
    """cluster-autoscaler: ``TriggeredScaleUp`` (a node is coming) or ``NotTriggerScaleUp`` with its
    per-node-group reasons."""
    if reason == "TriggeredScaleUp":
        return Words(TriageCategory.PROVISIONING, AUTOSCALER, "scale-up triggered")
    low = message.lower()
    # Limits and back-off of a group that could hold the pod: bounded waiting can help.
    bounded = [b for b in ("max node group size reached", "in backoff after failed scale-up",
                           "max cluster cpu, memory limits reached", "max cluster cpu limit reached",
                           "max cluster memory limit reached", "quota exceeded") if b in low]
    if bounded:
        return Words(TriageCategory.CONTENTION, AUTOSCALER, "no new node now: " + ", ".join(bounded))
    short = _shortages(message)
    if "wouldn't fit if a new node is added" in low and short:
        # Even an empty new node of every group is too small: the request is oversized.
        return Words(TriageCategory.FAILED_DEPLOY, AUTOSCALER, "no node group's new node could hold it: short of "
                     + ", ".join(short), capacity=short, decisive=True)
    words = judge_scheduler(message.split(":", 1)[-1], AUTOSCALER)
    if words.category in {TriageCategory.FAILED_DEPLOY, TriageCategory.UNKNOWN}:
        return Words(words.category, AUTOSCALER, f"no node group fits: {words.why}")
    return words


def judge_provisioner(reason: str, message: str) -> Words:
    """Karpenter: ``Nominated`` (a node or nodeclaim is made for the pod) or why no nodepool fits."""
    if reason == "Nominated":
        return Words(TriageCategory.PROVISIONING, PROVISIONER, "a node is being provisioned for the pod")
    low = message.lower()
    if "exceed limits for nodepool" in low or "would exceed" in low:
        return Words(TriageCategory.CONTENTION, PROVISIONER, "the nodepool's limits are reached")
    if "no instance type satisfied resources" in low:
        return Words(TriageCategory.FAILED_DEPLOY,
                     PROVISIONER, "no instance type any nodepool may launch holds the request",
                     decisive=True)
    if "did not tolerate" in low or "incompatible requirements" in low or "incompatible with" in low:
        return Words(TriageCategory.FAILED_DEPLOY,
                     PROVISIONER, "no nodepool is compatible with the pod's taints or requirements")
    return Words(TriageCategory.UNKNOWN, PROVISIONER, "not a reason this triage knows")


# Kueue's reasons for QuotaReserved=False, Admitted=False, Evicted=True and their events (docs/triage.md):
# the reason names the structure, the message the detail.
_QUEUE_REASONS: dict[str, tuple[TriageCategory, str]] = {
    "WaitingForQuota": (TriageCategory.CONTENTION, "the queue's quota is in use by other workloads"),
    "WaitingForPreemptedWorkloads": (TriageCategory.CONTENTION, "preempted workloads are releasing the quota"),
    "TopologyPlacementFailed": (TriageCategory.CONTENTION, "the topology domains are in use by other workloads"),
    "PendingEvaluation": (TriageCategory.CONTENTION, "the workload waits its turn in the queue"),
    "WaitingForPodsReady": (TriageCategory.CONTENTION, "earlier admitted workloads must become ready first"),
    "PreemptionGated": (TriageCategory.CONTENTION, "a preemption gate holds back the preemption it needs"),
    "Preempted": (TriageCategory.CONTENTION, "preempted by a workload of higher priority: it is requeued"),
    "UnsatisfiedAdmissionChecks": (TriageCategory.PROVISIONING, "its admission checks (capacity provisioning) "
                                                                "are not satisfied yet"),
    "PendingDelayedTopologyRequests": (TriageCategory.PROVISIONING, "its topology assignment is still pending"),
    "ExceedsMaxQuota": (TriageCategory.DEPENDENCY, "the request exceeds the queue's maximum quota: it can never be "
                                                   "admitted as configured"),
    "Misconfigured": (TriageCategory.DEPENDENCY, "its LocalQueue or ClusterQueue is missing or misconfigured"),
    "Inadmissible": (TriageCategory.DEPENDENCY, "its LocalQueue or ClusterQueue is missing or inactive"),
    "Suspended": (TriageCategory.DEPENDENCY, "its queue is stopped (stopPolicy): someone must resume it"),
    "ClusterQueueStopped": (TriageCategory.DEPENDENCY, "its ClusterQueue is stopped: someone must resume it"),
    "LocalQueueStopped": (TriageCategory.DEPENDENCY, "its LocalQueue is stopped: someone must resume it"),
    "NoMatchingFlavor": (TriageCategory.FAILED_DEPLOY, "no resource flavor of its queue matches its node selector "
                                                       "or tolerations"),
    "NodeFailures": (TriageCategory.PLATFORM, "its nodes failed"),
    "PodsReadyTimeout": (TriageCategory.UNKNOWN, "its pods were not ready within Kueue's waitForPodsReady timeout: "
                                                 "it is evicted and requeued; its pods' own words say why"),
    "Deactivated": (TriageCategory.UNKNOWN, "Kueue deactivated it (spec.active false): it is not admitted again "
                                            "until someone reactivates it; its earlier evictions say why"),
    "AdmissionCheck": (TriageCategory.UNKNOWN, "an admission check rejected it: the check's message says why"),
    "AdmissionCheckRejected": (TriageCategory.UNKNOWN, "an admission check rejected it: the check's message says why"),
}
# Kueue's success words (QuotaReserved, Admitted events and conditions).
_QUEUE_CLEARED = re.compile(r"^(quota reserved in clusterqueue|admitted by clusterqueue|the workload is admitted)",
                            re.IGNORECASE)


def _queue_reason(reason: str) -> tuple[TriageCategory, str] | None:
    """A Kueue reason, also as its event names it (``EvictedDueToPodsReadyTimeout``, ``Pending``)."""
    base = reason.removeprefix("EvictedDueTo").split("DueTo")[0]
    return _QUEUE_REASONS.get(base)


def judge_queue(message: str, reason: str = "") -> Words:
    """Kueue's words on a Workload: its reason (``WaitingForQuota``, ``ExceedsMaxQuota``, ...) when
    it is one of Kueue's, else the cause clauses of ``couldn't assign flavors ...``."""
    if _QUEUE_CLEARED.match(message.strip()):
        return Words(TriageCategory.CLEARED, QUEUE, "admitted")
    known = _queue_reason(reason)
    if known is not None:
        return Words(known[0], QUEUE, known[1], decisive=False)
    low = message.lower()
    if "insufficient unused quota" in low or "pending the preemption" in low:
        # Others hold the quota now; it frees when they finish (or are preempted).
        return Words(TriageCategory.CONTENTION, QUEUE, "the queue's quota is in use by other workloads")
    if any(w in low for w in ("insufficient quota", "unavailable in clusterqueue", "request > maximum capacity",
                              "doesn't exist", "is inactive", "not found", "is stopped",
                              "doesn't match clusterqueue selector")):
        return Words(TriageCategory.DEPENDENCY, QUEUE, "the queue's quota can never admit it as configured")
    if "doesn't match node affinity" in low or re.search(r"untolerated taint .* in flavor", low):
        # Every flavor it could use refuses its node selector or tolerations: a placement refusal.
        return Words(TriageCategory.FAILED_DEPLOY, QUEUE, "no resource flavor of its queue matches its node "
                     "selector or tolerations")
    return Words(TriageCategory.UNKNOWN, QUEUE, "not a reason this triage knows")


# The API server's field error (``<field path>: <type>: <detail>``), as webhooks relay it too.
_FIELD_ERROR = re.compile(r"[\w.\[\]/-]+: (invalid value|required value|not found|unsupported value|duplicate value|"
                          r"too long|too many)\b")
_RUNTIME_CLASS = re.compile(r"runtimeclass \"[^\"]*\" not found", re.IGNORECASE)


def judge_create(message: str) -> Words:
    """A controller could not create a pod (``FailedCreate``) or an object was refused on create."""
    low = message.lower()
    if "exceeded quota" in low or "failed quota" in low:
        return Words(TriageCategory.DEPENDENCY, CREATE, "a ResourceQuota refuses the pod")
    if re.search(r"user \"[^\"]*\" cannot \w+ resource", low):
        # RBAC refuses the controller itself (the operator's or the platform's service account).
        return Words(TriageCategory.PLATFORM, CREATE, "the controller's own permissions (RBAC) refuse it")
    if "vdynamographdeployment" in low and "denied the request" in low and "immutable" not in low:
        # The operator's own webhook judges the candidate's spec (docs/triage.md): its manifest is wrong.
        return Words(TriageCategory.FAILED_DEPLOY,
                     CREATE, "the operator's webhook refuses the DGD's spec", decisive=True)
    if "denied the request" in low:
        cause = low.split("denied the request", 1)[1]
        if "immutable" not in cause and _FIELD_ERROR.search(cause):
            # A webhook (LWS's, Grove's) refusing a field of the spec the candidate's DGD produced.
            return Words(TriageCategory.FAILED_DEPLOY, CREATE, "an admission webhook refuses a field of the spec",
                         decisive=True)
        return Words(TriageCategory.DEPENDENCY, CREATE, "an admission webhook refuses it")
    if _RUNTIME_CLASS.search(message):
        return Words(TriageCategory.PLATFORM, CREATE, "the RuntimeClass the pod names does not exist in the cluster")
    if "violates podsecurity" in low or "error looking up service account" in low or "limitrange" in low or \
            re.search(r"(maximum|minimum) .* usage per (container|pod)", low):
        return Words(TriageCategory.DEPENDENCY,
                     CREATE, "a namespace policy (pod security, service account, limit range) refuses it")
    if "invalid value" in low or "is invalid" in low or "required value" in low or "must be" in low:
        return Words(TriageCategory.FAILED_DEPLOY, CREATE, "the pod template is invalid", decisive=True)
    if "forbidden" in low:
        return Words(TriageCategory.DEPENDENCY, CREATE, "an admission plugin forbids it")
    return Words(TriageCategory.UNKNOWN, CREATE, "not a reason this triage knows")


def judge_operator(message: str) -> Words | None:
    """The Dynamo operator's words on a DGD or DCD (docs/triage.md lists them). Its reconcile
    errors are told apart by :mod:`deploy_suite.judges.operator_status`, the one table of them that step
    6's DGD wait also reads: known-permanent ones by what fixes them, a retried 409 as no verdict."""
    permanent = operator_status.permanent_error(message)
    if permanent is not None:  # operator_status's categories are this module's
        return Words(permanent, OPERATOR, "a reconcile error no later reconcile clears",
                     decisive=permanent == TriageCategory.FAILED_DEPLOY)
    if operator_status.TRANSIENT_ERRORS.search(message):
        return None  # written as failed until the next reconcile (docs/operator-generations.md)
    low = message.lower()
    if "persistentvolumeclaims" in low and "not found" in low:
        return Words(TriageCategory.DEPENDENCY, OPERATOR, "a PVC the DGD names does not exist")
    if "error creating" in low or "forbidden" in low or "invalid value" in low or "denied the request" in low:
        words = judge_create(message)
        return Words(words.category, OPERATOR, words.why, decisive=words.decisive)
    if "image" in low and re.search(r"\b(401|403)\b|unauthori[sz]ed|denied", low):
        return Words(TriageCategory.DEPENDENCY,
                     OPERATOR, "the registry refuses the operator's image check (credentials)")
    return None


_PULL_EVENT = re.compile(r"failed to pull|error: (errimagepull|imagepullbackoff)|back-off pulling image",
                         re.IGNORECASE)
# The kubelet's eviction of a pod over its own limits (not the node's pressure): the candidate's spec.
_OWN_LIMIT = re.compile(r"exceeds the total limit of containers|exceeded its local ephemeral storage limit|"
                        r"usage of emptydir volume \S+ exceeds the limit", re.IGNORECASE)
_CONFIG = re.compile(r"couldn't find key|secret \"[^\"]*\" not found|configmap \"[^\"]*\" not found",
                     re.IGNORECASE)


def judge_kubelet(reason: str, message: str, count: int = 1) -> Words | None:
    """The kubelet's Warning events on a pod (images are judged with its pull rules in triage)."""
    node = judge_node(reason, message)
    if node is not None:
        return node
    if _CONFIG.search(message):
        return Words(TriageCategory.DEPENDENCY, KUBELET, "a referenced Secret, ConfigMap or key is missing")
    if reason == "BackOff" and "restarting failed container" in message:
        # The first restart may recover (docs/procedure.md, step 6): final only once it repeats.
        return Words(TriageCategory.CRASH, KUBELET, "crash loop", decisive=True) if count >= 2 else None
    if reason == "Evicted" and _OWN_LIMIT.search(message):
        return Words(TriageCategory.CRASH, KUBELET, "evicted for exceeding its own ephemeral-storage limit (the "
                     "component's resources.limits.ephemeral-storage or an emptyDir sizeLimit)", decisive=True)
    said = probes.judge_eviction(message) if reason == "Evicted" else probes.judge_probe(reason, message, count)
    if said is not None:
        return Words(said.category, KUBELET, said.why, decisive=said.decisive)
    if reason == "Evicted":
        return Words(TriageCategory.UNKNOWN,
                     KUBELET, "evicted by the node for a cause not classified: its controller recreates it")
    if _MULTI_ATTACH.search(message):
        # The attach/detach controller: a single-node volume held by pods elsewhere (it names them),
        # or attached to a node with no pod known (a node that left without detaching).
        return Words(TriageCategory.FAILED_DEPLOY, KUBELET, "a ReadWriteOnce volume is used by other pods on another "
                     "node: give the claim ReadWriteMany, or one pod") if "already used by pod" in message else \
            Words(TriageCategory.PLATFORM, KUBELET, "the volume is still attached to another node (a node that left "
                  "without detaching it): detach it or recover the node")
    if reason in {"FailedMount", "FailedAttachVolume"}:
        return Words(TriageCategory.UNKNOWN, KUBELET, "a volume is not mounted yet")
    return None


_MULTI_ATTACH = re.compile(r"multi-attach error for volume", re.IGNORECASE)


# The runtime's cause clause after "Failed to create pod sandbox:": the node lacks the handler the
# pod's RuntimeClass names (the GPU runtime not configured), or its network plugin fails.
_SANDBOX_PLATFORM = re.compile(r"no runtime for \"[^\"]*\" is configured|runtimehandler \"[^\"]*\" not supported|"
                               r"failed to (setup|set up) network for sandbox|networkplugin \w+ failed|"
                               r"cni plugin not initialized|failed to get sandbox runtime", re.IGNORECASE)
# Kubelet admission (a pod Failed on the node it was bound to): the node's own count of devices or
# resources disagrees with the scheduler's, or its labels changed (reason OutOf<resource>,
# UnexpectedAdmissionError, NodeAffinity...): the node's fault, the pod is recreated elsewhere.
_ADMISSION_REASONS = re.compile(r"^(OutOf[\w./-]+|UnexpectedAdmissionError|NodeAffinity|NodeSelectorMismatching|"
                                r"InvalidNodeInfo|UnexpectedPredicateFailureType)$")


# A container the kubelet could not find when the pod ended (its node lost, the pod deleted): exit 137
# without an OOM kill or the candidate's own doing.
LOST_CONTAINER = "ContainerStatusUnknown"


def judge_node(reason: str, message: str) -> Words | None:
    """The kubelet creating a pod's sandbox or admitting the pod, judged by its cause clause."""
    if _ADMISSION_REASONS.match(reason):
        return Words(TriageCategory.PLATFORM, KUBELET, f"the node's kubelet refused the pod at admission ({reason}): "
                     "its devices or labels disagree with what the scheduler saw")
    if reason == LOST_CONTAINER:
        return Words(TriageCategory.PLATFORM, KUBELET, "the kubelet lost the container (its node failed or restarted, "
                     "or the pod was deleted under it): not the candidate's; delete the pod or fix the node")
    if reason == "FailedCreatePodSandBox" or "failed to create pod sandbox" in message.lower():
        if _SANDBOX_PLATFORM.search(message):
            return Words(TriageCategory.PLATFORM, KUBELET,
                         "the node cannot create the pod's sandbox (runtime handler or network)")
        return Words(TriageCategory.UNKNOWN, KUBELET, "the pod's sandbox is not created, for a cause not classified")
    if _RUNTIME_CLASS.search(message):
        return Words(TriageCategory.PLATFORM, CREATE, "the RuntimeClass the pod names does not exist in the cluster")
    return None


def is_platform(message: str) -> bool:
    """The words of a platform component failing (a webhook unreachable, the GPU runtime)."""
    return bool(_PLATFORM.search(message))


def is_pull_failure(message: str) -> bool:
    return bool(_PULL_EVENT.search(message))


_SCHEDULER_REASONS = frozenset({"FailedScheduling", "Unschedulable", "PodSchedulingErrors", "NotEnoughResources",
                                "UnschedulableOnNodePool"})
_SCHEDULER_WORDS = re.compile(r"nodes are (un)?available|tasks in gang|pod group is not ready")
# A controller relaying the API server's or a webhook's refusal under a reason of its own (Grove's
# PodCreateFailed, PodCliqueCreateOrUpdateFailed, PodGangCreateOrUpdateFailed, KAIBackendMappingFailed).
_RELAYED = re.compile(r"^(FailedCreate|ReplicaFailure|\w*(Create|Update|Delete|Sync|Mapping)\w*Failed)$")
# Reasons other controllers use too (the Job controller's "Suspended"): Kueue's only with its words.
_GENERIC_REASONS = frozenset({"Pending", "Suspended", "Preempted", "Deactivated", "NodeFailures"})
_QUEUE_WORDS = re.compile(r"couldn't assign flavors|\b(LocalQueue|ClusterQueue)\b|\bworkload\b", re.IGNORECASE)
# Words on a gang or a placement that say what is waiting, not why (KAI's PodGroup events, Grove's).
_GANG_WORDS: dict[str, tuple[TriageCategory, str, str]] = {
    "NotReady": (TriageCategory.GANG, GANG_SCHEDULER, "the pod group waits for its members to be created"),
    "StaleJob": (TriageCategory.UNKNOWN, GANG_SCHEDULER, "members of its gang died (failed or deleted): the scheduler "
                                                         "evicts the rest; the dead pods' words say why"),
    "Pipelined": (TriageCategory.CONTENTION, SCHEDULER, "pipelined: it waits for resources being released on a node"),
    "AllScheduledReplicasLost": (TriageCategory.UNKNOWN, CREATE, "all its scheduled pods were lost (node failures, "
                                                                 "evictions): the pods' and nodes' words say why"),
    "VolcanoCapabilityUnavailable": (TriageCategory.PLATFORM, CREATE, "Grove's Volcano backend lacks a capability "
                                                                      "the workload needs"),
}


def judge_relayed(message: str, speaker: str = CREATE) -> Words | None:
    """A refusal a controller relays, judged by its cause clause (:func:`judge_create`); None for a
    conflict the controller retries by itself."""
    if operator_status.TRANSIENT_ERRORS.search(message):
        return None
    if _PLATFORM.search(message):
        return Words(TriageCategory.PLATFORM, speaker, "a platform component fails (a webhook or a DRA driver)")
    said = judge_create(message)
    return Words(said.category, speaker, said.why, decisive=said.decisive)


def judge_binding(message: str) -> Words:
    """KAI's binder: ``Failed to bind pod ns/x to node n: <cause>``, judged by the cause."""
    low = message.lower()
    if "cluster is scaling up" in low:
        return Words(TriageCategory.PROVISIONING, BINDER, "the cluster is scaling up: the GPU reservation waits for it")
    if "denied the request" in low or "forbidden" in low:
        return judge_relayed(message, BINDER) or Words(TriageCategory.UNKNOWN, BINDER, "a bind refused")
    if re.search(r"reserv(e|ation)", low):
        # The binder's GPU-sharing reservation pods on the node (docs/triage.md): the scheduler's
        # view of the node's GPUs and the node's disagree.
        return Words(TriageCategory.PLATFORM, BINDER, "the binder cannot reserve the node's GPUs (its reservation "
                     "pods): the node's GPUs and the scheduler's view of them disagree")
    return Words(TriageCategory.UNKNOWN, BINDER, "the bind failed for a cause not classified")


def _judge_other(reason: str, message: str) -> Words | None:
    """The words of the binder, the gang schedulers and Kueue (None: not theirs)."""
    if reason in {"BindingError", "FailedBinding"}:
        return judge_binding(message)
    if reason == "Bound":
        return Words(TriageCategory.CLEARED, BINDER, reason)
    if reason in _GANG_WORDS and (reason != "NotReady" or "not ready for scheduling" in message):
        category, speaker, why = _GANG_WORDS[reason]
        return Words(category, speaker, why)
    if reason in {"Preempted", "Evict"} and "preempted" in message.lower():
        speaker = QUEUE if _QUEUE_WORDS.search(message) else SCHEDULER
        return Words(TriageCategory.CONTENTION, speaker, "preempted by a workload of higher priority")
    if "couldn't assign flavors" in message or reason in {"QuotaReserved", "Admitted"} or \
            (_queue_reason(reason) is not None and (reason not in _GENERIC_REASONS or _QUEUE_WORDS.search(message))):
        return judge_queue(message, reason)
    return None


def judge(reason: str, message: str, count: int = 1) -> Words | None:
    """The judgement of one event's (or condition's) reason and message; None when it says nothing
    about why an object is not ready (``Pulled``, ``Started``, ``ScalingReplicaSet`` ...)."""
    if _RELAYED.match(reason):
        return judge_relayed(message)
    if operator_status.permanent_error(message) is not None:
        return judge_operator(message)
    if _PLATFORM.search(message):
        return Words(TriageCategory.PLATFORM, _speaker_of(reason, message),
                     "a platform component fails (a webhook, the operator, the GPU runtime or a DRA driver)")
    if reason in {"Scheduled", "SuccessfulCreate"}:
        return Words(TriageCategory.CLEARED, SCHEDULER if reason == "Scheduled" else CREATE, reason)
    if reason in {"TriggeredScaleUp", "NotTriggerScaleUp"}:
        return judge_autoscaler(reason, message)
    if reason == "Nominated" or (reason == "FailedScheduling" and _is_karpenter(message)):
        return judge_provisioner(reason, message)
    other = _judge_other(reason, message)
    if other is not None:
        return other
    if reason in _SCHEDULER_REASONS or _SCHEDULER_WORDS.search(message):
        return judge_scheduler(message)
    if reason == "SchedulingGated":
        return Words(TriageCategory.GANG, GANG_SCHEDULER, "scheduling gated until its gang is created")
    if message.startswith("Error creating") or "denied the request" in message or "exceeded quota" in message:
        return judge_create(message)
    if reason == "ReconcileError" or (reason.startswith("Failed") and "reconcile" in message.lower()):
        if operator_status.TRANSIENT_ERRORS.search(message):
            return None  # a conflict the operator retries by itself
        return judge_operator(message) or Words(TriageCategory.UNKNOWN, OPERATOR, "a reconcile error")
    return judge_kubelet(reason, message, count)


def _is_karpenter(message: str) -> bool:
    low = message.lower()
    return "nodepool" in low or "nodeclaim" in low or "provisioner \"" in low or "instance type" in low


def _speaker_of(reason: str, message: str) -> str:
    if reason in {"FailedCreate", "ReplicaFailure"} or message.startswith("Error creating"):
        return CREATE
    if reason in {"BindingError", "FailedBinding"}:
        return BINDER
    return KUBELET if reason in {"Failed", "FailedMount", "FailedPrepareDynamicResources"} else OPERATOR
