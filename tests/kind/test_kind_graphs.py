"""Two more DGD shapes on real kubelets, each as iteration 0 through the harness, as on kwok
(tests/e2e/test_deploy_offline.py runs the same files there):

- NVIDIA's GPU-less mocker recipe (``dynamo-planner`` image, no GPU request): its decode worker
  turns the profiler results the recipe names under ``/workspace/components/src/dynamo`` into the
  mocker's timings, as the published image does;
- a gaie graph: an EPP (the image's stand-in, judged by the kubelet's real gRPC probes on port
  9003) and workers each running a frontend sidecar with direct routing; the smoke test goes
  through the real kubelet's port-forward to a worker pod with the worker's instance id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import outcomes
from tests.support.targets import Target

pytestmark = [pytest.mark.kind, pytest.mark.matrix]

E2E_DATA = Path(__file__).parents[1] / "e2e" / "data"
TIMEOUTS = {"readiness_no_progress_s": 300.0, "readiness_s": 900.0}
STEPS = ("step1_inputs", "step2_validate", "step5_apply", "step6_readiness", "step7_smoke")


def _ready(target: Target, dgd: str) -> dict[str, Any]:
    run = target.run(target.experiment(E2E_DATA / dgd, support={}, timeouts=TIMEOUTS))
    led = run.ledger()
    assert led["status"] == "ready", run.output[-4000:]
    got = outcomes(led)
    assert all(got[s] == "passed" for s in STEPS), got
    assert led["smoke"]["success"] == 1 and led["failed_attempts"] == []
    assert run.smoke_artifact()["api_response"]["object"] == "chat.completion"
    return led


def _pod(target: Target, component: str) -> dict[str, Any]:
    pods = target.kube.list_items("Pod", target.namespace,
                                  label_selector=f"nvidia.com/dynamo-component={component}")[0]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def test_the_gpu_less_mocker_recipe_ends_ready_with_the_profilers_timings(target: Target) -> None:
    led = _ready(target, "dgd-mocker.yaml")
    assert led["dgd_name"] == "mocker-agg" and led["served_model"] == "nvidia/Llama-3.1-8B-Instruct-FP8"
    assert led["gpus_requested"] == 0
    pod = _pod(target, "decode")
    assert pod["spec"]["containers"][0]["image"] == "nvcr.io/nvidia/ai-dynamo/dynamo-planner:1.3.1"
    log = target.kube.pod_log(pod["metadata"]["name"], target.namespace, tail=400)
    assert "Detected profiler-style results directory at /workspace/components/src/dynamo/planner" in log, log[-3000:]
    assert "Wrote perf data to" in log


def test_a_gaie_graph_is_ready_behind_real_grpc_probes_and_answers_through_a_worker_pod(target: Target) -> None:
    led = _ready(target, "dgd-gaie-direct.yaml")
    assert led["endpoint"]["kind"] == "worker-pod" and led["frontend_service"] is None
    assert isinstance(led["endpoint"]["worker_instance_id"], int)
    # Kubernetes discovery: the id is the one the worker's runtime published for its pod.
    worker = led["endpoint"]["target"].removeprefix("pod/")
    assert led["endpoint"]["worker_instance_id_source"] == f"dynamoworkermetadatas/{worker}", led["endpoint"]
    epp = _pod(target, "Epp")
    main = epp["spec"]["containers"][0]
    assert main["readinessProbe"]["grpc"] == {"port": 9003, "service": "inference-extension"}
    assert main["image"].startswith("nvcr.io/nvidia/ai-dynamo/dynamo-epp:")
    # Ready because the kubelet's gRPC health checks passed against the running stand-in.
    assert [c["ready"] for c in epp["status"]["containerStatuses"]] == [True]
    log = target.kube.pod_log(epp["metadata"]["name"], target.namespace, tail=50)
    assert "health 'inference-extension' SERVING on :9003" in log and f"/{led['dgd_name']}-pool" in log, log
