"""The sample experiment on kind, as a user runs it (``make demo PROVIDER=kind`` does the same): iteration 0
with its support handoff (the model-cache claim, the model-download Job), then iteration 1, which retires
iteration 0 first. Both end ready with smoke success 1.

The download Job is unedited: ``python:3.10-slim`` pulled by the node from the cluster's registry (the Python
image of python_image.py), ``pip install huggingface_hub`` satisfied from the image, ``hf download`` the real
client against the image's hub replica, writing the hub's cache layout onto the claim
(docs/offline-cluster.md, "Support images and the hub replica"). The admin made the namespace and
``hf-token-secret``; the claim is the sample's own (step 4 applies it).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy_suite.constants import LABEL_JOB_NAME
from deploy_suite.fixtures.experiments.make_experiment import stage_candidate
from deploy_suite_offline.kind import config, docker
from deploy_suite_offline.kind.provider import KindProvider
from tests.support import outcomes
from tests.support.targets import Target, admin_target

pytestmark = [pytest.mark.kind, pytest.mark.matrix]

MODEL = "Qwen/Qwen3-0.6B"
STEPS = ("step1_inputs", "step2_validate", "step3_retire_previous", "step4_support_manifests", "step5_apply",
         "step6_readiness", "step7_smoke")


@pytest.fixture
def sample_target(kind_cluster_offline: KindProvider, tmp_path: Path) -> Iterator[Target]:
    with admin_target(kind_cluster_offline, tmp_path, "ks", Target) as t:  # type: ignore[arg-type]
        yield t


def _ready(data: dict[str, object], output: str) -> None:
    assert data["status"] == "ready", output[-4000:]
    got = outcomes(data)
    assert all(got[s] in ("passed", "skipped") for s in STEPS), got
    assert got["step4_support_manifests"] == "passed" and got["step7_smoke"] == "passed", got
    assert data["served_model"] == MODEL and data["failed_attempts"] == []
    assert data["smoke"]["success"] == 1  # type: ignore[index]


def _on_the_claim(cluster: KindProvider, target: Target) -> Path:
    """The host directory behind the model-cache claim (the provisioner's hostPath, shared by every node)."""
    claim = target.kube.get("PersistentVolumeClaim", "model-cache", target.namespace)
    volume = target.kube.get("PersistentVolume", claim["spec"]["volumeName"])
    inside = Path(volume["spec"]["hostPath"]["path"])
    return Path(cluster.dir) / "pv" / inside.relative_to(config.SHARED_MOUNT)


def test_the_sample_iterations_0_and_1_with_their_download_job_end_ready(
        kind_cluster_offline: KindProvider, sample_target: Target) -> None:
    target = sample_target
    exp = target.experiment()  # the sample's DGD and support manifests, aimed at this namespace
    first = target.run(exp)
    led0 = first.ledger()
    _ready(led0, first.output)

    # The download Job ran to completion in a real container on a kind node.
    job = target.kube.get("Job", "model-download", target.namespace)
    assert (job.get("status") or {}).get("succeeded") == 1, job.get("status")
    (pod,) = target.kube.list_items("Pod", target.namespace, label_selector=f"{LABEL_JOB_NAME}=model-download")[0]
    status = pod["status"]
    assert status["phase"] == "Succeeded"
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    node = pod["spec"]["nodeName"]
    assert node in kind_cluster_offline.node_containers()
    listed = docker.exec_in(node, "crictl", "ps", "-a", "-o", "json")
    assert pod["metadata"]["name"] in listed and '"model-download"' in listed
    # Its log: the script's own commands (set -x), pip's and the real hf client's output.
    log = target.kube.pod_log(pod["metadata"]["name"], target.namespace, tail=400)
    assert "+ pip install --no-cache-dir huggingface_hub" in log, log
    assert "Requirement already satisfied: huggingface_hub" in log, log
    assert f"+ hf download {MODEL}" in log and "hub replica" in log, log
    assert f"/model-store/hub/models--{MODEL.replace('/', '--')}/snapshots/" in log, log
    # What it wrote on the claim is the hub cache's layout: refs/main names the snapshot, files are links to blobs.
    storage = _on_the_claim(kind_cluster_offline, target) / "hub" / f"models--{MODEL.replace('/', '--')}"
    commit = (storage / "refs" / "main").read_text()
    snapshot = storage / "snapshots" / commit
    assert (snapshot / "tokenizer.json").is_symlink() and (snapshot / "tokenizer.json").resolve().parent.name == "blobs"
    # The image came from the cluster's registry under the official image's name.
    pulled = subprocess.run(["grep", "-c", "/v2/library/python/manifests/3.10-slim",
                             str(Path(kind_cluster_offline.dir) / "logs" / "deploy-suite-registry.log")],
                            capture_output=True, text=True, check=False)
    assert int(pulled.stdout.strip() or 0) > 0

    handoff = stage_candidate(exp.exp_root, 1)  # same DGD name, one unpinned knob changed
    second = target.run(exp, iteration=1, handoff=handoff)
    led1 = second.ledger()
    _ready(led1, second.output)
    retired = led1["retired_previous"]
    assert retired["dgd"] == "demo-agg" and retired["existed"] is True and retired["action"] == "deleted"
    assert first.ledger()["torn_down_at"] == retired["torn_down_at"]
