"""The retire chain and step 6's teardown on the offline cluster, as a user runs ``pytest --iter=N``.

* iteration 0's DGD deleted by someone else before iteration 1 (the ledger's own cleanup command):
  step 3 records it gone and writes ``torn_down_at`` into iteration 0's ledger (how it was known in
  ``retired_previous.torn_down_basis``), so its GPUs stop counting and its GPU-hours stop growing;
* iteration 0's DGD re-applied by another tool (a plain create: another field manager), its ledger
  naming it exactly (name, namespace, context, uid): step 2 says ``recorded``, step 3 retires it;
* step 6's teardown interrupted (SIGINT in its pods-gone wait, the pods held by a slow kwok delete):
  the failed attempt is in the ledger, the ledger is valid, and a rerun of the iteration counts it
  once and ends ready.
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
from deploy_suite.access.kube import DGD
from deploy_suite.fixtures.experiments.make_experiment import stage_candidate
from deploy_suite.procedure import waits
from deploy_suite.record import experiment, ledger, resume
from deploy_suite_offline import faults
from deploy_suite_offline.cluster import OfflineCluster
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


def test_a_previous_dgd_deleted_by_its_cleanup_command_gets_torn_down_at(target: Target) -> None:
    exp = target.experiment()
    first = target.run(exp)
    led0 = ready(first)
    # Someone runs the ledger's own cleanup command (the kubectl delete it records) and waits.
    (cleanup,) = [c for c in led0["cleanup_commands"] if " delete dynamographdeployments" in c]
    argv = [a for a in shlex.split(cleanup) if a != "--wait=false"]
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


def test_a_teardown_interrupted_in_its_pods_gone_wait_keeps_the_failed_attempt(target: Target) -> None:
    exp = target.experiment()
    crash = faults.crash_loop(f"crash-{target.namespace}", faults.by_dgd(SAMPLE_DGD, target.namespace))
    target.apply_fault(crash)
    # Once deleted, the DGD's pods take a while to go: the teardown's pods-gone wait is certainly on.
    target.slow("pod-delete", faults.by_dgd(SAMPLE_DGD, target.namespace), 120)
    run = target.suite(exp)
    interrupted = run.on(r"\[step6_readiness\] \d+ pods left", lambda: os.kill(run.pid, signal.SIGINT))
    run.run()
    assert interrupted.fired_at is not None, run.output[-3000:]
    data = support.read_ledger(run.ledger_path)  # schema-valid
    (attempt,) = data["failed_attempts"]
    assert attempt["step"] == "step6_readiness" and attempt["category"] == "crash" and attempt["diagnosis"]
    assert data["teardown"]["action"] == "deleting" and data["torn_down_at"] is None
    assert data["readiness"]["failure_evidence"]
    assert target.kube.get_or_none(DGD, SAMPLE_DGD, target.namespace) is None  # the delete was asked for

    # The crash is fixed; the held pods go; the same iteration is run again.
    for fault in list(target.kwok_faults):
        faults.remove(target.kube, fault)
        target.kwok_faults.remove(fault)
    target.kube.wait(waits.dgd_pods_gone(target.namespace, SAMPLE_DGD), timeout=300)
    again = target.run(exp)
    led = ready(again)
    assert led["failed_attempts"] == data["failed_attempts"]  # counted once, not again
    assert [r["previous_status"] for r in led["resumes"]] == [data["status"]]
