"""Reruns on the offline cluster, as a user makes them: resume is idempotent at every step boundary.

* iteration 1 keeps iteration 0's DGD name (the sample's ``demo-agg``); its run is killed right
  after step 5 (``DEPLOY_SUITE_TEST_KILL_AFTER``), or simply ends ``ready``; the rerun ends
  ``ready`` with the same DGD (``metadata.uid`` unchanged), never asks the apiserver to delete it
  (the audit log, picked out by the rerun's user agent) and leaves iteration 0's ``torn_down_at``
  as the first run wrote it;
* a rerun on a cluster with exactly enough GPUs for one copy of the DGD (another tenant holds every
  other GPU the DGD could use) passes step 2: its own pods are not another tenant's;
* the chain of iterations: 0 ready, 1 blocked in step 2, 2 (previous root = 1, same DGD name)
  ready: step 3 of iteration 2 retires iteration 0's DGD, writes ``torn_down_at`` into iteration
  0's ledger and leaves iteration 1's byte-identical; the claim iteration 0's DGD asked the operator
  to create (``pvcs[].create: true``, owned by the DGD as every operator generation does) survives.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_suite.access.kube import DGD, Obj
from deploy_suite.fixtures.experiments.make_experiment import SAMPLE_ROOT, Experiment, stage_candidate
from deploy_suite.judges import conditions
from deploy_suite.plugins.ledger import KILL_ENV
from deploy_suite.record import ledger
from deploy_suite_offline.cluster import OfflineCluster
from tests import support
from tests.support import SuiteRun, Target

pytestmark = [pytest.mark.cluster]

SAMPLE_DGD = "demo-agg"
DGD_LABEL = "nvidia.com/dynamo-graph-deployment-name"
H200_NODES = ("h200-0", "h200-1")  # the default layout's GPU nodes the sample can use (8 GPUs each)


@pytest.fixture
def target(offline_cluster: OfflineCluster, tmp_path: Path) -> Iterator[Target]:
    with support.admin_target(offline_cluster, tmp_path, "resume", Target) as made:
        yield made


def uid_of(target: Target) -> str:
    live = target.kube.get(DGD, SAMPLE_DGD, target.namespace)
    return str(live["metadata"]["uid"])


def audited_rerun(target: Target, exp_root: Path, iteration: int, handoff: Path | None) -> tuple[SuiteRun, list[Obj]]:
    """Rerun the suite with a user agent of its own; its requests from the apiserver's audit log."""
    agent = support.new_user_agent(f"resume-rerun/iter-{iteration}")
    rerun = SuiteRun(exp_root, iteration, target.kubeconfig, target.reports, (), handoff, {}, agent)
    assert rerun.run() == 0, rerun.output[-4000:]
    sentinel = support.sentinel_kube(target.context, target.kubeconfig, agent)
    try:
        return rerun, support.audit_events(target.cluster.info().audit_log, sentinel, agent)
    finally:
        sentinel.close()


def dgd_deletes(events: list[Obj]) -> list[str]:
    return [support.describe(e) for e in support.mutations(events)
            if e.get("verb") == "delete" and (e.get("objectRef") or {}).get("resource") == "dynamographdeployments"]


def assert_ready_again(led: dict[str, Any], uid: str) -> None:
    assert led["status"] == "ready", (support.outcomes(led), led["blockers"])
    assert led["smoke"]["success"] == 1 and led["failed_attempts"] == []
    assert led["applied_dgd"]["uid"] == uid and led["torn_down_at"] is None
    assert len(led["resumes"]) == 1
    # One allocation interval, still open: the rerun on the same live DGD did not start another.
    assert [i["released_at"] for i in led["allocations"]] == [None]
    assert led["allocations"][0]["allocated_at"] == led["allocated_at"]


@pytest.mark.parametrize("killed_after", ["step5_apply", None], ids=["killed-after-step5", "after-ready"])
def test_a_rerun_of_iteration_1_keeps_its_own_dgd_of_the_same_name(target: Target, killed_after: str | None) -> None:
    exp = target.experiment()
    first = target.run(exp)
    assert first.returncode == 0, first.output[-4000:]
    handoff = stage_candidate(exp.exp_root, 1)  # same DGD name, one unpinned knob changed
    second = target.suite(exp, iteration=1, handoff=handoff, env={KILL_ENV: killed_after} if killed_after else None)
    rc = second.run()
    assert rc == (-signal.SIGKILL if killed_after else 0), second.output[-4000:]
    killed = second.ledger()
    uid = uid_of(target)
    assert killed["applied_dgd"]["uid"] == uid  # recorded at apply
    torn0 = support.read_ledger(first.ledger_path)["torn_down_at"]
    assert torn0 is not None  # the first run of iteration 1 retired iteration 0

    rerun, events = audited_rerun(target, exp.exp_root, 1, handoff)
    led = rerun.ledger()
    assert_ready_again(led, uid)
    assert uid_of(target) == uid
    assert dgd_deletes(events) == []
    assert support.read_ledger(first.ledger_path)["torn_down_at"] == torn0
    retired = led["retired_previous"]  # the first run's deletion kept, the rerun's decision beside it
    assert retired["existed"] is True and retired["torn_down_at"] == torn0
    assert retired["rerun"]["action"] == "own-dgd-live" and retired["rerun"]["existed"] is False
    assert support.step(led, "step3_retire_previous")["outcome"] == "passed"


def test_a_rerun_on_a_cluster_with_gpus_for_exactly_one_copy_passes_step_2(target: Target) -> None:
    exp = target.experiment()
    first = target.run(exp)
    assert first.returncode == 0, first.output[-4000:]
    uid = uid_of(target)
    pods = target.kube.list_items("Pod", target.namespace, label_selector=f"{DGD_LABEL}={SAMPLE_DGD}")[0]
    mine = {node: 0 for node in H200_NODES}
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if node in mine:
            mine[node] += conditions.gpus_of(pod)
    assert sum(mine.values()) == first.ledger()["gpus_requested"] == 1, mine
    # Another tenant takes every GPU the DGD could use but its own: exactly one copy fits.
    for node, own in mine.items():
        target.hold_gpus([node], 8 - own)

    rerun, events = audited_rerun(target, exp.exp_root, 0, None)
    led = rerun.ledger()
    assert_ready_again(led, uid)
    assert led["capacity"]["capacity"] == "sufficient", led["capacity"]
    assert led["capacity"]["excluded_dgds"] == [f"{target.namespace}/{SAMPLE_DGD}"]
    assert dgd_deletes(events) == [] and uid_of(target) == uid


# ------------------------------------------------------------------ the chain of iterations

OWNED_CACHE = "e2e-owned-cache"
# The sample's DGD with its model cache created by the operator (no support manifests needed).
OWNED_PVC = f"""  pvcs:
    - name: {OWNED_CACHE}
      create: true
      storageClass: standard
      size: 1Gi
      volumeAccessMode: ReadWriteOnce
"""


def owned_cache_dgd(dest: Path) -> Path:
    text = (SAMPLE_ROOT / "inputs" / "user_provided_dgd.yaml").read_text(encoding="utf-8")
    text = text.replace("  pvcs:\n    - name: model-cache\n      create: false\n", OWNED_PVC)
    text = text.replace("- name: model-cache\n", f"- name: {OWNED_CACHE}\n")
    assert OWNED_CACHE in text and "model-cache" not in text
    dest.write_text(text, encoding="utf-8")
    return dest


def stage(exp: Experiment, iteration: int, draft: str) -> Path:
    """Iteration ``iteration``'s candidate (``draft``) and handoff, previous root = iteration - 1."""
    source = exp.exp_root / "candidates" / f"iter-{iteration:03d}"
    source.mkdir(parents=True, exist_ok=True)
    (source / "deploy-draft.yaml").write_text(draft, encoding="utf-8")
    prev = f"artifacts/deploy-iter-{iteration - 1:03d}"
    (source / f"handoff-iter-{iteration:03d}.template.yaml").write_text(
        f"iteration: {iteration}\nprovenance: hypothesis-challenger\nreview_id: \"${{REVIEW_ID}}\"\nexp_root: .\n"
        "workload: user_workload.yaml\nworkload_sha256: \"${WORKLOAD_SHA256}\"\n"
        f"dgd: {prev}/next-candidate/deploy-draft.yaml\ndgd_sha256: \"${{DGD_SHA256}}\"\n"
        f"prev_deploy_root: {prev}\nstorage_class: standard\n", encoding="utf-8")
    return stage_candidate(exp.exp_root, iteration)


def test_a_blocked_iteration_is_passed_over_and_the_operator_made_cache_survives(target: Target) -> None:
    exp = target.experiment(owned_cache_dgd(target.tmp / "owned-cache-dgd.yaml"), support={})
    baseline = (exp.exp_root / "inputs" / "user_provided_dgd.yaml").read_text(encoding="utf-8")
    first = target.run(exp)
    assert first.returncode == 0, first.output[-4000:]
    uid0 = uid_of(target)
    cache = target.kube.get("PersistentVolumeClaim", OWNED_CACHE, target.namespace)
    assert [o["uid"] for o in cache["metadata"]["ownerReferences"]] == [uid0]  # the replica owns it

    blocked = target.run(exp, iteration=1, handoff=stage(exp, 1, baseline.replace(
        "envFromSecret: hf-token-secret", "envFromSecret: hf-token-absent")))
    led1 = blocked.ledger()
    assert led1["status"] == "blocked" and led1["blockers"][-1]["class"] == "secret", led1["blockers"]
    assert support.step(led1, "step2_validate")["outcome"] == "blocked" and led1["applied_dgd"] is None
    ledger0, ledger1 = first.ledger_path, blocked.ledger_path
    before0, bytes1 = support.read_ledger(ledger0), ledger1.read_bytes()

    second = target.run(exp, iteration=2, handoff=stage(exp, 2, baseline.replace(
        "--served-model-name Qwen/Qwen3-0.6B", "--served-model-name Qwen/Qwen3-0.6B --max-num-seqs 32")))
    assert second.returncode == 0, second.output[-4000:]
    led2 = second.ledger()
    retired = led2["retired_previous"]
    assert (retired["action"], retired["dgd"], retired["ledger"], retired["passed_over"]) == (
        "deleted", SAMPLE_DGD, f"artifacts/deploy-iter-000/{ledger.LEDGER_NAME}", ["artifacts/deploy-iter-001"])
    assert (led2["previous_deployment"]["iteration"], led2["previous_deployment"]["passed_over"]) == (
        0, ["artifacts/deploy-iter-001"])
    # torn_down_at into iteration 0's ledger, nothing else changed there; iteration 1's untouched.
    after0 = support.read_ledger(ledger0)
    assert retired["torn_down_at"] and after0 == {**before0, "torn_down_at": retired["torn_down_at"]}
    assert ledger1.read_bytes() == bytes1
    # The model cache: the same claim (never deleted, so not re-created by iteration 2's operator
    # reconcile), no longer owned by the retired DGD nor by the new one.
    kept = target.kube.get("PersistentVolumeClaim", OWNED_CACHE, target.namespace)
    assert kept["metadata"]["uid"] == cache["metadata"]["uid"] and "deletionTimestamp" not in kept["metadata"]
    assert kept["metadata"].get("ownerReferences") in (None, [])
    assert retired["kept_claims"] == [OWNED_CACHE]
    assert uid_of(target) == led2["applied_dgd"]["uid"] != uid0
