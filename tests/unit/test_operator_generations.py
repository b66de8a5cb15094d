"""Verdicts that hold on every operator generation (docs/operator-generations.md): which status
describes the current spec, when ``failed`` is a verdict, and platform faults that are never the
candidate's failure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_suite.access.kube import DGD, Kube, status_error
from deploy_suite.constants import PLATFORM_GRACE_S
from deploy_suite.errors import PlatformFault, StepBlocked, StepFailure, Unavailable
from deploy_suite.judges import membership, operator_status
from deploy_suite.procedure import apply, readiness, waits
from tests import fakekube
from tests.fakekube import FakeApi, status
from tests.unit.test_rollout import NS, fail_with_result, make_run, serving

MANAGER = "deploy-suite/0123456789ab"
APPLIED = "2026-12-01T10:00:00Z"


def dgd(state: str = "successful", ready: bool = True, *, generation: int = 1, observed: int | None = None,
        ready_since: str = "2026-12-01T10:05:00Z", message: str = "", reason: str | None = None) -> dict[str, Any]:
    """A DGD as an operator of some generation writes it (no observedGeneration unless given)."""
    obj = fakekube.dgd("demo", NS, state, ready=ready, generation=generation, observed=observed, message=message,
                       manager=MANAGER)
    obj["metadata"]["managedFields"][0]["time"] = APPLIED
    cond = obj["status"]["conditions"][0]
    cond["lastTransitionTime"] = ready_since
    if reason is not None:
        cond["reason"] = reason
    if observed is None:
        del obj["status"]["observedGeneration"]
    return obj


@pytest.fixture
def fake() -> Iterator[tuple[FakeApi, Kube, list]]:
    with fakekube.installed() as made:
        yield made


def ready_condition(kube: Kube, grace: float = 30.0) -> waits.DgdReady:
    return waits.DgdReady(waits.PendingTriage(kube, NS), "demo", {"w": 1}, field_manager=MANAGER,
                          failed_grace_s=grace)


def judge(cond: waits.DgdReady, obj: dict[str, Any], ready_pods: int = 1) -> tuple[bool, str]:
    pods = {f"{NS}/demo-w-{i}": fakekube.pod(f"demo-w-{i}", NS, phase="Running", ready=True, node="n0",
                                             labels={"nvidia.com/dynamo-component": "w"})
            for i in range(ready_pods)}
    return cond({"dgd": {f"{NS}/demo": obj}, "pods": pods})


# ------------------------------------------------------------------ which generation the status describes
@pytest.mark.parametrize(("obj", "current", "rule"), [
    (dgd(generation=3, observed=3), True, "observedGeneration"),
    (dgd(generation=3, observed=2), False, "observedGeneration"),
    # Pre-1.0: no observedGeneration. A never-updated object's status can only describe its one spec.
    (dgd(generation=1), True, "never-updated"),
    # Updated since creation: Ready counts only when it turned True after this experiment's apply.
    (dgd(generation=2, ready_since="2026-12-01T09:59:59Z"), False, "stale"),
    (dgd(generation=2, ready_since=APPLIED), True, "ready-after-apply"),
])
def test_the_status_counts_only_when_it_describes_the_current_spec(obj: dict[str, Any], current: bool,
                                                                    rule: str) -> None:
    assert operator_status.generation(obj, MANAGER) == operator_status.Generation(current, rule)


def test_an_update_by_someone_else_is_not_this_experiments_apply() -> None:
    # Without our manager's Apply time nothing proves the Ready is newer than the current spec.
    assert not operator_status.generation(dgd(generation=2), "deploy-suite/other").current


def test_a_pre_1_0_dgd_without_observed_generation_becomes_ready(fake) -> None:
    done, _ = judge(ready_condition(fake[1]), dgd(generation=1))
    assert done


def test_a_stale_ready_on_an_updated_pre_1_0_dgd_is_not_ready_and_says_why(fake) -> None:
    done, desc = judge(ready_condition(fake[1]), dgd(generation=2, ready_since="2026-12-01T09:00:00Z"))
    assert not done and "no observedGeneration and Ready has not turned True since this experiment's apply" in desc


def test_a_status_behind_the_generation_is_not_ready(fake) -> None:
    done, desc = judge(ready_condition(fake[1]), dgd(generation=2, observed=1))
    assert not done and "observedGeneration behind" in desc


# ------------------------------------------------------------------ when `failed` is a verdict
CONFLICT = ('Operation cannot be fulfilled on deployments.apps "demo-frontend": the object has been modified; '
            "please apply your changes to the latest version and try again")


def test_a_transient_failed_that_clears_is_recorded_not_a_verdict(fake) -> None:
    cond = ready_condition(fake[1])
    done, desc = judge(cond, dgd("failed", ready=False, message=CONFLICT))
    assert not done and "reconcile error for 0s, not yet a verdict" in desc
    fake[0].fake_clock.advance(4)
    assert judge(cond, dgd("successful", generation=1))[0]
    (entry,) = cond.reconcile_errors
    assert (entry["message"], entry["outcome"], entry["seconds"]) == (CONFLICT, "recovered", 4.0)


def test_an_unknown_failed_is_a_verdict_once_it_outlasts_the_grace(fake) -> None:
    cond = ready_condition(fake[1], grace=30)
    failed = dgd("failed", ready=False, message="spec.services: invalid")
    judge(cond, failed)
    fake[0].fake_clock.advance(29)
    assert not judge(cond, failed)[0]
    fake[0].fake_clock.advance(1)
    with pytest.raises(StepFailure) as caught:
        judge(cond, failed)
    assert caught.value.category == "reconcile-error" and not caught.value.failed_attempt
    assert "persisted for 30s (grace 30s)" in str(caught.value)
    assert cond.reconcile_errors[-1]["outcome"] == "persisted"


@pytest.mark.parametrize("message", [
    'failed to reconcile top-level PVCs: persistentvolumeclaims "model-cache" not found',
    'legacy top-level PVC "model-cache" does not exist and create is not enabled',
    "kai-scheduler queue validation failed: queue dynamo not found",
])
def test_a_known_permanent_dependency_error_fails_at_first_sight(fake, message: str) -> None:
    with pytest.raises(StepFailure) as caught:
        judge(ready_condition(fake[1]), dgd("failed", ready=False, message=message))
    assert caught.value.category == "dependency" and not caught.value.failed_attempt


@pytest.mark.parametrize(("message", "reason"), [
    ("no multinode orchestrator available", None),
    ("", "no_multinode_orchestrator_available"),
])
def test_no_multinode_orchestrator_blocks_as_the_platforms_fault(fake, message: str, reason: str | None) -> None:
    with pytest.raises(StepBlocked) as caught:
        judge(ready_condition(fake[1]), dgd("failed", ready=False, message=message, reason=reason))
    assert caught.value.category == "platform" and "multinode" in caught.value.message


# ------------------------------------------------------------------ platform faults
CONVERSION = ('conversion webhook for nvidia.com/v1beta1, Kind=DynamoGraphDeployment failed: Post '
              '"https://dynamo-operator-webhook.dynamo-system.svc:443/convert": dial tcp 10.96.0.12:443: '
              "connect: connection refused")
ADMISSION = ('Internal error occurred: failed calling webhook "vdynamographdeployment.kb.io": failed to call webhook: '
             'Post "https://127.0.0.1:9443/validate": dial tcp 127.0.0.1:9443: connect: connection refused')


@pytest.mark.parametrize("message", [CONVERSION, ADMISSION])
def test_an_unreachable_webhook_is_a_platform_fault(message: str) -> None:
    assert isinstance(status_error(500, "list dynamographdeployments", message), PlatformFault)


def test_a_webhook_that_answers_is_not_a_platform_fault() -> None:
    denied = 'admission webhook "vdynamographdeployment.kb.io" denied the request: component topology is immutable'
    assert not isinstance(status_error(400, "apply", denied), PlatformFault)
    assert type(status_error(503, "list", "etcdserver: leader changed")) is Unavailable


def test_a_platform_fault_during_readiness_blocks_after_its_grace_without_a_failed_attempt(fake, tmp_path: Path):
    api, kube, _ = fake
    api.watchers = 2
    api.put(DGD, fakekube.dgd("demo", NS))
    path = f"/apis/nvidia.com/v1alpha1/namespaces/{NS}/dynamographdeployments"
    api.fail("GET", path, status(500, "InternalError", CONVERSION), times=1000)
    run = make_run(tmp_path, step="step6_readiness")
    started = api.fake_clock.monotonic() if api.fake_clock else 0.0
    error, partial = fail_with_result(lambda: readiness.readiness(run, kube))
    assert isinstance(error, StepBlocked) and error.category == "platform" and "conversion webhook" in error.message
    assert api.fake_clock is not None and api.fake_clock.monotonic() - started >= PLATFORM_GRACE_S
    assert not partial.failed_attempt and partial.teardown["action"] == "kept" and api.of("DELETE") == []


def test_a_platform_fault_at_the_apply_blocks(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    path = f"/apis/nvidia.com/v1alpha1/namespaces/{NS}/dynamographdeployments/demo"
    api.fail("PATCH", path, status(500, "InternalError", ADMISSION))
    run = make_run(tmp_path, step="step5_apply")
    with pytest.raises(StepBlocked) as caught:
        apply.apply(run, kube)
    assert caught.value.category == "platform" and "vdynamographdeployment.kb.io" in caught.value.message


def test_readiness_records_how_the_status_was_judged_current(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    serving(api)
    run = make_run(tmp_path, step="step6_readiness")
    ready = readiness.readiness(run, kube)
    assert ready.generation_rule == "observedGeneration" and ready.reconcile_errors == []


# ------------------------------------------------------------------ errors that stop below the DGD
QUOTA = ('Error creating: pods "demo-vllmdecodeworker-7d9-x2" is forbidden: exceeded quota: gpu-quota, requested: '
         "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=0")
INVALID = ('Error creating: Pod "demo-vllmdecodeworker-7d9-x2" is invalid: spec.containers[0].resources.requests: '
           'Invalid value: "1": must be equal to nvidia.com/gpu limit of 2')
DENIED = 'Error creating: admission webhook "pods.policy.example.com" denied the request: GPU pods need a team label'
UNREACHABLE = ('Error creating: Internal error occurred: failed calling webhook "pods.policy.example.com": '
               "dial tcp 127.0.0.1:9: connect: connection refused")


def warning(kind: str, name: str, message: str, at: str = "2026-12-01T10:00:03Z", reason: str = "FailedCreate"):
    return {"metadata": {"name": f"{name}.1", "namespace": NS}, "type": "Warning", "reason": reason,
            "message": message, "involvedObject": {"kind": kind, "name": name, "namespace": NS},
            "firstTimestamp": at, "lastTimestamp": at}


def below(kube: Kube, *events: dict[str, Any], pods: int = 0) -> tuple[bool, str]:
    """Judge a DGD (created 10:00:00) with ``pods`` of its 2 pods and the namespace's warnings."""
    cond = waits.DgdReady(waits.PendingTriage(kube, NS), "demo", {"Frontend": 1, "VllmDecodeWorker": 1},
                          field_manager=MANAGER)
    obj = dgd("pending", ready=False)
    obj["metadata"]["creationTimestamp"] = "2026-12-01T10:00:00Z"
    made = {f"{NS}/demo-p{i}": fakekube.pod(f"demo-p{i}", NS, phase="Running", ready=True, node="n0")
            for i in range(pods)}
    return cond({"dgd": {f"{NS}/demo": obj}, "pods": made,
                 "events": {f"{NS}/{e['metadata']['name']}": e for e in events}})


@pytest.mark.parametrize(("kind", "name", "message", "category", "failed_attempt"), [
    ("ReplicaSet", "demo-vllmdecodeworker-7d9", QUOTA, "dependency", False),
    ("ReplicaSet", "demo-vllmdecodeworker-7d9", DENIED, "dependency", False),
    ("ReplicaSet", "demo-vllmdecodeworker-7d9", INVALID, "failed-deploy", True),
    ("LeaderWorkerSet", "demo-vllmdecodeworker-0", QUOTA, "dependency", False),
    ("PodClique", "demo-0-vllmdecodeworker", DENIED, "dependency", False),
])
def test_a_refusal_to_create_pods_is_judged_at_once(fake, kind: str, name: str, message: str, category: str,
                                                    failed_attempt: bool) -> None:
    with pytest.raises(StepFailure) as caught:
        below(fake[1], warning(kind, name, message))
    assert (caught.value.category, caught.value.failed_attempt) == (category, failed_attempt)
    assert any(message in line for line in caught.value.evidence)


def test_an_unreachable_pod_webhook_blocks_as_a_platform_fault(fake) -> None:
    with pytest.raises(StepBlocked) as caught:
        below(fake[1], warning("ReplicaSet", "demo-frontend-5c4", UNREACHABLE))
    assert caught.value.category == "platform"


@pytest.mark.parametrize(("event", "pods"), [
    # An earlier DGD of the same name was refused: its events outlive it.
    (warning("ReplicaSet", "demo-vllmdecodeworker-7d9", QUOTA, at="2026-12-01T09:59:59Z"), 0),
    # Another DGD's children: "demo-2" is not a component of "demo".
    (warning("ReplicaSet", "demo-2-frontend-5c4", QUOTA), 0),
    # Every pod exists: the refusal was overcome (the quota was raised).
    (warning("ReplicaSet", "demo-vllmdecodeworker-7d9", QUOTA), 2),
    # A pod's own events are the pod triage's (waits.PendingTriage).
    (warning("Pod", "demo-vllmdecodeworker-7d9-x2", "0/2 nodes are available: 2 Insufficient cpu.",
             reason="FailedScheduling"), 0),
])
def test_refusals_that_are_not_this_dgds_or_are_history_are_not_judged(fake, event: dict[str, Any],
                                                                        pods: int) -> None:
    done, _ = below(fake[1], event, pods=pods)
    assert not done


# ------------------------------------------------------------------ multinode layout
@pytest.mark.parametrize(("labels", "role"), [
    ({"role": "leader"}, "leader"), ({"role": "worker"}, "worker"),
    ({"leaderworkerset.sigs.k8s.io/worker-index": "0"}, "leader"),
    ({"leaderworkerset.sigs.k8s.io/worker-index": "2"}, "worker"),
    ({"grove.io/podclique": "demo-0-vllmdecodeworker-ldr"}, "leader"),
    ({"grove.io/podclique": "demo-0-vllmdecodeworker-wkr"}, "worker"),
    ({"nvidia.com/dynamo-component": "Frontend"}, None),
])
def test_a_multinode_pods_role_is_read_from_its_orchestrators_labels(labels: dict[str, str], role: str | None):
    assert membership.multinode_role({"metadata": {"name": "p", "labels": labels}}) == role


def test_an_invalid_template_the_api_server_refuses_is_a_failed_attempt_at_first_sight(fake) -> None:
    # Operators without DCDs write the API server's refusal of their Deployment into the DGD.
    message = ('Deployment.apps "demo-vllmdecodeworker" is invalid: spec.template.spec.containers[0].resources.'
               'requests: Invalid value: "2": must be less than or equal to nvidia.com/gpu limit of 1')
    with pytest.raises(StepFailure) as caught:
        judge(ready_condition(fake[1]), dgd("failed", ready=False, message=message))
    assert caught.value.category == "failed-deploy" and caught.value.failed_attempt


def test_a_required_value_the_api_server_asks_for_is_a_failed_attempt_too(fake) -> None:
    message = ('failed to reconcile Dynamo components deployments: apply Deployment/demo-frontend: Deployment.apps '
               '"demo-frontend" is invalid: spec.template.spec.containers[0].resources.limits: Required value: '
               "Limit must be set for non overcommitable resources")
    with pytest.raises(StepFailure) as caught:
        judge(ready_condition(fake[1]), dgd("failed", ready=False, message=message))
    assert caught.value.category == "failed-deploy" and caught.value.failed_attempt
