"""Faults a run must survive (docs/reliability.md), each injected into a full run on the offline cluster.

Every test runs ``python -m pytest --iter=N --handoff=... --kubeconfig=...`` from the checkout
root, as a user does, and injects its fault from a watcher thread at the moment the run's own
output says the targeted wait is in progress (a live progress line, or step 7's module starting
and its ``kubectl port-forward`` appearing in /proc). Where a wait would otherwise be over in
milliseconds, a kwok Stage makes one pod transition of this test's pods take a few seconds, so the
fault certainly lands inside it (and the tests assert that it did, from the ledger's step times).

* the kube-apiserver is killed and restarted (same command line, ``restart_component``) during the
  retire wait (step 3, iteration 1), the Job wait (step 4), the readiness wait (step 6) and the
  smoke gates (step 7): the run still ends ``ready``;
* the harness's ``kubectl port-forward`` is killed during the smoke test: it is re-established
  within the gate's bounds (``smoke.port_forward_restarts`` >= 1) and the smoke succeeds;
* the harness is SIGKILLed right after each step's ledger write (``DEPLOY_SUITE_TEST_KILL_AFTER``)
  and once in the middle of step 7: the ledger left behind is valid, the rerun with the same
  inputs resumes in the same directory (one ``resumes`` entry, the history kept) and ends
  ``ready``, and no ``kubectl port-forward`` outlives its run;
* two runs of one iteration at once: the second refuses with one line (the deployment
  directory's lock), writes nothing, and the first ends ``ready``.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import threading
import time
from typing import Any

import pytest

from deploy_suite.fixtures.experiments.make_experiment import stage_candidate
from deploy_suite.plugins.ledger import KILL_ENV
from deploy_suite.procedure.registry import STEP_NAMES
from deploy_suite_offline import faults
from deploy_suite_offline.procs import wait_exit
from tests import support
from tests.support import FaultRecord, SuiteRun, Target

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

DGD_NAME = "demo-agg"  # the sample experiment's DGD (iteration 1's candidate keeps the name)
DOWNLOAD_JOB = "model-download"
SLOW_S = 6.0  # how long the slowed pod transition takes: longer than an apiserver restart here
STEP7_START = r"test_step7_smoke\.py"


def _at(iso: str) -> float:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _duration(data: dict[str, Any], step: str) -> float:
    return float(next(s["duration_s"] for s in data["steps"] if s["name"] == step))


def assert_ready(run: SuiteRun, rc: int) -> dict[str, Any]:
    assert rc == 0, run.output[-4000:]
    data = run.ledger()
    assert data["status"] == "ready", (data["status"], support.outcomes(data), run.output[-3000:])
    assert data["smoke"]["success"] == 1 and data["blockers"] == [] and data["failed_attempts"] == []
    assert data["session"]["exit_status"] == 0
    return data


def assert_inside(data: dict[str, Any], step: str, at: float) -> None:
    """The fault was injected while ``step`` was running (wall clock vs the ledger's step times,
    which have one-second resolution)."""
    entry = next(s for s in data["steps"] if s["name"] == step)
    assert _at(entry["started_at"]) - 1.0 <= at < _at(entry["ended_at"]) + 1.0, (step, entry, at)


class ApiserverRestart:
    """The fault action: kill the kube-apiserver (SIGKILL) and start it again; record the outage."""

    def __init__(self, target: Target, log: list[FaultRecord], scenario: str, step: str,
                 before: Any = None) -> None:
        self.target, self.log, self.scenario, self.step, self.before = target, log, scenario, step, before
        self.at: float | None = None
        self.at_monotonic = 0.0

    def __call__(self) -> None:
        if self.before is not None:
            self.before()
        self.at, self.at_monotonic = time.time(), time.monotonic()
        restart = self.target.cluster.restart_component("kube-apiserver", hard=True)
        self.log.append(FaultRecord(self.scenario, "kube-apiserver killed and restarted", self.step,
                                    restart.outage_s, {"outage_s": restart.outage_s}))


# ------------------------------------------------------------------ kube-apiserver restarts


def test_apiserver_restart_during_the_retire_wait_of_iteration_1(target: Target,
                                                                  faults_log: list[FaultRecord]) -> None:
    exp = target.experiment()
    first = target.suite(exp)
    assert_ready(first, first.run())
    # Iteration 0's pods now take SLOW_S to go once deleted: step 3's wait for them is certainly on.
    target.slow("pod-delete", faults.by_dgd(DGD_NAME, target.namespace), SLOW_S)
    second = target.suite(exp, iteration=1, handoff=stage_candidate(exp.exp_root, 1))
    fault = ApiserverRestart(target, faults_log, "apiserver-restart", "step3_retire_previous")
    second.on(r"\[step3_retire_previous\] \d+ pods left", fault)
    data = assert_ready(second, second.run())
    assert fault.at is not None, "the retire wait never reported pods left"
    assert_inside(data, "step3_retire_previous", fault.at)
    retired = data["retired_previous"]
    assert retired["dgd"] == DGD_NAME and retired["existed"] is True and retired["pods_gone_at"]
    assert support.read_ledger(first.ledger_path)["torn_down_at"] == retired["pods_gone_at"]
    faults_log[-1].detail["step_s"] = _duration(data, fault.step)


@pytest.mark.parametrize(("step", "slow", "progress"), [
    ("step4_support_manifests", "pod-complete", r"\[step4_support_manifests\] job/model-download"),
    ("step6_readiness", "pod-ready", r"\[step6_readiness\] dgd/"),
], ids=["job-wait", "readiness-wait"])
def test_apiserver_restart_during_a_wait(target: Target, faults_log: list[FaultRecord], step: str, slow: str,
                                         progress: str) -> None:
    selector = faults.by_job(DOWNLOAD_JOB, target.namespace) if slow == "pod-complete" else \
        faults.by_dgd(DGD_NAME, target.namespace)
    target.slow(slow, selector, SLOW_S)
    run = target.suite(target.experiment())
    fault = ApiserverRestart(target, faults_log, "apiserver-restart", step)
    run.on(progress, fault)
    data = assert_ready(run, run.run())
    assert fault.at is not None, f"{step} never reported its wait"
    assert_inside(data, step, fault.at)
    if step == "step4_support_manifests":
        jobs = next(s for s in data["steps"] if s["name"] == step)["evidence"]["jobs"]
        assert [(j["job"], j["outcome"]) for j in jobs] == [(DOWNLOAD_JOB, "Complete")]
    else:
        assert data["readiness"]["state"] == "ready"
    faults_log[-1].detail["step_s"] = _duration(data, step)


def test_apiserver_restart_during_the_smoke_gates(target: Target, faults_log: list[FaultRecord]) -> None:
    run = target.suite(target.experiment())
    # Step 7 has started and its port-forward (through the apiserver) is being established.
    fault = ApiserverRestart(target, faults_log, "apiserver-restart", "step7_smoke",
                             before=lambda: support.wait_for_port_forward(target.namespace))
    step7 = run.on(STEP7_START, fault)
    data = assert_ready(run, run.run())
    assert fault.at is not None and step7.fired_at is not None
    assert_inside(data, "step7_smoke", fault.at)
    # The apiserver went down before the reachability gate passed (the gate's clock starts after
    # step 7 has started, so this bound is conservative): the gate rode out the outage.
    smoke = data["smoke"]
    assert fault.at_monotonic < step7.fired_at + smoke["timings"]["reachable_s"], (smoke, fault.at_monotonic,
                                                                                    step7.fired_at)
    faults_log[-1].detail.update(port_forward_restarts=smoke["port_forward_restarts"],
                                 reachable_s=smoke["timings"]["reachable_s"], step_s=_duration(data, "step7_smoke"))
    assert support.port_forwards(target.namespace) == []


# ------------------------------------------------------------------ the port-forward dies


def test_port_forward_killed_during_the_smoke_test_is_reestablished(target: Target,
                                                                    faults_log: list[FaultRecord]) -> None:
    run = target.suite(target.experiment())
    killed: list[tuple[int, float]] = []
    recovered: list[float] = []

    def kill_port_forward() -> None:
        pid = support.wait_for_port_forward(target.namespace)
        killed.append((pid, time.time()))
        started = time.monotonic()
        support.kill_and_reap(pid)
        # Recovery: the harness's next kubectl port-forward is up and forwarding (if it is done
        # with it before /proc shows it listening, it certainly forwarded: the smoke passed).
        again = support.wait_for_port_forward(target.namespace, exclude=[pid])
        support.wait_listening(again)
        recovered.append(time.monotonic() - started)

    run.on(STEP7_START, kill_port_forward)
    data = assert_ready(run, run.run())
    assert killed, "no port-forward was seen"
    assert_inside(data, "step7_smoke", killed[0][1])
    smoke = data["smoke"]
    assert smoke["success"] == 1 and smoke["port_forward_restarts"] >= 1, smoke
    # Re-established within the reachability gate's bounds (reach_attempts x reach_interval).
    timeouts = data["settings"]["timeouts"]
    bound = timeouts["smoke_reach_attempts"] * timeouts["smoke_reach_interval_s"]
    assert smoke["timings"]["reachable_s"] <= bound, smoke
    assert recovered
    faults_log.append(FaultRecord("port-forward-kill", "kubectl port-forward SIGKILLed", "step7_smoke",
                                  recovered[0], {"port_forward_restarts": smoke["port_forward_restarts"],
                                   "reachable_s": smoke["timings"]["reachable_s"]}))
    assert support.port_forwards(target.namespace) == []


# ------------------------------------------------------------------ the harness is SIGKILLed


def _artifact_dirs(run: SuiteRun) -> list[str]:
    return sorted(p.name for p in (run.exp_root / "artifacts").iterdir() if p.is_dir())


def _assert_resumed_cleanly(killed: dict[str, Any], rerun: SuiteRun, rc: int) -> dict[str, Any]:
    data = assert_ready(rerun, rc)
    assert _artifact_dirs(rerun) == ["deploy-iter-000"]  # no second deployment directory
    assert len(data["resumes"]) == 1, data["resumes"]
    resume = data["resumes"][0]
    assert resume["previous_status"] == killed["status"]
    assert resume["previous_current_step"] == killed["current_step"]
    assert [s["outcome"] for s in resume["previous_steps"]] == [s["outcome"] for s in killed["steps"]]
    # Append-only history carried over: every command the killed run recorded is still there, first.
    assert data["commands"][:len(killed["commands"])] == killed["commands"]
    assert data["created_at"] == killed["created_at"]
    return data


@pytest.mark.parametrize("step", STEP_NAMES)
def test_sigkill_at_a_step_boundary_then_rerun_resumes_to_ready(target: Target, faults_log: list[FaultRecord],
                                                                step: str) -> None:
    exp = target.experiment()
    killed_run = target.suite(exp, env={KILL_ENV: step})
    rc = killed_run.run()
    assert rc == -signal.SIGKILL, killed_run.output[-3000:]
    killed = killed_run.ledger()  # valid JSON and schema-valid, written before the kill
    got = support.outcomes(killed)
    index = STEP_NAMES.index(step)
    assert all(got[n] in ("passed", "skipped") for n in STEP_NAMES[:index + 1]), got
    assert all(got[n] == "not_run" for n in STEP_NAMES[index + 1:]), got
    assert killed["session"]["finished_at"] is None  # the session never ended
    assert support.port_forwards(target.namespace) == []
    # The dead run's lock is gone with it: the rerun is not refused.
    rerun = target.suite(exp)
    _assert_resumed_cleanly(killed, rerun, rerun.run())
    assert support.port_forwards(target.namespace) == []
    faults_log.append(FaultRecord("harness-sigkill", f"harness SIGKILLed after {step}", step, rerun.seconds,
                                  {"rerun_s": rerun.seconds}))


def test_sigkill_in_the_middle_of_the_smoke_test_leaves_no_port_forward(target: Target,
                                                                        faults_log: list[FaultRecord]) -> None:
    exp = target.experiment()
    run = target.suite(exp)
    seen: list[int] = []

    def kill_harness() -> None:
        pf = support.wait_for_port_forward(target.namespace)
        seen.append(pf)
        # Freeze the harness so that it cannot finish the smoke test and stop its kubectl first,
        # let kubectl establish the forward (an idle, working port-forward), then SIGKILL the harness.
        os.kill(run.pid, signal.SIGSTOP)
        support.wait_listening(pf)
        os.kill(run.pid, signal.SIGKILL)

    run.on(STEP7_START, kill_harness)
    assert run.run() == -signal.SIGKILL, run.output[-3000:]
    assert seen
    # The harness's kubectl port-forward dies with it (it is not left holding a port and a stream).
    gone_at = time.monotonic()
    assert wait_exit(seen[0], 10.0), f"kubectl port-forward {seen[0]} outlived the SIGKILLed harness"
    orphan_s = time.monotonic() - gone_at
    assert support.port_forwards(target.namespace) == []
    killed = run.ledger()
    assert killed["current_step"] == "step7_smoke" and killed["status"] == "in_progress"
    rerun = target.suite(exp)
    _assert_resumed_cleanly(killed, rerun, rerun.run())
    assert support.port_forwards(target.namespace) == []
    faults_log.append(FaultRecord("harness-sigkill", "harness SIGKILLed during step7_smoke", "step7_smoke",
                                  rerun.seconds, {"rerun_s": rerun.seconds, "port_forward_gone_s": round(orphan_s, 3)}))


# ------------------------------------------------------------------ two runs of one iteration


def test_a_second_run_of_the_same_iteration_is_refused_and_the_first_is_unharmed(
        target: Target, faults_log: list[FaultRecord]) -> None:
    # The first run sits in step 6 for SLOW_S: the second starts and finishes meanwhile.
    target.slow("pod-ready", faults.by_dgd(DGD_NAME, target.namespace), SLOW_S)
    exp = target.experiment()
    first = target.suite(exp)
    second = target.suite(exp)
    second_rc: list[int] = []
    first_step = threading.Event()

    def start_second() -> None:
        first_step.set()
        second_rc.append(second.run())

    first.on(r"\[step6_readiness\] dgd/", start_second)
    data = assert_ready(first, first.run())
    assert first_step.is_set() and second_rc, "the second run never started"
    assert second.ended_at < first.ended_at, "the second run was not concurrent with the first"
    assert second_rc[0] != 0, second.output[-3000:]
    refusal = [line for line in second.output.splitlines() if "in use by another run" in line]
    assert refusal, second.output[-3000:]
    message = refusal[0][refusal[0].index("--iter 0"):]
    assert f"pid {first.pid}" in message and "; fix: wait for that run to finish" in message, message
    assert "Traceback" not in second.output and not [x for x in second.output.splitlines() if x.startswith("E   ")]
    # It wrote nothing: the first run's ledger has no resume and no blocker of the second.
    assert data["resumes"] == [] and data["blockers"] == []
    assert _artifact_dirs(first) == ["deploy-iter-000"]
    faults_log.append(FaultRecord("concurrent-run", "second run of the same iteration", "step1_inputs",
                                  second.seconds, {"refused_in_s": second.seconds, "refusal": message}))
