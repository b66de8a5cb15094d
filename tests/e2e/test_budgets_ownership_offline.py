"""Budgets and ownership on the offline cluster, as a user runs the suite: a spent budget and a
same-named DGD of someone else both stop the run in step 2, before anything is retired or applied.

The budget runs play an optimization loop: iterations 0 and 1 become ready (iteration 1 retires
iteration 0), then iteration 2 is run with each budget spent in turn. How a budget got spent is
history the test writes where the loop keeps it: ``manifest.yaml``'s session start (wall clock),
and, for the failed deploys and GPU-hours, iteration 0's retired ledger (a failed attempt, an
earlier allocation), a file the harness only reads once iteration 1 has retired it. A dependency is
never charged: a run blocked by a missing secret key leaves a budget of one failed deploy whole.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_suite import yamlio
from deploy_suite.access.kube import DGD, Kube, Obj
from deploy_suite.access.watch import Watch
from deploy_suite.constants import LABEL_COMPONENT_TYPE
from deploy_suite.fixtures.experiments.make_experiment import Experiment, refresh, set_line, stage_candidate
from deploy_suite.record import ledger
from deploy_suite_offline import faults
from deploy_suite_offline.cluster import OfflineCluster
from tests import support
from tests.support import SuiteRun, outcomes

pytestmark = [pytest.mark.cluster]

DATA = Path(__file__).with_name("data")
SAMPLE_DGD = "demo-agg"


@pytest.fixture
def target(offline_cluster: OfflineCluster, tmp_path: Path) -> Iterator[support.Target]:
    with support.admin_target(offline_cluster, tmp_path, "e2e-own", support.Target) as target:
        yield target
        for path in tmp_path.rglob(ledger.LEDGER_NAME):  # every ledger the test produced is schema-valid
            support.read_ledger(path)


def wait_successful(kube: Kube, namespace: str, name: str, timeout: float = 120.0) -> Obj:
    def done(objs: dict[str, Obj]) -> tuple[bool, str]:
        obj = objs.get(f"{namespace}/{name}")
        state = ((obj or {}).get("status") or {}).get("state")
        return state == "successful", f"dgd/{name} state {state}"

    kube.wait_for(Watch(DGD, namespace, name=name), done, awaited=f"dgd/{name} successful", timeout=timeout)
    return kube.get(DGD, name, namespace)


def assert_blocked_in_step2(run: SuiteRun, cls: str) -> dict[str, Any]:
    """Blocked in step 2 with ``cls`` as the line it stopped with; no later step ran; no mutation."""
    assert run.returncode != 0, run.output[-3000:]
    led = run.ledger()
    got = outcomes(led)
    assert led["status"] == "blocked" and got["step2_validate"] == "blocked", (got, led["blockers"])
    assert all(got[s] == "skipped" for s in list(got)[2:]), got
    assert led["blockers"][-1]["class"] == cls and led["blockers"][-1]["step"] == "step2_validate"
    assert [c["command"] for c in led["commands"] if c["kind"] == "mutate"] == []
    return led


# ------------------------------------------------------------------ ownership


def test_a_foreign_dgd_of_the_same_name_blocks_step2_and_is_never_changed(target: support.Target) -> None:
    exp = target.experiment(DATA / "dgd-beta-agg.yaml", support={})
    foreign_doc = yamlio.load_one(exp.exp_root / "inputs" / "user_provided_dgd.yaml")
    name = foreign_doc["metadata"]["name"]
    # Someone else's DGD of the same name: created by another client (its own field manager).
    target.kube.create(foreign_doc, target.namespace)
    before = wait_successful(target.kube, target.namespace, name)

    run = target.run(exp)

    led = assert_blocked_in_step2(run, "ownership")
    blocker = led["blockers"][-1]
    assert blocker["message"].startswith(f"DynamoGraphDeployment {target.namespace}/{name} exists and was not "
                                         "created by this experiment (field managers: ")
    assert "step 5 would apply over it: refused before any change" in blocker["message"]
    assert "the harness never changes or deletes a DGD it did not create" in blocker["fix"]
    assert [(o["dgd"], o["state"]) for o in led["preflight"]["ownership"]] == [(name, "foreign")]
    assert "not created by this experiment" in run.output  # the one line of the terminal
    after = target.kube.get(DGD, name, target.namespace)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_the_experiments_own_dgd_reads_back_as_ours_on_a_rerun(target: support.Target) -> None:
    exp = target.experiment(DATA / "dgd-beta-agg.yaml", support={})
    first = target.run(exp)
    assert first.returncode == 0, first.output[-3000:]
    live = target.kube.get(DGD, "e2e-beta-agg", target.namespace)
    managers = [f["manager"] for f in live["metadata"]["managedFields"]]
    mine = [m for m in managers if m.startswith("deploy-suite/")]
    assert len(mine) == 1, managers  # applied with the experiment's field manager, read back

    again = target.run(exp)  # a rerun of the same iteration: its own live DGD is not foreign
    assert again.returncode == 0, again.output[-3000:]
    led = again.ledger()
    assert ("e2e-beta-agg", "ours") in [(o["dgd"], o["state"]) for o in led["preflight"]["ownership"]]


# ------------------------------------------------------------------ budgets


def stage_iteration_2(exp: Experiment) -> Path:
    """The generator's candidate for iteration 2 (iteration 1's, one knob changed again), staged
    under iteration 1's ``next-candidate/`` with its handoff."""
    source = exp.exp_root / "candidates" / "iter-001"
    dest = exp.exp_root / "candidates" / "iter-002"
    dest.mkdir()
    draft = (source / "deploy-draft.yaml").read_text(encoding="utf-8")
    (dest / "deploy-draft.yaml").write_text(draft.replace("--max-num-seqs 64", "--max-num-seqs 32"), encoding="utf-8")
    template = (source / "handoff-iter-001.template.yaml").read_text(encoding="utf-8")
    (dest / "handoff-iter-002.template.yaml").write_text(
        template.replace("iteration: 1", "iteration: 2").replace("deploy-iter-000", "deploy-iter-001"),
        encoding="utf-8")
    return stage_candidate(exp.exp_root, 2)


def iso(at: dt.datetime) -> str:
    return at.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def test_a_spent_budget_blocks_iteration_2_in_step2_and_iteration_1_stays_live(target: support.Target) -> None:
    exp = target.experiment()
    root = exp.exp_root
    workload, manifest = root / "user_workload.yaml", root / "manifest.yaml"
    for key in ("max_failed_deploys", "gpu_hours", "wall_clock_hours"):
        set_line(workload, key, "1")
    set_line(manifest, "session_started_at", json.dumps(iso(dt.datetime.now(dt.UTC))))
    exp = refresh(root)

    for iteration in (0, 1):
        handoff = stage_candidate(root, 1) if iteration else None
        run = target.run(exp, iteration=iteration, handoff=handoff)
        assert run.returncode == 0 and run.ledger()["status"] == "ready", run.output[-3000:]
    handoff2 = stage_iteration_2(exp)
    ledger0 = root / "artifacts" / "deploy-iter-000" / ledger.LEDGER_NAME
    ledger1 = root / "artifacts" / "deploy-iter-001" / ledger.LEDGER_NAME
    live1 = target.kube.get(DGD, SAMPLE_DGD, target.namespace)
    saved0 = ledger0.with_suffix(".saved")
    shutil.copyfile(ledger0, saved0)

    def spend(case: str) -> None:
        shutil.copyfile(saved0, ledger0)  # each case alone
        data = json.loads(ledger0.read_text())
        two_hours_ago = iso(dt.datetime.now(dt.UTC) - dt.timedelta(hours=2))
        if case == "max_failed_deploys":  # iteration 0 had an attempt that could never schedule
            data["failed_attempts"].append({"at": data["allocated_at"], "step": "step6_readiness",
                                            "category": "failed-deploy", "evidence": [],
                                            "diagnosis": "untolerated taint (played by the test)"})
        elif case == "gpu_hours":  # iteration 0 held its GPU for two hours before it was retired
            # Its one allocation interval (docs/procedure.md, "Resume"), closed by the torn_down_at step 3 wrote.
            data["allocated_at"] = two_hours_ago
            data["allocations"] = [{"allocated_at": two_hours_ago, "released_at": None}]
        else:  # the session started two hours ago
            set_line(manifest, "session_started_at", json.dumps(two_hours_ago))
        ledger0.write_text(json.dumps(data, indent=2))

    for case, says in (("max_failed_deploys", "failed-deploy budget spent: 1 failed deploy(s)"),
                       ("gpu_hours", "GPU-hour budget spent: 2."),
                       ("wall_clock_hours", "wall-clock budget spent: 2.")):
        spend(case)
        before1 = ledger1.read_bytes()
        run = target.run(exp, iteration=2, handoff=handoff2)
        led = assert_blocked_in_step2(run, "budget")
        assert led["blockers"][-1]["message"].startswith(says), led["blockers"]
        assert "nothing was retired or applied" in led["blockers"][-1]["message"]
        section = led["budget"]
        assert section[case]["spent"] and section[case]["limit"] == 1
        assert [k for k in ("max_failed_deploys", "gpu_hours", "wall_clock_hours") if section[k]["spent"]] == [case]
        assert led["retired_previous"] is None
        # Iteration 1: its DGD still live (the same object), its ledger unchanged.
        now1 = target.kube.get(DGD, SAMPLE_DGD, target.namespace)
        assert now1["metadata"]["uid"] == live1["metadata"]["uid"] and "deletionTimestamp" not in now1["metadata"]
        assert now1["status"]["state"] == "successful"
        assert ledger1.read_bytes() == before1
        page = run.report().read_text(encoding="utf-8")
        assert "(spent)</b>" in page and "budget is spent" in page
        # The experiment page's top line: the spent budget as the experiment's blocker, then what to do.
        top = (exp.exp_root / "artifacts" / "experiment.html").read_text(encoding="utf-8")
        top = top.split('id="dsr-top">')[1].split("</div>")[0]
        assert "blockers (1)" in top and says in top and "budget is spent" in top, top


# ------------------------------------------------------------------ a dependency is not a failed deploy


def test_a_missing_secret_key_blocks_without_charging_and_a_rerun_after_the_key_is_ready(
        target: support.Target) -> None:
    """A run stopped by a dependency is blocked (class dependency), no failed attempt; once the
    cluster admin adds the key, a rerun of the same iteration on a failed-deploy budget of one ends
    ready (docs/procedure.md, "Outcomes")."""
    exp = target.experiment(DATA / "dgd-secret-key.yaml", support={})
    set_line(exp.exp_root / "user_workload.yaml", "max_failed_deploys", "1")
    exp = refresh(exp.exp_root)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": support.SECRET}, "type": "Opaque"}
    # The admin's secret lacks the key the worker reads; the kubelet's words (CreateContainerConfigError)
    # are played by a kwok fault on the worker's pod for as long as the key is missing.
    target.kube.delete("Secret", support.SECRET, target.namespace)
    target.kube.create({**secret, "stringData": {"hf_token": "placeholder-not-a-real-token"}}, target.namespace)
    worker = [*faults.by_dgd("e2e-secret-key", target.namespace),
              {"key": f'.metadata.labels["{LABEL_COMPONENT_TYPE}"]', "operator": "In", "values": ["worker"]}]
    fault = faults.missing_secret_key(f"e2e-key-{target.namespace}", worker, support.SECRET, "HF_TOKEN")
    target.apply_fault(fault)

    first = target.run(exp)

    assert first.returncode != 0, first.output[-3000:]
    led = first.ledger()
    assert (led["status"], led["current_step"]) == ("blocked", "step6_readiness"), outcomes(led)
    (blocker,) = led["blockers"]
    assert blocker["class"] == "dependency" and "couldn't find key HF_TOKEN" in blocker["message"], blocker
    assert led["failed_attempts"] == [] and led["teardown"]["action"] == "kept"
    assert f"blocked: {blocker['message']}; fix: {blocker['fix']}" in first.output  # the terminal's one line
    # Still held by the missing key (the DGD was kept for the fix), not ready behind the harness's back.
    pods, _ = target.kube.list_items("Pod", target.namespace, label_selector=f"{LABEL_COMPONENT_TYPE}=worker")
    assert [((c.get("state") or {}).get("waiting") or {}).get("reason") for p in pods
            for c in p["status"].get("containerStatuses") or []] == ["CreateContainerConfigError"]

    # The cluster admin adds the key; the kubelet's next try would start the container. kwok plays no
    # such retry (a pod it left waiting stays so), so the waiting pod is replaced by its ReplicaSet.
    target.kube.delete("Secret", support.SECRET, target.namespace)
    target.kube.create({**secret, "stringData": {"HF_TOKEN": "placeholder-not-a-real-token"}}, target.namespace)
    faults.remove(target.kube, fault)
    target.kwok_faults.remove(fault)
    for pod in pods:
        target.kube.delete("Pod", pod["metadata"]["name"], target.namespace)

    again = target.run(exp)  # the same iteration, the same handoff: it resumes in the same directory

    led = again.ledger()
    assert again.returncode == 0 and led["status"] == "ready", (outcomes(led), led["blockers"], again.output[-3000:])
    charged = led["budget"]["max_failed_deploys"]
    assert (charged["used"], charged["limit"], charged["spent"]) == (0, 1, False)
    assert led["failed_attempts"] == [] and led["resumes"][-1]["previous_status"] == "blocked"
