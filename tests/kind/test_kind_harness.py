"""The harness on kind, as a user runs it: ``pytest --iter=0`` against an experiment whose workload
names the kind cluster's context ``kind-<name>``, with a recipe copied unedited (data/README.md).

The admin's part, as on a real cluster: the namespace, ``hf-token-secret`` and the recipe's
``model-cache`` claim (the recipe names a storage class this cluster does not have; the admin makes
the claim on the cluster's default class). No image is loaded by the test: the nodes pull the
recipe's ``nvcr.io/nvidia/ai-dynamo/vllm-runtime`` from the cluster's registry (registry.py), the
operator replica shapes the pods for Kubernetes discovery (operator_sim/discovery.py), and the
worker's ``python3 -m dynamo.vllm ...`` runs the mocker (dynamo_files/). Each run takes about half a
minute (the first pulls the image to its node): in the kind slice of ``make test``, as the held-out
check of a recipe run unedited.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from deploy_suite_offline.kind import docker
from deploy_suite_offline.kind.provider import KindProvider
from tests.support import outcomes
from tests.support.targets import Target

pytestmark = pytest.mark.kind

RECIPE = Path(__file__).with_name("data") / "deploy.yaml"
MODEL = "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic"
WORKER = "llama3-70b-agg-prefill"
# The crash loop is judged at restartCount 2 (the real back-off reaches it in about 30 s); a stuck
# run ends well inside the test's own deadline.
TIMEOUTS = {"readiness_no_progress_s": 300.0, "readiness_s": 900.0}




def _crictl_names(cluster: KindProvider, node: str) -> str:
    return docker.exec_in(node, "crictl", "ps", "-a", "-o", "json") if node in cluster.node_containers() else ""


def test_the_recipe_as_iteration_0_ends_ready_with_smoke_success_from_real_containers(
        kind_cluster_offline: KindProvider, target: Target) -> None:
    exp = target.experiment(RECIPE, support={}, timeouts=TIMEOUTS)
    run = target.run(exp)
    data = run.ledger()
    assert data["status"] == "ready", run.output[-4000:]
    got = outcomes(data)
    assert all(got[s] == "passed" for s in ("step1_inputs", "step2_validate", "step5_apply", "step6_readiness",
                                            "step7_smoke")), got
    assert data["served_model"] == MODEL and data["failed_attempts"] == []
    assert data["smoke"]["success"] == 1 and data["endpoint"]["port"] == 8000
    artifact = run.smoke_artifact()
    assert artifact["api_http_code"] == 200 and artifact["api_response"]["object"] == "chat.completion"
    pods = target.kube.list_items("Pod", target.namespace, label_selector="nvidia.com/dynamo-component=prefill")[0]
    assert len(pods) == 1
    pod = pods[0]
    # A real container on a real node: the node's own container runtime lists it.
    listed = _crictl_names(kind_cluster_offline, pod["spec"]["nodeName"])
    assert pod["metadata"]["name"] in listed and '"main"' in listed
    log = target.kube.pod_log(pod["metadata"]["name"], target.namespace, tail=400)
    assert f"dynamo.mocker serves '{MODEL}'" in log
    assert "dynamo_runtime" in log


def test_the_recipe_with_an_argument_vllm_refuses_ends_failed_with_the_containers_own_lines(
        target: Target) -> None:
    text = RECIPE.read_text(encoding="utf-8").replace("--block-size 128", "--block-size 128 --max-num-seqz 8")
    assert "--max-num-seqz" in text
    refused = target.tmp / "deploy-refused.yaml"
    refused.write_text(text, encoding="utf-8")
    run = target.run(target.experiment(refused, support={}, timeouts=TIMEOUTS))
    data = run.ledger()
    assert data["status"] == "failed", run.output[-4000:]
    assert outcomes(data)["step6_readiness"] == "failed"
    (attempt,) = data["failed_attempts"]
    assert attempt["category"] == "crash", attempt
    found = data["readiness"]["failure_evidence"]
    excerpts = "\n".join(c["log_excerpt"] for c in found["containers"])
    # The container's own last lines: the crashed run's log, current or `--previous` by then (the
    # real kubelet restarts it at once; procedure/evidence.py reads whichever holds that run).
    assert "error: unrecognized arguments: --max-num-seqz 8" in excerpts, found
    text = (run.deploy_root / "logs" / "readiness-llama3-70b-agg.log").read_text(encoding="utf-8")
    assert "error: unrecognized arguments: --max-num-seqz 8" in text


def test_nothing_was_loaded_by_hand_the_nodes_pulled_the_recipe_image(kind_cluster_offline: KindProvider) -> None:
    # Runs after the two above in this module: the image the recipe names came from the registry.
    found = subprocess.run(["grep", "-c", "vllm-runtime", str(Path(kind_cluster_offline.dir) / "logs" /
                                                             "deploy-suite-registry.log")],
                           capture_output=True, text=True, check=False)
    assert int(found.stdout.strip() or 0) > 0
