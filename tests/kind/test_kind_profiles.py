"""The pre-1.0 operator profile on kind: a second cluster, ``--operator 0.9`` on one H200 worker
(data/one-h200.yaml), where the sample experiment runs as a user runs it: iteration 0 ends ready,
then iteration 1 (the sample's candidate) retires it and ends ready too.

The sample's DGD is the v1alpha1 graph of the 0.9.1 image, which the cluster's registry serves; the
``model-cache`` claim comes from the support handoff, as the sample asks. The model-download Job is
left out of both handoffs here (test_kind_sample.py runs it): what this proves is the profile's
contract (no webhook, no observedGeneration, DGD -> Deployment) on real kubelets.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_suite import yamlio
from deploy_suite.access.kube import DGD
from deploy_suite.access.resources import Resource
from deploy_suite.fixtures.experiments.make_experiment import stage_candidate
from deploy_suite_offline.fixtures.kind import started_kind_cluster
from deploy_suite_offline.kind.provider import KindProvider
from tests.support import outcomes
from tests.support.targets import SAMPLE_SUPPORT, Target, admin_target

pytestmark = [pytest.mark.kind, pytest.mark.matrix]

WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", False,
                    "ValidatingWebhookConfiguration")
LAYOUT = Path(__file__).with_name("data") / "one-h200.yaml"
TIMEOUTS = {"readiness_no_progress_s": 300.0, "readiness_s": 900.0}


@pytest.fixture(scope="module")
def pre_1_0_cluster(pytestconfig: pytest.Config) -> Iterator[KindProvider]:
    with started_kind_cluster(pytestconfig, f"p{os.getpid()}", LAYOUT, operator="0.9") as cluster:
        yield cluster


@pytest.fixture
def pre_1_0_target(pre_1_0_cluster: KindProvider, tmp_path: Path) -> Iterator[Target]:
    with admin_target(pre_1_0_cluster, tmp_path, "kp", Target) as t:  # type: ignore[arg-type]
        yield t


def _without_download(handoff: Path) -> None:
    data: dict[str, Any] = yamlio.load_one(handoff)
    data["support"].pop("model-download")
    handoff.write_text(yamlio.dump(data), encoding="utf-8")


def test_the_sample_on_the_pre_1_0_profile_ends_ready_and_iteration_1_retires_iteration_0(
        pre_1_0_cluster: KindProvider, pre_1_0_target: Target) -> None:
    target = pre_1_0_target
    assert pre_1_0_cluster.info().operator == "0.9"
    # No admission webhook in this generation: nothing registers vdynamographdeployment.kb.io.
    hooks = target.kube.list_items(WEBHOOKS, None)[0]
    assert not [h for h in hooks if "dynamographdeployment" in str(h)], hooks
    exp = target.experiment(support={"model-cache": SAMPLE_SUPPORT / "model-cache.yaml"}, timeouts=TIMEOUTS)
    first = target.run(exp)
    led0 = first.ledger()
    assert led0["status"] == "ready", first.output[-4000:]
    assert led0["smoke"]["success"] == 1 and led0["failed_attempts"] == []
    dgd0 = target.kube.get_or_none(DGD, led0["dgd_name"], target.namespace)
    assert dgd0 is not None and "observedGeneration" not in dgd0.get("status", {})
    uid0 = dgd0["metadata"]["uid"]
    pods = target.kube.list_items("Pod", target.namespace)[0]
    images = {c["image"] for p in pods for c in p["spec"]["containers"]}
    assert images == {"nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.9.1"}, images
    assert all(p["status"]["phase"] == "Running" for p in pods), [p["status"] for p in pods]

    handoff = stage_candidate(exp.exp_root, 1)
    _without_download(handoff)
    second = target.run(exp, iteration=1, handoff=handoff)
    led1 = second.ledger()
    assert led1["status"] == "ready", second.output[-4000:]
    got = outcomes(led1)
    assert got["step3_retire_previous"] == "passed" and got["step7_smoke"] == "passed", got
    assert led1["smoke"]["success"] == 1 and led1["failed_attempts"] == []
    # Iteration 0 was deleted and waited for (its pods gone), then written torn down in its own ledger;
    # the same DGD name is iteration 1's own object now.
    retired = led1["retired_previous"]
    assert retired["action"] == "deleted" and retired["existed"] is True
    assert first.ledger()["torn_down_at"] == retired["torn_down_at"]
    dgd1 = target.kube.get_or_none(DGD, led1["dgd_name"], target.namespace)
    assert dgd1 is not None and dgd1["metadata"]["uid"] != uid0
