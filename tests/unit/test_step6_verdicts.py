"""Step 6 reads what ``deploy-suite triage`` reads (issue 29): the claims a pod waits on, a not-ready
pod's kubelet words (probes), the nodes' own conditions, the Grove/LWS/Kueue statuses, the DGD's
Ready reasons on the current operator (a checkpoint gate, ``scheduledReplicas``), and the ledger's
diagnosis in the troubleshooting shape (deploy_suite/procedure/waits.py, holds.py, readiness.py)."""

from __future__ import annotations

from typing import Any

import pytest

from deploy_suite.access.kube import KNOWN, Resource
from deploy_suite.errors import StepBlocked, StepFailure
from deploy_suite.judges import operator_status
from deploy_suite.judges.triage import Verdict
from deploy_suite.procedure import holds, readiness, waits
from deploy_suite.record import ledger
from deploy_suite.vocab import BlockerClass, FailureCategory, TriageCategory, WaitingSign
from tests import fakekube
from tests.unit.test_ledger import document

NS = "demo"
LABELS = {"nvidia.com/dynamo-graph-deployment-name": "d", "nvidia.com/dynamo-component": "worker"}
UNBOUND = "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/4 nodes are " \
          "available: 4 Preemption is not helpful for scheduling."
PROVISIONING = ("ExternalProvisioning", "Waiting for a volume to be created either by the external provisioner "
                "'rancher.io/local-path' or manually by the system administrator.")
# The kubelet's words on a startup probe that fails (kubernetes pkg/kubelet/prober/prober.go and
# kuberuntime_container.go: "Container %s failed %s probe, will be restarted").
UNHEALTHY = ("Startup probe failed: Get \"http://10.0.0.5:9090/live\": dial tcp 10.0.0.5:9090: connect: "
             "connection refused")
KILLING = "Container main failed startup probe, will be restarted"


@pytest.fixture
def fake():
    with fakekube.installed() as (api, kube, _records):
        yield api, kube


def ready_wait(kube: Any, bound_s: float = 600.0, **extra: Any) -> waits.DgdReady:
    triage = waits.PendingTriage(kube, NS, None, 30.0, claims=holds.ClaimHolds(kube, NS, bound_s))
    return waits.DgdReady(triage, "d", {"worker": 1}, kubelet=holds.KubeletWords(kube, NS), **extra)


def seen(pod: dict[str, Any] | None = None, dgd: dict[str, Any] | None = None,
         events: list[dict[str, Any]] = ()) -> dict[str, Any]:
    return {"dgd": {f"{NS}/d": dgd or fakekube.dgd("d", NS)},
            "pods": {f"{NS}/{pod['metadata']['name']}": pod} if pod else {},
            "events": {f"{NS}/{e['metadata']['name']}": e for e in events}}


# ------------------------------------------------------------------ claims
def claim(api: Any, phase: str, *said: tuple[str, str]) -> None:
    api.put(KNOWN["PersistentVolumeClaim"], {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "model-cache", "namespace": NS},
        "spec": {"accessModes": ["ReadWriteMany"]}, "status": {"phase": phase}})
    for i, (reason, message) in enumerate(said):
        api.put(KNOWN["Event"], {"apiVersion": "v1", "kind": "Event",
                                 "metadata": {"name": f"model-cache.{i}", "namespace": NS},
                                 "involvedObject": {"kind": "PersistentVolumeClaim", "name": "model-cache"},
                                 "reason": reason, "message": message, "lastTimestamp": f"2026-01-01T00:00:0{i}Z"})


def on_claim(api: Any) -> dict[str, Any]:
    """The worker pod, held by the scheduler on its unbound claim model-cache."""
    pod = fakekube.pod("d-worker-0", NS, labels=LABELS, gpus=1, unschedulable=UNBOUND)
    pod["spec"]["volumes"] = [{"name": "cache", "persistentVolumeClaim": {"claimName": "model-cache"}}]
    api.put(KNOWN["Pod"], pod)
    api.put(KNOWN["Event"], fakekube.scheduling_event("d-worker-0", NS, UNBOUND))
    return pod


def test_a_worker_on_a_claim_still_being_provisioned_waits_with_a_sign_not_stuck(fake):
    # Issue 29: whatever the identity could read in step 4, a claim being made is a bounded wait.
    api, kube = fake
    claim(api, "Pending", PROVISIONING)
    wait = ready_wait(kube)
    done, line = wait(seen(on_claim(api)))
    assert not done and "still being bound or provisioned" in line
    assert [s.kind for s in wait.signs.signs] == [WaitingSign.HELD] and not wait.signs.stuck
    assert [c["category"] for c in wait.contention] == [TriageCategory.PROVISIONING]
    api.fake_clock.advance(6)
    wait(seen(on_claim(api)))
    assert len(wait.contention) == 1  # the same reading is recorded once


def test_a_worker_on_a_claim_whose_class_does_not_exist_is_blocked_at_once_with_its_shape(fake):
    api, kube = fake
    claim(api, "Pending", ("ProvisioningFailed", 'storageclass.storage.k8s.io "fast" not found'))
    wait = ready_wait(kube)
    with pytest.raises(StepBlocked) as caught:
        wait(seen(on_claim(api)))
    assert caught.value.category == BlockerClass.STORAGE_CLASS and "'fast'" in caught.value.fix
    stopped = wait.triage.claims.stopped if wait.triage.claims else None
    assert stopped is not None and (stopped.kind, stopped.name) == ("PersistentVolumeClaim", "model-cache")
    shape = readiness.troubleshooting(caught.value, readiness.Readiness(stopped=stopped), NS, "d")
    assert shape["object"] == "PersistentVolumeClaim/model-cache" and shape["problem_class"] == "dependency"
    assert shape["next_step"]["command"] == "kubectl get storageclass" and not shape["safe_to_continue"]


def test_a_worker_on_a_claim_that_never_binds_stops_at_the_claims_bound(fake):
    api, kube = fake
    claim(api, "Pending")
    wait = ready_wait(kube, bound_s=20)
    pod = on_claim(api)
    assert not wait(seen(pod))[0]
    api.fake_clock.advance(25)
    with pytest.raises(StepFailure) as caught:
        wait(seen(pod))
    assert caught.value.category == TriageCategory.DEPENDENCY and "not bound within 20s" in str(caught.value)


# ------------------------------------------------------------------ probes
def probed(restarts: int, finished: str = "2026-01-01T00:01:00Z") -> dict[str, Any]:
    """The worker Running, not ready, its container killed ``restarts`` times (exit 143)."""
    pod = fakekube.pod("d-worker-0", NS, labels=LABELS, gpus=1, node="h200-0", phase="Running")
    pod["metadata"]["uid"] = "u-1"
    pod["status"]["containerStatuses"] = [{
        "name": "main", "ready": False, "started": False, "restartCount": restarts,
        "state": {"running": {"startedAt": finished}},
        "lastState": {"terminated": {"exitCode": 143, "reason": "Error", "finishedAt": finished}}}]
    return pod


def pod_event(name: str, reason: str, message: str, count: int, kind: str = "Normal") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": NS}, "type": kind,
            "involvedObject": {"kind": "Pod", "name": "d-worker-0", "uid": "u-1", "fieldPath": "spec.containers{main}"},
            "reason": reason, "message": message, "count": count, "lastTimestamp": "2026-01-01T00:01:00Z"}


def test_a_worker_its_startup_probe_kills_is_a_crash_named_from_the_kubelets_words(fake):
    api, kube = fake
    unhealthy = pod_event("w.unhealthy", "Unhealthy", UNHEALTHY, 6, "Warning")
    api.put(KNOWN["Event"], pod_event("w.killing", "Killing", KILLING, 1))
    api.put(KNOWN["Event"], unhealthy)
    wait = ready_wait(kube)
    assert not wait(seen(probed(1), events=[unhealthy]))[0]  # the first kill may be a slow start
    reads = len([r for r in api.requests if r.path.endswith("/events")])
    assert not wait(seen(probed(1), events=[unhealthy]))[0]
    assert len([r for r in api.requests if r.path.endswith("/events")]) == reads  # read once per termination
    api.put(KNOWN["Event"], pod_event("w.killing", "Killing", KILLING, 2))
    with pytest.raises(StepFailure) as caught:
        wait(seen(probed(2, "2026-01-01T00:02:00Z"), events=[unhealthy]))
    assert caught.value.category == TriageCategory.CRASH and caught.value.failed_attempt
    assert "startup probe fails" in str(caught.value) and "exit 143" in str(caught.value)
    assert wait.stopped is not None and wait.stopped.kind == "Pod"


def test_an_earlier_pods_kills_of_the_same_name_are_not_this_pods(fake):
    api, kube = fake
    old = pod_event("w.killing", "Killing", KILLING, 5)
    old["involvedObject"]["uid"] = "u-old"
    api.put(KNOWN["Event"], old)
    assert not ready_wait(kube)(seen(probed(2)))[0]


def test_a_probe_command_missing_from_the_image_is_a_failed_attempt_at_first_sight(fake):
    _, kube = fake
    said = pod_event("w.unhealthy", "Unhealthy", 'Readiness probe errored: rpc error: code = Unknown desc = failed '
                     'to exec in container: exec: "/probe.sh": stat /probe.sh: no such file or directory', 1, "Warning")
    pod = probed(0)
    pod["status"]["containerStatuses"][0].pop("lastState")
    with pytest.raises(StepFailure) as caught:
        ready_wait(kube)(seen(pod, events=[said]))
    assert caught.value.category == TriageCategory.FAILED_DEPLOY and "command does not exist" in str(caught.value)


# ------------------------------------------------------------------ nodes
def test_the_node_of_a_worker_not_ready_under_disk_pressure_blocks_the_step_after_the_grace(fake):
    api, kube = fake
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "h200-0"}, "status": {"conditions": [
        {"type": "Ready", "status": "True"},
        {"type": "DiskPressure", "status": "True", "reason": "KubeletHasDiskPressure",
         "message": "kubelet has disk pressure"}]}}
    wait = ready_wait(kube, read_node=lambda name: node, failed_grace_s=30.0)
    pod = probed(0)
    pod["status"]["containerStatuses"][0].pop("lastState")
    assert not wait(seen(pod))[0]
    api.fake_clock.advance(31)
    with pytest.raises(StepBlocked) as caught:
        wait(seen(pod))
    assert caught.value.category == BlockerClass.PLATFORM and "DiskPressure=True" in caught.value.message
    assert wait.stopped is not None and (wait.stopped.kind, wait.stopped.name) == ("Node", "h200-0")


# ------------------------------------------------------------------ the DGD's status on the current operator
def gated(message: str = "Waiting for checkpoints: worker (ckpt-1)") -> dict[str, Any]:
    obj = fakekube.dgd("d", NS, message=message)
    obj["status"]["conditions"][0]["reason"] = operator_status.CHECKPOINT_GATE
    obj["status"]["components"] = {"worker": {"replicas": 0, "readyReplicas": 0}}
    return obj


def test_a_checkpoint_gate_holding_replicas_at_zero_is_a_sign_then_bounded(fake):
    api, kube = fake
    wait = ready_wait(kube, loading_s=300.0)
    done, line = wait(seen(dgd=gated()))
    assert not done and "checkpoint" in line and "legitimate wait" in line
    assert [s.kind for s in wait.signs.signs] == [WaitingSign.CHECKPOINT] and not wait.signs.stuck
    api.fake_clock.advance(301)
    with pytest.raises(StepFailure) as caught:
        wait(seen(dgd=gated()))
    assert caught.value.category == FailureCategory.TIMEOUT and "worker (ckpt-1)" in str(caught.value)
    assert not caught.value.failed_attempt


def test_without_the_gate_the_missing_pods_are_stuck():
    wait = waits.DgdReady(waits.PendingTriage(None, NS), "d", {"worker": 1})  # type: ignore[arg-type]
    wait(seen())
    assert wait.signs.stuck == ("1 of 1 pods not created",)


@pytest.mark.parametrize(("reason", "says"), [("insufficient_capacity", "could not schedule every replica"),
                                              ("pods_not_ready", "not all ready"), ("updating", "rollout"),
                                              ("mixed_not_ready_reasons", "different reasons"),
                                              ("some_resources_are_not_ready", "the pods say why")])
def test_the_ready_reasons_of_the_current_operator_are_read(reason, says):
    obj = fakekube.dgd("d", NS)
    obj["status"]["conditions"][0]["reason"] = reason
    obj["status"]["components"] = {"decode": {"replicas": 2, "scheduledReplicas": 1}}
    wait = waits.DgdReady(waits.PendingTriage(None, NS), "d", {"worker": 1})  # type: ignore[arg-type]
    line = wait(seen(dgd=obj))[1]
    assert says in line and "decode scheduled 1/2" in line
    assert operator_status.checkpoint_gate(obj["status"]) is None


# ------------------------------------------------------------------ Grove, LWS, Kueue
PCS = Resource("grove.io", "v1alpha1", "podcliquesets", True, "PodCliqueSet")


def test_a_podcliquesets_topology_levels_unavailable_stops_the_wait(fake):
    api, kube = fake
    api.served.append(PCS)
    api.put(PCS, {"apiVersion": "grove.io/v1alpha1", "kind": "PodCliqueSet",
                  "metadata": {"name": "d", "namespace": NS}, "status": {"conditions": [
                      {"type": "TopologyLevelsUnavailable", "status": "True",
                       "reason": "ClusterTopologyLevelsUnavailable", "message": "levels [rack] are not defined"}]}})
    wait = ready_wait(kube, statuses=holds.WorkloadStatuses(kube, NS, "d", ["worker"]))
    with pytest.raises(StepFailure) as caught:
        wait(seen())
    assert caught.value.category == TriageCategory.FAILED_DEPLOY and caught.value.failed_attempt
    assert wait.stopped is not None and (wait.stopped.kind, wait.stopped.name) == ("PodCliqueSet", "d")


def test_kinds_the_cluster_does_not_serve_are_asked_for_once(fake):
    api, kube = fake
    statuses = holds.WorkloadStatuses(kube, NS, "d", ["worker"])
    assert statuses.verdicts() == [] and statuses.kinds == []
    asked = len(api.requests)
    api.fake_clock.advance(holds.STATUS_EVERY_S + 1)
    assert statuses.verdicts() == [] and len(api.requests) == asked


# ------------------------------------------------------------------ the ledger
def test_a_failed_attempt_carries_the_troubleshooting_shape_valid_in_the_ledger():
    verdict = Verdict(TriageCategory.CRASH, "pod d-worker-0: the kubelet kills it each time its startup probe fails",
                      ["pod d-worker-0: Killing: " + KILLING], decisive=True)
    stopped = holds.Stopped("Pod", "d-worker-0", verdict, ("its events",))
    exc = StepFailure(verdict.diagnosis, verdict.category, verdict.evidence, failed_attempt=True)
    shape = readiness.troubleshooting(exc, readiness.Readiness(stopped=stopped), NS, "d")
    assert shape["object"] == "Pod/d-worker-0" and shape["safe_to_continue"] and shape["problem_class"] == "crash"
    assert shape["next_step"]["command"].startswith("kubectl -n demo logs d-worker-0")
    book = ledger.Ledger(document())
    failed = readiness.Readiness("crash", diagnosis=verdict.diagnosis, evidence=verdict.evidence, failed=True,
                                 failed_attempt=True, troubleshooting=shape)
    failed.record(book)
    assert book.data["failed_attempts"][-1]["troubleshooting"] == shape
    assert book.data["readiness"]["troubleshooting"] == shape
    ledger.validate(book.data)
    no_progress = StepFailure("no progress for 120s", FailureCategory.NO_PROGRESS, ["pod x not scheduled yet"])
    plain = readiness.troubleshooting(no_progress, readiness.Readiness(), NS, "d")
    assert plain["object"] == "DynamoGraphDeployment/d" and plain["problem_class"] == "no-progress"
    assert not plain["safe_to_continue"] and plain["next_step"]["command"] == \
        "kubectl -n demo describe dynamographdeployment d"


# ------------------------------------------------------------------ worker registration
def registering(ready: bool = True) -> dict[str, Any]:
    pod = fakekube.pod("d-worker-0", NS, labels={**LABELS, "nvidia.com/dynamo-component-type": "worker"},
                       node="h200-0", phase="Running", ready=ready)
    pod["metadata"]["uid"] = "u-1"
    pod["spec"]["containers"][0]["env"] = [{"name": "DYN_DISCOVERY_BACKEND", "value": "kubernetes"}]
    return pod


def metadata_of(pod: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoWorkerMetadata",
            "metadata": {"name": pod["metadata"]["name"], "namespace": NS,
                         "ownerReferences": [{"kind": "Pod", "name": pod["metadata"]["name"], "uid": "u-1"}]}}


def test_a_worker_whose_registration_never_comes_is_named_in_what_is_stuck(fake):
    api, _kube = fake
    published: list[dict[str, Any]] = []
    reads: list[int] = []

    def read() -> list[dict[str, Any]]:
        reads.append(1)
        return list(published)

    wait = waits.DgdReady(waits.PendingTriage(None, NS), "d", {"worker": 1},  # type: ignore[arg-type]
                          read_registrations=read)
    wait(seen(registering()))
    assert len(wait.signs.stuck) == 1 and "no DynamoWorkerMetadata): d-worker-0" in wait.signs.stuck[0]
    wait(seen(registering()))
    assert len(reads) == 1  # read at most every NODE_EVERY_S
    published.append(metadata_of(registering()))
    api.fake_clock.advance(waits.NODE_EVERY_S + 1)
    wait(seen(registering()))
    assert "DynamoWorkerMetadata" not in " ".join(wait.signs.stuck)


def test_without_kubernetes_discovery_no_registration_is_expected():
    pod = registering()
    pod["spec"]["containers"][0]["env"] = []
    wait = waits.DgdReady(waits.PendingTriage(None, NS), "d", {"worker": 1},  # type: ignore[arg-type]
                          read_registrations=lambda: [])
    wait(seen(pod))
    assert "DynamoWorkerMetadata" not in " ".join(wait.signs.stuck)


def test_a_sandbox_the_node_cannot_create_blocks_only_once_it_outlasts_the_grace(fake):
    # The kubelet retries a sandbox whose network is not set up yet (a node still starting its CNI).
    api, kube = fake
    said = pod_event("w.sandbox", "FailedCreatePodSandBox", 'Failed to create pod sandbox: rpc error: code = '
                     'Unknown desc = failed to setup network for sandbox "abc": cni plugin not initialized', 3,
                     "Warning")
    pod = fakekube.pod("d-worker-0", NS, labels=LABELS, gpus=1, node="h200-0")
    pod["metadata"]["uid"] = "u-1"
    wait = ready_wait(kube, failed_grace_s=30.0)
    assert not wait(seen(pod, events=[said]))[0]
    api.fake_clock.advance(31)
    with pytest.raises(StepBlocked) as caught:
        wait(seen(pod, events=[said]))
    assert caught.value.category == BlockerClass.PLATFORM and "sandbox" in caught.value.message
