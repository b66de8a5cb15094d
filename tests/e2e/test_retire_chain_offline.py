"""The retire chain and step 6's teardown on the offline cluster, as a user runs ``pytest --iter=N``.

* iteration 0's DGD deleted by someone else before iteration 1 (the ledger's own cleanup command):
  step 3 records it gone and writes ``torn_down_at`` into iteration 0's ledger (how it was known in
  ``retired_previous.torn_down_basis``), so its GPUs stop counting and its GPU-hours stop growing;
* iteration 0's DGD re-applied by another tool (a plain create: another field manager), its ledger
  naming it exactly (name, namespace, context, uid): step 2 says ``recorded``, step 3 retires it;
* iteration 1 run by a namespace-scoped identity that may not list the namespace's claims (only
  read its own ``model-cache`` by name): step 3 still retires iteration 0's DGD, which declares no
  claim for the operator to create (``spec.pvcs[].create: false``), says why no claim needed
  keeping, and the claim survives;
* step 6's teardown interrupted (SIGINT in its pods-gone wait, the pods held by a slow kwok delete):
  the failed attempt is in the ledger, the ledger is valid; a rerun finds its own DGD gone and writes
  ``torn_down_at`` (GPU-hours stop growing) even when step 2 then refuses the same copies, and a rerun
  naming the fix (``--retry-reason``) counts the attempt once, re-applies and ends ready;
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_suite import clock
from deploy_suite.access.kube import DGD, Obj
from deploy_suite.errors import Forbidden
from deploy_suite.fixtures.experiments.make_experiment import stage_candidate
from deploy_suite.procedure import waits
from deploy_suite.record import experiment, ledger, resume
from deploy_suite_offline import faults
from deploy_suite_offline.cluster import OfflineCluster
from deploy_suite_offline.fixtures.identities import DEPLOYER_RULES, namespaced_identity
from tests import support
from tests.support import Target, outcomes

pytestmark = [pytest.mark.cluster]

SAMPLE_DGD = "demo-agg"


@pytest.fixture
def target(offline_cluster: OfflineCluster, tmp_path: Path) -> Iterator[Target]:
    with support.admin_target(offline_cluster, tmp_path, "e2e-chain", Target) as target:
        yield target
        for path in tmp_path.rglob(ledger.LEDGER_NAME):  # every ledger the test produced is schema-valid
            support.read_ledger(path)


def ready(run: support.SuiteRun) -> dict[str, Any]:
    assert run.returncode == 0, run.output[-3000:]
    led = run.ledger()
    assert led["status"] == "ready", (outcomes(led), led["blockers"])
    return led


def found_gone(diagnostics: list[Any]) -> list[dict[str, Any]]:
    """What step 2 recorded on finding this iteration's own DGD gone."""
    return [d["own_dgd_found_gone"] for d in diagnostics if isinstance(d, dict) and "own_dgd_found_gone" in d]


def test_a_previous_dgd_deleted_by_its_cleanup_command_gets_torn_down_at(target: Target) -> None:
    exp = target.experiment()
    first = target.run(exp)
    led0 = ready(first)
    # Someone runs the ledger's own cleanup command (the kubectl delete it records) and waits.
    # The command step 5 records is the procedure's own (``kubectl delete dynamographdeployment``).
    (cleanup,) = [c for c in led0["cleanup_commands"] if f" delete dynamographdeployment {SAMPLE_DGD} " in f"{c} "]
    argv = shlex.split(cleanup)
    assert argv[:3] == ["kubectl", "--context", target.context] and argv[-2:] == ["-n", target.namespace], argv
    env = {**os.environ, "KUBECONFIG": target.kubeconfig}
    subprocess.run(argv, check=True, env=env, capture_output=True, timeout=60)
    target.kube.wait(waits.dgd_pods_gone(target.namespace, SAMPLE_DGD), timeout=120)
    gone_by = clock.iso_now()

    second = target.run(exp, iteration=1, handoff=stage_candidate(exp.exp_root, 1))
    led1 = ready(second)
    section = led1["retired_previous"]
    assert section["action"] == "already-gone" and section["existed"] is False
    basis = section["torn_down_basis"]
    assert basis["source"] == "observed-gone" and basis["exact"] is False and "upper bound" in basis["explanation"]
    data0 = support.read_ledger(first.ledger_path)
    assert data0["torn_down_at"] == section["pods_gone_at"] >= gone_by
    # Its GPUs stop counting against gpu_ceiling and its GPU-hours stop growing.
    later = "2099-01-01T00:00:00Z"
    assert resume.gpu_hours(data0, later) == resume.gpu_hours(data0) > 0
    summaries = experiment.ledgers(exp.exp_root)
    held, names = experiment.other_live_gpus(exp.exp_root, exp.exp_root / "artifacts" / "deploy-iter-002",
                                             second.deploy_root, summaries)
    assert (held, names) == (0, [])


def test_a_previous_dgd_another_tool_applied_is_retired_when_its_ledger_names_it(target: Target) -> None:
    exp = target.experiment()
    first = target.run(exp)
    ready(first)
    # Another tool (kubectl apply, NVIDIA's skill) deployed iteration 0: another field manager, and
    # its ledger names that DGD (name, namespace, context and its uid).
    live = target.kube.get(DGD, SAMPLE_DGD, target.namespace)
    doc = {k: live[k] for k in ("apiVersion", "kind", "spec")}
    doc["metadata"] = {"name": SAMPLE_DGD, "namespace": target.namespace}
    target.kube.delete(DGD, SAMPLE_DGD, target.namespace)
    target.kube.wait(waits.dgd_pods_gone(target.namespace, SAMPLE_DGD), timeout=120)
    created = target.kube.create(doc, target.namespace)
    uid = created["metadata"]["uid"]
    managers = [f["manager"] for f in target.kube.get(DGD, SAMPLE_DGD, target.namespace)["metadata"]["managedFields"]]
    assert not [m for m in managers if m.startswith("deploy-suite/")], managers
    data0 = json.loads(first.ledger_path.read_text())
    data0["applied_dgd"]["uid"] = uid
    first.ledger_path.write_text(json.dumps(data0, indent=2))

    second = target.run(exp, iteration=1, handoff=stage_candidate(exp.exp_root, 1))
    led1 = ready(second)
    assert (SAMPLE_DGD, "recorded") in [(o["dgd"], o["state"]) for o in led1["preflight"]["ownership"]]
    section = led1["retired_previous"]
    assert section["action"] == "deleted" and section["ownership"] == "recorded"
    assert support.read_ledger(first.ledger_path)["torn_down_at"] == section["pods_gone_at"]
    now = target.kube.get(DGD, SAMPLE_DGD, target.namespace)
    assert now["metadata"]["uid"] != uid  # iteration 1's own, applied after the retire


CLAIMS = "persistentvolumeclaims"
# The namespaced deployer (offline/deploy_suite_offline/fixtures/identities.py), except that it may read claims only
# by name, its own model-cache's: a namespace-wide list of claims is Forbidden; the named watch of
# step 4 is not (RBAC authorizes a list or watch by ``metadata.name`` against resourceNames).
READS = ("get", "list", "watch")
NO_CLAIM_LIST: tuple[Obj, ...] = (
    *[{**r, "resources": [x for x in r["resources"] if x != CLAIMS]} for r in DEPLOYER_RULES
      if r["resources"] != [CLAIMS]],
    *[{**r, "resources": [CLAIMS], "verbs": [v for v in r["verbs"] if v not in READS]} for r in DEPLOYER_RULES
      if CLAIMS in r["resources"]],
    {"apiGroups": [""], "resources": [CLAIMS], "verbs": list(READS), "resourceNames": ["model-cache"]},
)


def test_a_dgd_owning_no_claim_is_retired_by_an_identity_that_may_not_list_claims(target: Target) -> None:
    # The shipped Role lists claims namespace-wide; this identity may not.
    assert any(CLAIMS in r["resources"] and "list" in r["verbs"] for r in DEPLOYER_RULES)
    who = namespaced_identity(target.kube, target.namespace, target.tmp / "identities", name="no-claim-list",
                              rules=NO_CLAIM_LIST)
    me = who.kube()
    try:
        with pytest.raises(Forbidden):
            me.list_items("PersistentVolumeClaim", target.namespace, metadata_only=True)
    finally:
        me.close()
    exp = support.write_experiment(target.tmp / "scratch", context=who.context, namespace=target.namespace)
    first = support.run_suite(exp.exp_root, 0, who.kubeconfig, target.reports)
    ready(first)
    live0 = target.kube.get(DGD, SAMPLE_DGD, target.namespace)
    assert [p.get("create") for p in live0["spec"]["pvcs"]] == [False]  # declares no claim to create

    second = support.run_suite(exp.exp_root, 1, who.kubeconfig, target.reports,
                               handoff=stage_candidate(exp.exp_root, 1))
    led1 = ready(second)
    section = led1["retired_previous"]
    assert section["action"] == "deleted" and section["existed"] is True and section["kept_claims"] == []
    assert f"the claims of {target.namespace} could not be listed" in section["claims_unlisted"]
    assert "forbidden" in section["claims_unlisted"].lower()
    assert "declares no spec.pvcs[] claim with create: true" in section["claims_unlisted"]
    assert support.read_ledger(first.ledger_path)["torn_down_at"] == section["pods_gone_at"]
    # Iteration 0's DGD is gone (iteration 1's is another uid), the model cache is untouched.
    assert target.kube.get(DGD, SAMPLE_DGD, target.namespace)["metadata"]["uid"] != live0["metadata"]["uid"]
    claim = target.kube.get("PersistentVolumeClaim", "model-cache", target.namespace)
    assert claim["metadata"].get("deletionTimestamp") is None


def test_a_teardown_interrupted_in_its_pods_gone_wait_keeps_the_failed_attempt(target: Target) -> None:
    exp = target.experiment()
    crash = faults.crash_loop(f"crash-{target.namespace}", faults.by_dgd(SAMPLE_DGD, target.namespace))
    target.apply_fault(crash)
    # Once deleted, the DGD's pods take a while to go: the teardown's pods-gone wait is certainly on.
    target.slow("pod-delete", faults.by_dgd(SAMPLE_DGD, target.namespace), 45)
    run = target.suite(exp)
    interrupted = run.on(r"\[step6_readiness\] \d+ pods left", lambda: os.kill(run.pid, signal.SIGINT))
    run.run()
    assert interrupted.fired_at is not None, run.output[-3000:]
    data = support.read_ledger(run.ledger_path)  # schema-valid
    (attempt,) = data["failed_attempts"]
    assert attempt["step"] == "step6_readiness" and attempt["category"] == "crash" and attempt["diagnosis"]
    assert data["teardown"]["action"] == "deleting" and data["torn_down_at"] is None, (data["teardown"],
                                                                                      run.output[-3000:])
    assert data["readiness"]["failure_evidence"]
    assert target.kube.get_or_none(DGD, SAMPLE_DGD, target.namespace) is None  # the delete was asked for

    # The crash is fixed; the held pods go (the GPUs are free from here on).
    for fault in list(target.kwok_faults):
        faults.remove(target.kube, fault)
        target.kwok_faults.remove(fault)
    target.kube.wait(waits.dgd_pods_gone(target.namespace, SAMPLE_DGD), timeout=300)
    gone_by = clock.iso_now()

    # A rerun of the same copies is refused in step 2 ("retry only after a concrete fix": the attempt
    # saved before the teardown counts), but it first finds its own DGD gone and writes torn_down_at,
    # so the GPU-hours of the interrupted attempt stop growing even though the run goes no further.
    refused = target.run(exp)
    assert refused.returncode != 0, refused.output[-3000:]
    held = support.read_ledger(refused.ledger_path)
    assert held["status"] == "blocked" and held["current_step"] == "step2_validate", outcomes(held)
    assert "retry only after a concrete fix" in held["blockers"][-1]["message"]
    assert held["failed_attempts"] == data["failed_attempts"]
    torn = held["torn_down_at"]
    assert torn is not None and torn >= gone_by
    (found,) = found_gone(held["diagnostics"])
    assert found["dgd"] == SAMPLE_DGD and found["torn_down_at"] == torn
    basis = found["torn_down_basis"]
    assert basis["source"] == "observed-gone" and basis["exact"] is False
    assert "step 6 teardown (deleting" in basis["explanation"]
    assert held["allocations"] == data["allocations"] and held["allocations"][-1]["released_at"] is None
    assert resume.gpu_hours(held, "2099-01-01T00:00:00Z") == resume.gpu_hours(held) > 0

    # Run again naming the cluster fix: ready; the attempt counted once; the re-apply closes the
    # interrupted attempt's interval at torn_down_at and a new one opens (nothing counted between).
    again = target.run(exp, "--retry-reason", "the kwok crash-loop fault on the decode worker was removed")
    led = ready(again)
    assert led["failed_attempts"] == data["failed_attempts"]  # counted once, not again
    assert [r["previous_status"] for r in led["resumes"]] == [data["status"], "blocked"]
    (reapply,) = led["reapplies"]
    assert reapply["torn_down_at"] == torn and reapply["reason"] == "re-applied after a teardown"
    first, second = led["allocations"]
    assert first == {"allocated_at": data["allocations"][0]["allocated_at"], "released_at": torn}
    assert second["allocated_at"] >= reapply["at"] >= torn and second["released_at"] is None
    assert led["torn_down_at"] is None and led["allocated_at"] == first["allocated_at"]
    assert found_gone(led["diagnostics"]) == [] and found_gone(led["resumes"][1]["previous_diagnostics"]) == [found]
    # A third run finds its DGD live: nothing is written again (idempotent).
    third = target.run(exp)
    led3 = ready(third)
    assert led3["allocations"] == led["allocations"] and led3["reapplies"] == led["reapplies"]
    assert found_gone(led3["diagnostics"]) == []
