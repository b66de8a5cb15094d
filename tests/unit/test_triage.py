"""Pending-pod triage classifies by the scheduler's words; messages below are real 1.36 events."""

from __future__ import annotations

from typing import Any

import pytest

from deploy_suite import clock
from deploy_suite.access.kube import DGD, KNOWN
from deploy_suite.errors import StepBlocked, StepFailure, WaitTimeout
from deploy_suite.judges import triage, wait_signs
from deploy_suite.model.scheduling import pod_request, quantity
from deploy_suite.procedure import waits
from deploy_suite.procedure.smoke import parse_instance_id
from deploy_suite.vocab import BlockerClass, TriageCategory
from tests import fakekube

TAINT_AND_SELECTOR = ("0/4 nodes are available: 1 node(s) had untolerated taint(s), 3 node(s) didn't match Pod's "
                      "node affinity/selector. no new claims to deallocate, preemption: 0/4 nodes are available: "
                      "4 Preemption is not helpful for scheduling.")
INSUFFICIENT = ("0/4 nodes are available: 1 node(s) had untolerated taint(s), 1 node(s) didn't match Pod's node "
                "affinity/selector, 2 Insufficient nvidia.com/gpu. no new claims to deallocate, preemption: 0/4 "
                "nodes are available: 2 No preemption victims found for incoming pod, 2 Preemption is not helpful "
                "for scheduling.")
UNBOUND = "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/4 nodes"


def node(name, gpus=8, labels=None, taints=None):
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": taints or []},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


NODES = [node("h200-0", labels={"p": "h200"}), node("h200-1", labels={"p": "h200"}),
         node("h100-0", labels={"p": "h100"}, taints=[{"key": "example.com/reserved-for", "value": "tenant-b",
                                                       "effect": "NoSchedule"}]),
         node("cpu-0", gpus=0)]


def pod(gpus=1, selector=None, tolerations=None):
    return {"metadata": {"name": "w-0"}, "spec": {"nodeSelector": selector or {}, "tolerations": tolerations or [],
                                                  "containers": [{"name": "main", "resources": {
                                                      "limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def ev(message):
    return [{"reason": "FailedScheduling", "message": message}]


def test_an_untolerated_taint_is_a_failed_deploy_that_names_the_taint():
    v = triage.triage_pending(pod(selector={"p": "h100"}), ev(TAINT_AND_SELECTOR), NODES)
    assert v is not None and v.category == TriageCategory.FAILED_DEPLOY and not v.can_wait
    assert "example.com/reserved-for=tenant-b:NoSchedule" in v.diagnosis and "h100-0" in v.diagnosis


def test_insufficient_gpus_on_eligible_nodes_is_contention_with_a_next_check():
    v = triage.triage_pending(pod(gpus=8, selector={"p": "h200"}), ev(INSUFFICIENT), NODES)
    assert v is not None and v.category == TriageCategory.CONTENTION and v.can_wait and v.next_check_s == 30.0
    assert "waiting for capacity (nvidia.com/gpu) on otherwise-eligible nodes" in v.diagnosis


def test_a_request_no_eligible_node_can_hold_is_a_failed_deploy_not_contention():
    v = triage.triage_pending(pod(gpus=9), ev(INSUFFICIENT), NODES)
    assert v is not None and v.category == TriageCategory.FAILED_DEPLOY and "asks 9 GPUs" in v.diagnosis


def test_an_unbound_pvc_is_a_dependency_problem():
    v = triage.triage_pending(pod(), ev(UNBOUND), NODES)
    assert v is not None and v.category == TriageCategory.DEPENDENCY and not v.can_wait


def test_a_new_pod_without_a_scheduler_verdict_is_not_triaged():
    assert triage.triage_pending(pod(), [], NODES) is None


def test_the_newest_event_decides():
    events = ev(INSUFFICIENT) + ev(TAINT_AND_SELECTOR)
    v = triage.triage_pending(pod(selector={"p": "h100"}), events, NODES)
    assert v is not None and v.category == TriageCategory.FAILED_DEPLOY


def waiting(reason, message="", restarts=0, terminated=None):
    cs = {"name": "main", "restartCount": restarts, "state": {"waiting": {"reason": reason, "message": message}}}
    if terminated:
        cs["lastState"] = {"terminated": terminated}
    return {"metadata": {"name": "w-0"}, "status": {"containerStatuses": [cs]}}


# Messages below are real kubelet/containerd text, copied from pod statuses of public clusters.
AUTH_401 = ('failed to pull and unpack image "registry.app.xxx.net/spm2fog/partsgo42:GitActionsNew": failed to '
            'resolve reference "registry.app.xxx.net/spm2fog/partsgo42:GitActionsNew": pulling from host '
            'registry.app.xxx.net failed with status code [manifests GitActionsNew]: 401 Unauthorized')
TAG_NOT_FOUND = ('rpc error: code = NotFound desc = failed to pull and unpack image "nvcr.io/nvidia/driver:460.73.01-'
                 'ubuntu21.04": failed to resolve reference "nvcr.io/nvidia/driver:460.73.01-ubuntu21.04": '
                 'nvcr.io/nvidia/driver:460.73.01-ubuntu21.04: not found')
TRUNCATED = ('Failed to pull image "nvcr.io/nvidia/cloud-native/k8s-dra-driver:v0.1.0": rpc error: code = Unknown '
             'desc = failed to pull and unpack image "nvcr.io/nvidia/cloud-native/k8s-dra-driver:v0.1.0"')
NETWORK = 'failed to pull and unpack image "nvcr.io/x:1": dial tcp 10.0.0.1:443: i/o timeout'


@pytest.mark.parametrize(("pod_", "category", "words"), [
    (waiting("CrashLoopBackOff", restarts=1), None, ""),  # the first restart may recover
    (waiting("CrashLoopBackOff", "back-off 10s restarting failed container", restarts=2,
             terminated={"reason": "OOMKilled", "exitCode": 137}), TriageCategory.CRASH,
     "last terminated: OOMKilled (exit code 137)"),
    (waiting("CrashLoopBackOff", restarts=6, terminated={"exitCode": 1}), TriageCategory.CRASH,
     "last terminated: Error (exit code 1)"),
    (waiting("ErrImagePull", AUTH_401), TriageCategory.DEPENDENCY, "pull secret"),
    (waiting("ImagePullBackOff", "Back-off pulling image \"nvcr.io/x:1\": ErrImagePull: 403 Forbidden: denied"),
     TriageCategory.DEPENDENCY, "authorization"),
    (waiting("ErrImagePull", TAG_NOT_FOUND), TriageCategory.CRASH, "does not exist"),
    (waiting("ErrImagePull", "manifest unknown: manifest tagged by \"nope\" is not found"), TriageCategory.CRASH,
     "does not exist"),
    (waiting("ErrImagePull", NETWORK), TriageCategory.PULL_RETRY, "retries"),
    (waiting("ErrImagePull", TRUNCATED), TriageCategory.PULL_RETRY, "retries"),  # the cause was cut: not final
    (waiting("CreateContainerConfigError", "couldn't find key SECURE_DATA in Secret default/deno-demo-secret"),
     TriageCategory.DEPENDENCY, "couldn't find key SECURE_DATA"),
    (waiting("InvalidImageName", "Failed to apply default image tag"), TriageCategory.CRASH, "InvalidImageName"),
    (waiting("ContainerCreating"), None, ""),
])
def test_each_container_case_is_triaged_by_whether_waiting_can_help(pod_, category, words):
    v = triage.triage_containers(pod_)
    assert (v.category if v else None) == category
    if v is not None:
        assert words in v.diagnosis and v.can_wait is (category == TriageCategory.PULL_RETRY)


def test_a_back_off_without_its_cause_is_judged_with_the_pull_events():
    pod_ = waiting("ImagePullBackOff", 'Back-off pulling image "nvcr.io/x:1"')
    assert triage.triage_containers(pod_).category == TriageCategory.PULL_RETRY
    v = triage.triage_containers(pod_, [TAG_NOT_FOUND])
    assert v.category == TriageCategory.CRASH and any(TAG_NOT_FOUND in e for e in v.evidence)


def test_readiness_reads_the_pull_events_once_and_fails_on_a_tag_that_does_not_exist(fake):
    api, kube = fake
    api.put(DGD, fakekube.dgd("d", NS))
    p = fakekube.pod("d-worker-0", NS, labels=DGD_LABEL, waiting="ImagePullBackOff")
    api.put(KNOWN["Pod"], p)
    api.put(KNOWN["Event"], {"metadata": {"name": "d-worker-0.pull", "namespace": NS}, "reason": "Failed",
                             "message": TAG_NOT_FOUND, "involvedObject": {"kind": "Pod", "name": "d-worker-0"}})
    with pytest.raises(StepFailure) as caught:
        kube.wait(ready_wait(kube), timeout=1200)
    assert caught.value.category == TriageCategory.CRASH and caught.value.failed_attempt
    assert len(event_reads(api)) == 1


def test_readiness_waits_on_a_pull_the_kubelet_retries_and_on_a_first_restart(fake):
    api, kube = fake
    api.put(DGD, fakekube.dgd("d", NS))
    api.put(KNOWN["Pod"], fakekube.pod("d-worker-0", NS, labels=DGD_LABEL, waiting="ErrImagePull"))
    once = fakekube.pod("d-worker-1", NS, labels=DGD_LABEL, waiting="CrashLoopBackOff")
    once["status"]["containerStatuses"][0]["restartCount"] = 1
    api.put(KNOWN["Pod"], once)
    wait = ready_wait(kube, expected=2)
    with pytest.raises(WaitTimeout):
        kube.wait(wait, timeout=60)
    assert [c["category"] for c in wait.contention] == [TriageCategory.PULL_RETRY]


def test_a_running_container_is_not_a_crash():
    p = {"metadata": {"name": "w-0"}, "status": {"containerStatuses": [{"name": "main", "state": {"running": {}}}]}}
    assert triage.triage_containers(p) is None


@pytest.mark.parametrize(("log", "expected"), [
    ("INFO registered worker instance_id=0x85f0fc53d6c01c35 endpoint=generate", 0x85F0FC53D6C01C35),
    ("worker_id=9651491438470372405 registered", 9651491438470372405),
    ("instance id: 85f0fc53d6c01c35", 0x85F0FC53D6C01C35),
    ("nothing here", None),
])
def test_the_direct_routing_instance_id_is_read_from_logs_as_decimal(log, expected):
    assert parse_instance_id(log) == expected


# ------------------------------------------------------------------ the callers: waits that triage pending pods
# The Job wait (step 4) and the readiness wait (step 6) triage a pod the moment the scheduler
# gives up on it, against the in-memory apiserver (tests/fakekube.py) with a FakeClock.

NS = "demo"
DGD_LABEL = {"nvidia.com/dynamo-graph-deployment-name": "d", "nvidia.com/dynamo-component": "worker"}


@pytest.fixture
def fake():
    with fakekube.installed() as (api, kube, _records):
        api.watchers = 2  # every wait below watches two collections
        yield api, kube


def pending(name, message, labels, gpus=1, at="2026-01-01T00:00:00Z"):
    p = fakekube.pod(name, NS, labels=labels, gpus=gpus, unschedulable=message)
    p["status"]["conditions"][-1]["lastTransitionTime"] = at
    return p


def scheduled(api, name, message, labels, gpus=1):
    api.put(KNOWN["Pod"], pending(name, message, labels, gpus))
    api.put(KNOWN["Event"], fakekube.scheduling_event(name, NS, message))


def event_reads(api):
    """Reads of one pod's events (not the readiness wait's watch of the namespace's warnings)."""
    return [r for r in api.requests if r.path.endswith("/events") and "involvedObject.name" in str(r.query)]


def job_wait_stopped(api, kube, message):
    """The model-download Job's wait, its pod unschedulable with ``message``: the StepFailure it stops with."""
    scheduled(api, "model-download-x", message, {"job-name": "model-download"})
    api.put(KNOWN["Job"], fakekube.job("model-download", NS))
    with pytest.raises(StepFailure) as caught:
        kube.wait(waits.JobComplete(kube, NS, "model-download", "model-download"), timeout=6000)
    return caught


def test_a_job_pod_that_can_never_schedule_stops_the_job_wait_with_the_schedulers_words(fake):
    caught = job_wait_stopped(*fake, TAINT_AND_SELECTOR)
    assert caught.value.category == TriageCategory.FAILED_DEPLOY
    assert str(caught.value).startswith("model-download job model-download cannot run: pod model-download-x can "
                                        "never schedule as written")
    assert caught.value.evidence == [f"pod model-download-x: FailedScheduling: {TAINT_AND_SELECTOR}"]


def test_a_job_pod_on_an_unbound_claim_is_a_dependency(fake):
    caught = job_wait_stopped(*fake, UNBOUND)
    assert caught.value.category == TriageCategory.DEPENDENCY and not caught.value.failed_attempt


def claim(phase, *said):
    """The model-cache claim in ``phase`` and its events (reason, message)."""
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "model-cache", "namespace": NS},
           "spec": {"accessModes": ["ReadWriteMany"]}, "status": {"phase": phase}}
    events = [{"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"model-cache.{i}", "namespace": NS},
               "involvedObject": {"kind": "PersistentVolumeClaim", "name": "model-cache", "namespace": NS},
               "reason": reason, "message": message, "lastTimestamp": f"2026-01-01T00:00:0{i}Z"}
              for i, (reason, message) in enumerate(said)]
    return pvc, events


def on_claim(api, phase, *said):
    """The download Job's pod held on its unbound claim model-cache (as the scheduler says it)."""
    pvc, events = claim(phase, *said)
    api.put(KNOWN["PersistentVolumeClaim"], pvc)
    for e in events:
        api.put(KNOWN["Event"], e)
    held = pending("model-download-x", UNBOUND, {"job-name": "model-download"})
    held["spec"]["volumes"] = [{"name": "cache", "persistentVolumeClaim": {"claimName": "model-cache"}}]
    api.put(KNOWN["Pod"], held)
    api.put(KNOWN["Event"], fakekube.scheduling_event("model-download-x", NS, UNBOUND))
    api.put(KNOWN["Job"], fakekube.job("model-download", NS))
    return held


PROVISIONING = ("ExternalProvisioning", "Waiting for a volume to be created either by the external provisioner "
                "'rancher.io/local-path' or manually by the system administrator.")


def test_a_job_pod_on_a_claim_still_being_provisioned_waits_and_the_job_completes(fake):
    # Issue 29: a namespace-scoped identity does not await the claim; its pod meets the scheduler's
    # transient "unbound immediate PersistentVolumeClaims" while the volume is made: a bounded wait.
    api, kube = fake
    on_claim(api, "Pending", PROVISIONING)
    api.script_watch(KNOWN["Job"], NS, [fakekube.event("MODIFIED", fakekube.job("model-download", NS, "Complete"))])
    state = kube.wait(waits.JobComplete(kube, NS, "model-download", "model-download"), timeout=6000)
    assert state.description == "job/model-download conditions: Complete"


def test_a_job_pod_on_a_claim_whose_class_does_not_exist_is_blocked_at_once(fake):
    api, kube = fake
    on_claim(api, "Pending", ("ProvisioningFailed", 'storageclass.storage.k8s.io "fast" not found'))
    with pytest.raises(StepBlocked) as caught:
        kube.wait(waits.JobComplete(kube, NS, "model-download", "model-download"), timeout=6000)
    assert caught.value.category == BlockerClass.STORAGE_CLASS and "'fast'" in caught.value.fix
    assert "does not exist" in caught.value.message and "unbound immediate" in caught.value.message


def test_a_job_pod_on_a_claim_that_never_binds_stops_at_the_claims_bound(fake):
    # The judge itself, look by look (the wait runs it on every change and every tick).
    api, kube = fake
    held = on_claim(api, "Pending")
    cond = waits.JobComplete(kube, NS, "model-download", "model-download", claim_bound_s=20)
    first = cond.verdict(held)
    assert first is not None and first.category == TriageCategory.PROVISIONING and first.can_wait
    assert "still being bound or provisioned" in first.diagnosis
    api.fake_clock.advance(10)
    assert cond.verdict(held).can_wait
    api.fake_clock.advance(15)
    seen = {"job": {f"{NS}/model-download": fakekube.job("model-download", NS)}, "pods": {f"{NS}/x": held}}
    with pytest.raises(StepFailure) as caught:
        cond(seen)
    assert caught.value.category == TriageCategory.DEPENDENCY and "not bound within 20s" in str(caught.value)
    # The claim and its events were read once per CLAIM_EVERY_S, not on every look.
    claim_reads = [r for r in api.requests if r.path.endswith("/persistentvolumeclaims/model-cache")]
    assert len(claim_reads) == 3


def test_a_claims_refused_access_mode_ends_its_wait_at_once_blocked_pvc(fake):
    api, kube = fake
    refused = ('failed to provision volume with StorageClass "nfs-less": rpc error: code = InvalidArgument desc = '
               "invalid access_mode, MULTI_NODE_MULTI_WRITER")
    pvc, events = claim("Pending", ("ProvisioningFailed", refused))
    api.put(KNOWN["PersistentVolumeClaim"], pvc)
    for e in events:
        api.put(KNOWN["Event"], e)
    with pytest.raises(StepBlocked) as caught:
        kube.wait(waits.ClaimBound(NS, "model-cache"), timeout=600)
    assert caught.value.category == BlockerClass.PVC and "refuses the access mode" in caught.value.message


def test_a_claim_being_provisioned_is_awaited_until_bound(fake):
    api, kube = fake
    pvc, events = claim("Pending", PROVISIONING)
    api.put(KNOWN["PersistentVolumeClaim"], pvc)
    api.put(KNOWN["Event"], events[0])
    api.script_watch(KNOWN["PersistentVolumeClaim"], NS, [fakekube.event("MODIFIED", claim("Bound")[0])])
    state = kube.wait(waits.ClaimBound(NS, "model-cache"), timeout=600)
    assert state.description == "pvc/model-cache phase=Bound"


NOT_FOUND = '0/4 nodes are available: persistentvolumeclaim "model-cache" not found.'


def test_a_claim_the_scheduler_has_not_seen_yet_is_waited_for_not_a_dependency(fake):
    # Seen on the offline cluster: the claim was Bound, the scheduler's cache not yet updated.
    api, kube = fake
    api.put(KNOWN["PersistentVolumeClaim"], {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                              "metadata": {"name": "model-cache", "namespace": NS},
                                              "status": {"phase": "Bound"}})
    scheduled(api, "model-download-x", NOT_FOUND, {"job-name": "model-download"})
    api.put(KNOWN["Job"], fakekube.job("model-download", NS))
    api.script_watch(KNOWN["Job"], NS, [fakekube.event("MODIFIED", fakekube.job("model-download", NS, "Complete"))])
    state = kube.wait(waits.JobComplete(kube, NS, "model-download", "model-download"), timeout=6000)
    assert state.description == "job/model-download conditions: Complete"


def test_a_claim_that_really_does_not_exist_is_a_dependency(fake):
    caught = job_wait_stopped(*fake, NOT_FOUND)
    assert caught.value.category == TriageCategory.DEPENDENCY and "model-cache" in str(caught.value)


def test_a_job_pod_waiting_for_capacity_waits_and_the_job_completes(fake):
    api, kube = fake
    scheduled(api, "model-download-x", INSUFFICIENT, {"job-name": "model-download"})
    api.put(KNOWN["Job"], fakekube.job("model-download", NS))
    api.script_watch(KNOWN["Job"], NS, [fakekube.event("MODIFIED", fakekube.job("model-download", NS, "Complete"))])
    state = kube.wait(waits.JobComplete(kube, NS, "model-download", "model-download"), timeout=6000)
    assert state.description == "job/model-download conditions: Complete"
    assert len(event_reads(api)) == 1  # the same verdict is triaged once


def ready_wait(kube, nodes=NODES, expected=1, allocated=None):
    return waits.DgdReady(waits.PendingTriage(kube, NS, nodes, recheck_s=45.0), "d", {"worker": expected}, allocated)


def test_readiness_records_contention_and_triages_each_new_verdict_once(fake):
    # The judge itself, state by state: inside a wait, changes that arrive together are judged
    # once, on the state they leave.
    api, kube = fake
    api.put(KNOWN["Event"], fakekube.scheduling_event("d-worker-0", NS, INSUFFICIENT))
    allocations = []
    wait = ready_wait(kube, allocated=allocations.append)

    def judge(pod, dgd=None):
        return wait({"dgd": {f"{NS}/d": dgd or fakekube.dgd("d", NS)}, "pods": {f"{NS}/d-worker-0": pod}})

    first = pending("d-worker-0", INSUFFICIENT, DGD_LABEL, gpus=8)
    done, description = judge(first)
    assert not done and description.endswith("pods ready 0/1; contention: pod d-worker-0 is waiting for capacity "
                                             "(nvidia.com/gpu) on otherwise-eligible nodes; next check in 45s")
    assert judge(first) == (done, description) and len(event_reads(api)) == 1  # the same verdict: not re-read
    judge(pending("d-worker-0", INSUFFICIENT, DGD_LABEL, gpus=8, at="2026-01-01T00:01:00Z"))
    assert len(event_reads(api)) == 2 and [c["category"] for c in wait.contention] == [TriageCategory.CONTENTION] * 2
    assert wait.contention[0]["can_wait"] and wait.contention[0]["next_check_at_s"] == 45.0
    bound = fakekube.pod("d-worker-0", NS, labels=DGD_LABEL, gpus=8, node="h200-0", phase="Running", ready=True)
    assert judge(bound)[0] is False  # the DGD is not Ready yet
    assert judge(bound, fakekube.dgd("d", NS, "successful", ready=True))[0] is True
    assert allocations == [wait.allocated_at] and wait.allocated_at is not None
    assert judge(bound, fakekube.dgd("d", NS, "successful", ready=True, generation=2))[0] is False  # not observed


def test_readiness_through_the_wait_sees_contention_in_the_list_and_finishes(fake):
    api, kube = fake
    api.put(DGD, fakekube.dgd("d", NS))
    scheduled(api, "d-worker-0", INSUFFICIENT, DGD_LABEL, gpus=8)
    bound = fakekube.pod("d-worker-0", NS, labels=DGD_LABEL, gpus=8, node="h200-0", phase="Running", ready=True)
    api.script_watch(KNOWN["Pod"], NS, [fakekube.event("MODIFIED", bound)])
    api.script_watch(DGD, NS, [fakekube.event("MODIFIED", fakekube.dgd("d", NS, "successful", ready=True))])
    wait = ready_wait(kube)
    state = kube.wait(wait, timeout=1200)
    assert state.description == "dgd/d state=successful Ready=True (AllReady), pods ready 1/1" or \
        state.description.startswith("dgd/d state=successful Ready=True (AllReady), pods ready 1/1; contention")
    assert len(event_reads(api)) <= 1 and api.watches_left() == 0


def test_readiness_stops_at_once_on_a_request_no_node_can_hold(fake):
    api, kube = fake
    api.put(DGD, fakekube.dgd("d", NS))
    scheduled(api, "d-worker-0", INSUFFICIENT, DGD_LABEL, gpus=9)
    with pytest.raises(StepFailure) as caught:
        kube.wait(ready_wait(kube), timeout=1200)
    assert caught.value.category == TriageCategory.FAILED_DEPLOY and caught.value.failed_attempt
    assert "asks 9 GPUs but no eligible node has more than 8" in str(caught.value)


def test_without_node_access_readiness_judges_from_the_message_alone(fake):
    api, kube = fake
    api.put(DGD, fakekube.dgd("d", NS))
    scheduled(api, "d-worker-0", INSUFFICIENT, DGD_LABEL, gpus=9)  # no node list: 9 GPUs looks like contention
    wait = ready_wait(kube, nodes=None)
    with pytest.raises(WaitTimeout):
        kube.wait(wait, timeout=30)
    assert [c["category"] for c in wait.contention] == [TriageCategory.CONTENTION]


@pytest.mark.parametrize(("reason", "category"), [("CrashLoopBackOff", TriageCategory.CRASH),
                                                  # a missing secret key: a dependency, not a failed attempt
                                                  ("CreateContainerConfigError", TriageCategory.DEPENDENCY)])
def test_readiness_names_the_container_failure_of_any_pod(fake, reason, category):
    api, kube = fake
    api.put(DGD, fakekube.dgd("d", NS))
    api.put(KNOWN["Pod"], fakekube.pod("d-worker-0", NS, labels=DGD_LABEL, waiting=reason))
    with pytest.raises(StepFailure) as caught:
        kube.wait(ready_wait(kube), timeout=1200)
    assert caught.value.category == category and caught.value.failed_attempt is (category == TriageCategory.CRASH)
    assert caught.value.evidence == [f"pod d-worker-0 container main waiting: {reason}"]


def test_a_contention_wait_is_triaged_again_when_its_next_check_comes(fake):
    # The verdict says "next check in 45s": without a new scheduler message the pod is re-read then.
    api, kube = fake
    scheduled(api, "d-w-0", INSUFFICIENT, DGD_LABEL)
    waiting = pending("d-w-0", INSUFFICIENT, DGD_LABEL)
    triager = waits.PendingTriage(kube, NS, recheck_s=45.0)
    first = triager.verdict(waiting)
    assert first is not None and first.category == TriageCategory.CONTENTION and first.next_check_s == 45.0
    assert triager.verdict(waiting) is None  # the same message, not yet due
    fake_clock = clock.current()
    assert isinstance(fake_clock, clock.FakeClock)
    fake_clock.advance(46)
    again = triager.verdict(waiting)
    assert again is not None and again.category == TriageCategory.CONTENTION
    assert len(event_reads(api)) == 2
    assert triager.verdict(waiting) is None  # due again only 45 s later


# ------------------------------------------------------------------ requests beyond every node (cpu, memory, ...)
def sized_node(name: str, cpu: str, memory: str) -> dict:
    found = node(name)
    found["status"]["allocatable"].update({"cpu": cpu, "memory": memory})
    return found


def memory_pod(memory: str) -> dict:
    found = pod()
    found["spec"]["containers"][0]["resources"]["limits"]["memory"] = memory
    return found


SIZED = [sized_node("h200-0", "64", "1000Gi"), sized_node("h200-1", "64", "2000Gi")]


def test_more_memory_than_any_node_has_is_a_failed_attempt_not_contention():
    verdict = triage.triage_pending(memory_pod("64Ti"), ev("0/2 nodes are available: 2 Insufficient memory."),
                                    SIZED)
    assert verdict is not None and verdict.category == TriageCategory.FAILED_DEPLOY and not verdict.can_wait
    assert "requests 7.03687e+13 memory but no eligible node has more than 2.14748e+12" in verdict.diagnosis


def test_memory_some_node_could_hold_once_freed_is_contention():
    verdict = triage.triage_pending(memory_pod("1500Gi"), ev("0/2 nodes are available: 2 Insufficient memory."),
                                    SIZED)
    assert verdict is not None and verdict.category == TriageCategory.CONTENTION and verdict.can_wait


@pytest.mark.parametrize(("raw", "value"), [("500m", 0.5), ("64Gi", 64 * 2**30), ("1e3", 1000.0), ("2k", 2000.0),
                                            (".5", 0.5), ("12", 12.0), ("1.5Ti", 1.5 * 2**40), ("x", None)])
def test_quantities_read_as_kubernetes_writes_them(raw, value):
    assert quantity(raw) == value


def test_a_pod_request_follows_the_init_container_rule():
    spec = {"containers": [{"resources": {"requests": {"cpu": "1"}}}, {"resources": {"limits": {"cpu": "2"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "4"}}},
                               {"restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}}]}
    assert pod_request(spec, "cpu") == 4.0
    spec["initContainers"][0]["resources"]["requests"]["cpu"] = "2"
    assert pod_request(spec, "cpu") == 3.5


# ------------------------------------------------------------------ a node down (step 6)
def _node(ready: str, reason: str = "", message: str = "", taints: tuple[str, ...] = ()) -> dict[str, Any]:
    cond = {"type": "Ready", "status": ready, "lastTransitionTime": "2026-01-01T00:01:00Z",
            "lastHeartbeatTime": "2026-01-01T00:00:20Z", **({"reason": reason, "message": message} if reason else {})}
    return {"metadata": {"name": "gpu-1"}, "spec": {"taints": [{"key": k, "effect": "NoSchedule"} for k in taints]},
            "status": {"conditions": [cond]}}


def test_a_node_the_kubelet_stopped_reporting_for_is_a_platform_verdict_naming_its_condition() -> None:
    pod = {"metadata": {"name": "w-0"}, "spec": {"nodeName": "gpu-1"}}
    verdict = triage.node_lost(pod, _node("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.",
                                          ("node.kubernetes.io/unreachable",)))
    assert verdict is not None and verdict.category == TriageCategory.PLATFORM and not verdict.can_wait
    assert verdict.diagnosis.startswith("node gpu-1 of pod w-0 is NotReady (NodeStatusUnknown: Kubelet stopped "
                                        "posting node status.)")
    assert verdict.evidence == ["node/gpu-1 Ready=Unknown since 2026-01-01T00:01:00Z (last heartbeat "
                                "2026-01-01T00:00:20Z): NodeStatusUnknown: Kubelet stopped posting node status.",
                                "node/gpu-1 taints: node.kubernetes.io/unreachable"]
    # The kubelet's own NotReady (False, its reason) is the same verdict with its words.
    own = triage.node_lost(pod, _node("False", "KubeletNotReady", "container runtime network not ready"))
    assert own is not None and "KubeletNotReady: container runtime network not ready" in own.diagnosis


def test_a_ready_node_an_unknown_node_and_an_unbound_pod_give_no_node_verdict() -> None:
    bound = {"metadata": {"name": "w-0"}, "spec": {"nodeName": "gpu-1"}}
    assert triage.node_lost(bound, _node("True")) is None
    assert triage.node_lost(bound, None) is None  # deleted: the pod GC deletes its pods, they say so
    assert triage.node_lost({"metadata": {"name": "w-0"}, "spec": {}}, _node("Unknown")) is None


def test_a_mixed_shortage_and_taint_message_without_node_reads_is_no_hold_decision() -> None:
    # The scheduler's usual mixed message; a namespace-scoped identity cannot read nodes.
    message = ("0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint "
               "{dedicated: tenant-b}. preemption: 0/4 nodes are available: 2 No preemption victims found for "
               "incoming pod, 2 Preemption is not helpful for scheduling.")
    pod = {"metadata": {"name": "w-0"}, "status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]}}
    verdict = triage.triage_pending(pod, [], None)
    assert verdict is not None and verdict.can_wait and not verdict.verified
    assert "cannot be told" in verdict.diagnosis and "--compat-patch" in verdict.diagnosis
    # Not a sign of a legitimate wait: step 6's no-progress bound counts while it lasts.
    assert wait_signs.judge([pod], 1, {"w-0": verdict}, {}, dgd_pending=None, fallback=clock.now()).stuck
    # Only a shortage: contention, a bounded-by-readiness legitimate wait as before.
    short = {"metadata": {"name": "w-0"}, "status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]}}
    held = triage.triage_pending(short, [], None)
    assert held is not None and held.can_wait and held.verified
