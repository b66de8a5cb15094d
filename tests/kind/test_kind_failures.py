"""The container failure classes on real kubelets, judged by step 6's own triage
(``triage.triage_containers``, the function the readiness wait calls) with the verdict each
class gets on kwok (tests/unit, tests/integration/test_operator_faults.py; docs/offline-cluster.md
lists where the real kubelet's words differ)."""

from __future__ import annotations

import pytest

from deploy_suite.access.kube import Kube
from deploy_suite.judges import triage
from deploy_suite.vocab import TriageCategory
from tests.kind.test_kind_cluster import _pod, wait_pod

pytestmark = pytest.mark.kind

REFUSED = "mocker: error: unrecognized arguments: --no-such-engine-flag"


def test_an_argument_the_engine_refuses_is_a_crash_loop_with_the_containers_own_previous_log(
        kind_kube: Kube, kind_namespace: str) -> None:
    kind_kube.create(_pod("refused", f"echo '{REFUSED}' >&2; exit 2"), kind_namespace)
    pod = wait_pod(kind_kube, kind_namespace, "refused", f"restarts>={triage.CRASH_LOOP_RESTARTS}")
    verdict = triage.triage_containers(pod)
    assert verdict is not None and verdict.category == TriageCategory.CRASH and verdict.action == "failed-attempt"
    assert "exit code 2" in verdict.diagnosis or "exit 2" in verdict.diagnosis
    assert REFUSED in kind_kube.pod_log("refused", kind_namespace, previous=True)


@pytest.mark.matrix
def test_a_missing_secret_key_is_create_container_config_error_a_dependency(
        kind_kube: Kube, kind_namespace: str) -> None:
    kind_kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token-secret"},
                      "stringData": {"OTHER": "x"}}, kind_namespace)
    env = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token-secret", "key": "HF_TOKEN"}}}]
    kind_kube.create(_pod("nokey", "sleep 3600", env=env), kind_namespace)
    pod = wait_pod(kind_kube, kind_namespace, "nokey", "CreateContainerConfigError")
    verdict = triage.triage_containers(pod)
    assert verdict is not None and verdict.category == TriageCategory.DEPENDENCY
    assert "HF_TOKEN" in verdict.diagnosis  # the kubelet names the missing key


def test_a_container_over_its_memory_limit_is_oom_killed_and_named_in_the_crash_verdict(
        kind_kube: Kube, kind_namespace: str) -> None:
    limits = {"limits": {"memory": "32Mi"}, "requests": {"memory": "32Mi"}}
    kind_kube.create(_pod("oom", "tail /dev/zero", resources=limits), kind_namespace)
    pod = wait_pod(kind_kube, kind_namespace, "oom", f"restarts>={triage.CRASH_LOOP_RESTARTS}")
    last = pod["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert last["reason"] == "OOMKilled" and last["exitCode"] == 137
    verdict = triage.triage_containers(pod)
    assert verdict is not None and verdict.category == TriageCategory.CRASH and "OOMKilled" in verdict.diagnosis


@pytest.mark.matrix
def test_a_readiness_probe_that_never_passes_leaves_the_pod_running_unready_with_no_verdict(
        kind_kube: Kube, kind_namespace: str) -> None:
    probe = {"exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 1}
    kind_kube.create(_pod("unready", "sleep 3600", readinessProbe=probe), kind_namespace)
    wait_pod(kind_kube, kind_namespace, "unready", "")  # running: no waiting reason
    pod = kind_kube.get("Pod", "unready", kind_namespace)
    cs = pod["status"]["containerStatuses"][0]
    assert "running" in cs["state"] and cs["ready"] is False
    assert triage.triage_containers(pod) is None  # waiting can help: step 6's no-progress bound decides


@pytest.mark.matrix
def test_an_image_nothing_serves_is_err_image_pull_not_found_a_failed_attempt(
        kind_kube: Kube, kind_namespace: str) -> None:
    pod = _pod("noimage", "true")
    pod["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.0.0-does-not-exist"
    kind_kube.create(pod, kind_namespace)
    pod = wait_pod(kind_kube, kind_namespace, "noimage", "ErrImagePull")
    message = pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
    assert "not found" in message  # containerd's words for the registry's 404 (registry.py)
    verdict = triage.triage_containers(pod)
    assert verdict is not None and verdict.category == TriageCategory.CRASH and verdict.action == "failed-attempt"
