"""Failure modes of a real operator, as fault switches on the offline cluster (profile ``latest``).

Each test switches a fault on from the cluster side, applies an unchanged DGD and watches what
the real control plane and the operator replica show: states, conditions and events.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from deploy_suite.access.kube import Kube, Obj
from deploy_suite.access.watch import Watch
from deploy_suite.errors import WaitTimeout
from deploy_suite_offline import faults
from deploy_suite_offline.operator_sim.components import worker_hash
from tests.integration.replica import BETA, DCD, manifest, pods_of, ready_condition, wait_state
from tests.integration.test_operator_sim import chat, forward

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
NAME = "beta-agg"


def test_a_transient_failed_is_written_for_one_reconcile_then_recovers(
        cluster_kube: Kube, scratch_namespace: str) -> None:
    kube, ns = cluster_kube, scratch_namespace
    faults.set_operator_fault(kube, ns, NAME, "transient-failed:1")
    seen: list[tuple[str, str]] = []

    def settled(objs: dict[str, Obj]) -> tuple[bool, str]:
        dgd = objs.get(f"{ns}/{NAME}") or {}
        state, msg = (dgd.get("status") or {}).get("state", ""), ready_condition(dgd).get("message", "")
        if state and (not seen or seen[-1][0] != state):
            seen.append((state, msg))
        return state == "successful", f"{state}: {msg}"

    try:
        kube.apply(manifest("dgd-beta-agg.yaml"), ns)
        kube.wait_for(Watch(BETA, ns, name=NAME), settled, awaited="successful after a transient failure", timeout=60)
    finally:
        faults.set_operator_fault(kube, ns, NAME, None)
    failed = [m for s, m in seen if s == "failed"]
    assert len(failed) == 1, seen
    assert "Operation cannot be fulfilled on dynamocomponentdeployments.nvidia.com" in failed[0]
    assert "the object has been modified" in failed[0]
    assert seen[-1][0] == "successful"


def _quota(kube: Kube, ns: str) -> None:
    kube.create({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-gpus", "namespace": ns},
                 "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}}, ns)


@pytest.mark.parametrize("source", ["fault", "dgd"])
def test_an_invalid_pod_template_is_held_at_the_dcd_and_the_dgd_stays_pending(
        cluster_kube: Kube, scratch_namespace: str, source: str) -> None:
    kube, ns = cluster_kube, scratch_namespace
    doc = manifest("dgd-beta-agg.yaml")
    if source == "fault":
        faults.set_operator_fault(kube, ns, NAME, "invalid-template")
    else:  # the operator passes GPU requests and limits through as written
        doc["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]["resources"] = {
            "requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "1"}}
    try:
        kube.apply(doc, ns)
        dgd = wait_state(kube, BETA, ns, NAME, "pending")
        decode = f"{NAME}-decode-{worker_hash(dgd)}"

        def refused(objs: dict[str, Obj]) -> tuple[bool, str]:
            conds = ((objs.get(f"{ns}/{decode}") or {}).get("status") or {}).get("conditions") or []
            cond = next((c for c in conds if c["type"] == "Available"), {})
            return cond.get("reason") == "DeploymentFailed", str(cond)

        state = kube.wait_for(Watch(DCD, ns, name=decode), refused, awaited="DCD Available=False", timeout=30)
        cond = next(c for c in state.objects[f"{ns}/{decode}"]["status"]["conditions"] if c["type"] == "Available")
        assert cond["status"] == "False"
        assert "spec.template.spec.containers[0].resources.requests: Invalid value" in cond["message"]
        events = [e for e in kube.list_items("Event", ns)[0] if e["involvedObject"]["name"] == decode]
        assert [e["reason"] for e in events] == ["FailedCreate"] and events[0]["type"] == "Warning"
        assert kube.get(BETA, NAME, ns)["status"]["state"] == "pending"
        decode_pods = [p for p in pods_of(kube, ns, NAME)
                       if p["metadata"]["labels"]["nvidia.com/dynamo-component"] == "decode"]
        assert not decode_pods and kube.get_or_none("Deployment", decode, ns) is None
    finally:
        faults.set_operator_fault(kube, ns, NAME, None)


@pytest.mark.parametrize(("switch", "evidence"), [
    ("quota", "exceeded quota: no-gpus"),
    ("pod-webhook", 'admission webhook "refuse-t-'),
])
def test_pods_refused_below_the_dgd_hold_it_pending_with_failed_create(
        cluster_kube: Kube, scratch_namespace: str, switch: str, evidence: str) -> None:
    kube, ns = cluster_kube, scratch_namespace
    undo: Callable[[], None] = lambda: None  # noqa: E731 - nothing to undo for a quota (dies with the namespace)
    if switch == "quota":
        _quota(kube, ns)
    else:
        fault = faults.pod_admission_refusal(kube, f"refuse-{ns}", NAME, ns)
        faults.apply(kube, fault)
        undo = lambda: faults.remove(kube, fault)  # noqa: E731
    try:
        kube.apply(manifest("dgd-beta-agg.yaml"), ns)

        def failed_create(objs: dict[str, Obj]) -> tuple[bool, str]:
            msgs = [e.get("message", "") for e in objs.values() if e.get("reason") == "FailedCreate"
                    and e["involvedObject"]["kind"] == "ReplicaSet"]
            return any(evidence in m for m in msgs), msgs[-1] if msgs else "no FailedCreate yet"

        kube.wait_for(Watch("Event", ns), failed_create, awaited="FailedCreate from the ReplicaSet", timeout=30)
        dgd = wait_state(kube, BETA, ns, NAME, "pending")
        decode = f"{NAME}-decode-{worker_hash(dgd)}"

        def dcd_refused(objs: dict[str, Obj]) -> tuple[bool, str]:
            conds = ((objs.get(f"{ns}/{decode}") or {}).get("status") or {}).get("conditions") or []
            cond = next((c for c in conds if c["type"] == "Available"), {})
            return cond.get("status") == "False" and cond.get("reason") == "FailedCreate", str(cond)

        kube.wait_for(Watch(DCD, ns, name=decode), dcd_refused, awaited="DCD Available=False FailedCreate", timeout=30)
        dgd = kube.get(BETA, NAME, ns)
        assert dgd["status"]["state"] == "pending"
        assert f"{decode}: Component deployment not ready - Available condition not true" in \
            ready_condition(dgd)["message"]
        assert not [p for p in pods_of(kube, ns, NAME) if p["metadata"]["labels"]["nvidia.com/dynamo-component"]
                    == "decode"]
    finally:
        undo()


def test_a_listed_model_whose_chat_answers_503_model_not_ready(cluster_kube: Kube, scratch_namespace: str) -> None:
    kube, ns = cluster_kube, scratch_namespace
    faults.set_serving_fault(kube, ns, NAME, "model-not-ready")
    try:
        kube.apply(manifest("dgd-beta-agg.yaml"), ns)
        wait_state(kube, BETA, ns, NAME, "successful")
        with forward(kube, f"svc/{NAME}-frontend", ns) as base:
            assert "llama-beta" in [m["id"] for m in httpx.get(f"{base}/v1/models", timeout=10).json()["data"]]
            resp = chat(base, "llama-beta")
            assert resp.status_code == 503 and resp.json()["error"]["message"] == "Model not ready"
    finally:
        faults.set_serving_fault(kube, ns, NAME, None)


def test_a_slow_worker_is_running_not_ready_within_its_startup_budget_then_ready(
        cluster_kube: Kube, scratch_namespace: str) -> None:
    kube, ns = cluster_kube, scratch_namespace
    fault = faults.slow_start(f"slow-{ns}", faults.by_dgd(NAME, ns), start_s=0.5, ready_s=6)
    faults.apply(kube, fault)
    try:
        kube.apply(manifest("dgd-beta-agg.yaml"), ns)

        def loading(objs: dict[str, Obj]) -> tuple[bool, str]:
            pods = [p for p in objs.values() if p["metadata"]["labels"]["nvidia.com/dynamo-component"] == "decode"]
            running = [p for p in pods if p["status"].get("phase") == "Running"
                       and next(c for c in p["status"]["conditions"] if c["type"] == "Ready")["status"] != "True"]
            return bool(running), f"{len(pods)} decode pods"

        state = kube.wait_for(Watch("Pod", ns), loading, awaited="worker Running, not Ready", timeout=30)
        pod = next(iter(p for p in state.objects.values()
                        if p["metadata"]["labels"]["nvidia.com/dynamo-component"] == "decode"))
        probe = pod["spec"]["containers"][0]["startupProbe"]
        assert probe["periodSeconds"] * probe["failureThreshold"] == 7200  # the operator's 2-hour budget
        assert kube.get(BETA, NAME, ns)["status"]["state"] == "pending"
        wait_state(kube, BETA, ns, NAME, "successful", timeout=60)
    finally:
        faults.remove(kube, fault)


def test_an_image_never_pullable_keeps_the_dgd_pending_never_failed(cluster_kube: Kube, scratch_namespace: str) -> None:
    kube, ns = cluster_kube, scratch_namespace
    fault = faults.image_pull(f"pull-{ns}", faults.by_dgd(NAME, ns))
    faults.apply(kube, fault)
    try:
        kube.apply(manifest("dgd-beta-agg.yaml"), ns)

        def backoff(objs: dict[str, Obj]) -> tuple[bool, str]:
            waiting = [s["state"]["waiting"]["reason"] for p in objs.values()
                       for s in (p.get("status") or {}).get("containerStatuses") or [] if "waiting" in s["state"]]
            return len(waiting) >= 2, str(waiting)

        kube.wait_for(Watch("Pod", ns), backoff, awaited="ImagePullBackOff", timeout=30)
        dgd = wait_state(kube, BETA, ns, NAME, "pending")
        assert "Component deployment not ready - Available condition not true" in ready_condition(dgd)["message"]
        states: list[str] = []

        def never_failed(objs: dict[str, Obj]) -> tuple[bool, str]:
            states.append(((objs.get(f"{ns}/{NAME}") or {}).get("status") or {}).get("state", ""))
            return "failed" in states, states[-1]

        with pytest.raises(WaitTimeout):
            kube.wait_for(Watch(BETA, ns, name=NAME), never_failed, awaited="a failed state", timeout=5)
        assert "failed" not in states
    finally:
        faults.remove(kube, fault)
