"""The harness is right on every operator generation the replica can show (docs/operator-generations.md):
the sample experiment's iterations 0 and 1 end ``ready`` on each profile; an aggregated iteration 0
followed by a disaggregated iteration 1 under the same DGD name ends ``ready`` where the operator's
webhook forbids that change as an update (and a test sends that update to show the refusal); and a
platform fault (the operator stopped, its webhooks unreachable) blocks step 2 without a failed attempt.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_suite import yamlio
from deploy_suite.access.kube import DGD
from deploy_suite.errors import KubeError
from deploy_suite.fixtures.experiments.make_experiment import stage_candidate
from deploy_suite_offline import procs
from deploy_suite_offline.cluster import CONTROLLERS
from deploy_suite_offline.operator_sim.profiles import PROFILES
from tests import support
from tests.support import outcomes
from tests.support.targets import Target

pytestmark = [pytest.mark.cluster]

SAMPLE_DGD = "demo-agg"
WEBHOOK_PROFILES = [p for p in PROFILES if p != "0.9"]  # 0.9 has no admission webhook


@pytest.fixture(params=list(PROFILES))
def profile(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _target(offline_clusters: Any, profile: str, tmp_path: Path) -> Iterator[Target]:
    with support.admin_target(offline_clusters.get("default", operator=profile), tmp_path, "profile",
                              Target) as target:
        yield target
        for path in tmp_path.rglob("deployment_ledger.json"):
            support.read_ledger(path)


@pytest.fixture
def target(offline_clusters: Any, profile: str, tmp_path: Path) -> Iterator[Target]:
    yield from _target(offline_clusters, profile, tmp_path)


def ready(run: support.SuiteRun) -> dict[str, Any]:
    assert run.returncode == 0, run.output[-4000:]
    led = run.ledger()
    assert led["status"] == "ready", (led["blockers"], outcomes(led))
    assert led["failed_attempts"] == [] and led["readiness"]["state"] == "ready"
    assert led["smoke"]["success"] == 1
    return led


def disagg_candidate(exp_root: Path) -> None:
    """Make the staged iteration-1 candidate disaggregated (a prefill and a decode worker) under the
    sample's DGD name: adding a component, which the operator forbids as an update."""
    draft = exp_root / "candidates" / "iter-001" / "deploy-draft.yaml"
    doc = yamlio.load_one(draft)
    services = doc["spec"]["services"]
    decode = services["VllmDecodeWorker"]
    decode["subComponentType"] = "decode"
    prefill = yaml.safe_load(yaml.safe_dump(decode))
    prefill["subComponentType"] = "prefill"
    prefill["extraPodSpec"]["mainContainer"]["args"] = [
        decode["extraPodSpec"]["mainContainer"]["args"][0].replace("--max-num-seqs 64", "--is-prefill-worker")]
    services["VllmPrefillWorker"] = prefill
    draft.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


def test_the_sample_iterations_0_and_1_end_ready(target: Target, profile: str) -> None:
    exp = target.experiment()
    led0 = ready(target.run(exp))
    led1 = ready(target.run(exp, iteration=1, handoff=stage_candidate(exp.exp_root, 1)))
    assert led1["retired_previous"]["action"] == "deleted"
    # How the status was known to describe the spec: observedGeneration from 1.0 on, never before.
    rule = "never-updated" if profile == "0.9" else "observedGeneration"
    assert led0["readiness"]["generation_rule"] == led1["readiness"]["generation_rule"] == rule


@pytest.mark.parametrize("profile", WEBHOOK_PROFILES, indirect=True)
def test_agg_then_disagg_under_the_same_name_ends_ready_though_the_update_is_refused(target: Target) -> None:
    exp = target.experiment()
    ready(target.run(exp))
    disagg_candidate(exp.exp_root)
    handoff = stage_candidate(exp.exp_root, 1)
    draft = yamlio.load_one(exp.exp_root / "artifacts" / "deploy-iter-000" / "next-candidate" / "deploy-draft.yaml")

    # The operator's webhook really refuses the in-place update (a server dry-run: nothing changes).
    with pytest.raises(KubeError) as refused:
        target.kube.apply(draft, target.namespace, dry_run=True)
    assert 'admission webhook "vdynamographdeployment.kb.io" denied the request' in str(refused.value)
    live = target.kube.get(DGD, SAMPLE_DGD, target.namespace)
    assert "VllmPrefillWorker" not in str(live["spec"])

    # Step 2 judges the candidate as the create step 5 will make once step 3 has deleted the old DGD.
    led1 = ready(target.run(exp, iteration=1, handoff=handoff))
    assert set(led1["readiness"]["components"]) == {"Frontend", "VllmDecodeWorker", "VllmPrefillWorker"}
    judged = led1["preflight"]["dgd_dry_run"]
    assert judged["mode"] == "create-as" and judged["name"] != SAMPLE_DGD, judged
    assert "immutable" in str(judged.get("update_verdict")), judged


@pytest.mark.parametrize("profile", ["latest"], indirect=True)
def test_a_stopped_operator_blocks_step_2_as_a_platform_fault(target: Target) -> None:
    # The operator replica stops: its webhooks no longer answer, their configurations stay.
    procs.terminate([target.cluster.status().pids[CONTROLLERS]])
    try:
        run = target.run(target.experiment())
        led = run.ledger()
        assert run.returncode != 0 and led["status"] == "blocked", outcomes(led)
        assert outcomes(led)["step2_validate"] == "blocked"
        assert [b["class"] for b in led["blockers"]] == ["platform"], led["blockers"]
        assert "webhook" in led["blockers"][0]["message"]
        assert led["failed_attempts"] == []
        assert not [c for c in led["commands"] if c["kind"] == "mutate"]
    finally:
        target.cluster.up()  # starts the operator replica again and waits for its webhooks
