"""Pending-pod triage classifies by the scheduler's words; messages below are real 1.36 events."""

from __future__ import annotations

import pytest

from deploy_suite import triage
from deploy_suite.smoke import parse_instance_id

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
    assert v is not None and v.category == triage.FAILED_DEPLOY and not v.can_wait
    assert "example.com/reserved-for=tenant-b:NoSchedule" in v.diagnosis and "h100-0" in v.diagnosis


def test_insufficient_gpus_on_eligible_nodes_is_contention_with_a_next_check():
    v = triage.triage_pending(pod(gpus=8, selector={"p": "h200"}), ev(INSUFFICIENT), NODES)
    assert v is not None and v.category == triage.CONTENTION and v.can_wait and v.next_check_s == 30.0


def test_a_request_no_eligible_node_can_hold_is_a_failed_deploy_not_contention():
    v = triage.triage_pending(pod(gpus=9), ev(INSUFFICIENT), NODES)
    assert v is not None and v.category == triage.FAILED_DEPLOY and "asks 9 GPUs" in v.diagnosis


def test_an_unbound_pvc_is_a_dependency_problem():
    v = triage.triage_pending(pod(), ev(UNBOUND), NODES)
    assert v is not None and v.category == triage.DEPENDENCY and not v.can_wait


def test_a_new_pod_without_a_scheduler_verdict_is_not_triaged():
    assert triage.triage_pending(pod(), [], NODES) is None


def test_the_newest_event_decides():
    events = ev(INSUFFICIENT) + ev(TAINT_AND_SELECTOR)
    v = triage.triage_pending(pod(selector={"p": "h100"}), events, NODES)
    assert v is not None and v.category == triage.FAILED_DEPLOY


@pytest.mark.parametrize("reason", ["CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull"])
def test_container_failures_are_crashes(reason):
    p = {"metadata": {"name": "w-0"}, "status": {"containerStatuses": [
        {"name": "main", "restartCount": 3, "state": {"waiting": {"reason": reason}},
         "lastState": {"terminated": {"exitCode": 1}}}]}}
    v = triage.triage_containers(p)
    assert v is not None and v.category == triage.CRASH and reason in v.diagnosis


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
