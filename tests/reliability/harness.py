"""What the fault tests drive: the suite as a user runs it, watched live, and the faults themselves.

* :func:`experiment` plays user-interviewer (a copy of the sample experiment aimed at the test's
  context and namespace, hashes recomputed) and :func:`admin_namespace` the cluster admin;
* :class:`SuiteProcess` runs ``python -m pytest --iter=N --handoff=... --kubeconfig=...`` from the
  checkout root and reads its output as it is written, so a fault fires the moment a live
  progress line (or the step-7 module start) appears: an event, not a poll of the ledger;
* :func:`slow_stage` is a kwok Stage that makes one lifecycle transition of selected pods take a
  few seconds (a Job that runs, pods that get ready or go away slowly), so that a wait is
  certainly in progress when the fault lands;
* :func:`port_forwards` scans ``/proc`` for ``kubectl port-forward`` processes of a namespace
  (nothing signals a process start: a short capped backoff, bounded by a deadline).
"""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from deploy_suite import ledger
from deploy_suite.kube import Kube, Obj
from deploy_suite.offline import faults
from deploy_suite.offline.cluster import MANIFESTS, wait_exit
from fixtures.experiments.make_experiment import Experiment, make_experiment, refresh
from tests import support
from tests.support import SECRET as SECRET
from tests.support import read_ledger as read_ledger
from tests.support import set_line

REPO = Path(__file__).resolve().parents[2]
DGD_NAME = "demo-agg"  # the sample experiment's DGD (iteration 1's candidate keeps the name)
DOWNLOAD_JOB = "model-download"


# ------------------------------------------------------------------ inputs, as the other roles make them


def admin_namespace(kube: Kube, prefix: str = "rel") -> str:
    return support.admin_namespace(kube, prefix)


def experiment(dest: Path, context: str, namespace: str) -> Experiment:
    """The sample experiment (aggregated DGD, model-cache and model-download) aimed at ``namespace``."""
    exp = make_experiment(dest)
    workload = exp.exp_root / "user_workload.yaml"
    set_line(workload, "kube_context", json.dumps(context))
    set_line(workload, "namespace", json.dumps(namespace))
    return refresh(exp.exp_root)


def outcomes(data: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s["outcome"] for s in data["steps"]}


# ------------------------------------------------------------------ the suite as a live process


@dataclass
class Trigger:
    pattern: re.Pattern[str]
    action: Callable[[], None]
    fired_at: float | None = None


@dataclass
class SuiteProcess:
    """One ``pytest --iter=N`` run in a subprocess whose output is read as it comes.

    ``on(pattern, action)`` runs ``action`` in its own thread the first time ``pattern`` appears
    in the output (the reader keeps draining, so the harness never blocks on a full pipe).
    """

    exp: Experiment
    iteration: int
    kubeconfig: str
    reports: Path
    handoff: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    ended: float = 0.0
    _out: list[str] = field(default_factory=list)
    _triggers: list[Trigger] = field(default_factory=list)
    _actions: list[threading.Thread] = field(default_factory=list)
    _errors: list[BaseException] = field(default_factory=list)
    _reader: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def deploy_root(self) -> Path:
        return self.exp.exp_root / "artifacts" / f"deploy-iter-{self.iteration:03d}"

    @property
    def ledger_path(self) -> Path:
        return self.deploy_root / ledger.LEDGER_NAME

    @property
    def output(self) -> str:
        with self._lock:
            return "".join(self._out)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def on(self, pattern: str, action: Callable[[], None]) -> Trigger:
        trigger = Trigger(re.compile(pattern), action)
        self._triggers.append(trigger)
        return trigger

    def start(self) -> SuiteProcess:
        env = {**os.environ, **self.env,
               # The venv's bin holds kubectl; unbuffered so every live line reaches us when written.
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               "PYTHONUNBUFFERED": "1"}
        env.pop("PYTEST_ADDOPTS", None)
        argv = [sys.executable, "-m", "pytest", f"--iter={self.iteration}",
                f"--handoff={self.handoff or self.exp.handoff(self.iteration)}", f"--kubeconfig={self.kubeconfig}",
                f"--reports-dir={self.reports}", "-p", "no:cacheprovider"]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self._reader = threading.Thread(target=self._read, daemon=True, name="suite-output")
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while chunk := os.read(fd, 65536):
            with self._lock:
                self._out.append(chunk.decode(errors="replace"))
                text = "".join(self._out)
            for trigger in self._triggers:
                if trigger.fired_at is None and trigger.pattern.search(text):
                    trigger.fired_at = time.monotonic()
                    thread = threading.Thread(target=self._act, args=(trigger.action,), daemon=True)
                    self._actions.append(thread)
                    thread.start()

    def _act(self, action: Callable[[], None]) -> None:
        try:
            action()
        except BaseException as exc:  # surfaced by wait()
            self._errors.append(exc)

    def wait(self, timeout: float = 240.0) -> int:
        assert self.proc is not None and self._reader is not None
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"the suite did not finish within {timeout:.0f}s:\n{self.output[-3000:]}") from None
        self.ended = time.monotonic()
        self._reader.join(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        for thread in self._actions:
            thread.join(120)
        if self._errors:
            raise AssertionError(f"a fault action failed: {self._errors[0]!r}; the run (exit {rc}) printed:\n"
                                 f"{self.output[-3000:]}") from self._errors[0]
        return rc

    def run(self, timeout: float = 240.0) -> int:
        return self.start().wait(timeout)

    @property
    def seconds(self) -> float:
        return round(self.ended - self.started, 3)

    def ledger(self) -> dict[str, Any]:
        return read_ledger(self.ledger_path)


# ------------------------------------------------------------------ processes


def _cmdline(pid: int) -> list[str]:
    try:
        return [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def port_forwards(namespace: str) -> list[int]:
    """Live ``kubectl port-forward`` processes aimed at ``namespace`` (the test's own, unique)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        argv = _cmdline(int(entry.name))
        if argv and Path(argv[0]).name == "kubectl" and "port-forward" in argv and namespace in argv:
            try:
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                found.append(int(entry.name))
    return found


def wait_for_port_forward(namespace: str, timeout: float = 60.0, exclude: Sequence[int] = ()) -> int:
    """The first ``kubectl port-forward`` of ``namespace`` to appear (other than ``exclude``). No
    event announces a new process, so /proc is scanned with a short capped backoff, bounded."""
    deadline = time.monotonic() + timeout
    delay = 0.002
    while time.monotonic() < deadline:
        pids = [p for p in port_forwards(namespace) if p not in exclude]
        if pids:
            return pids[0]
        threading.Event().wait(delay)
        delay = min(delay * 2, 0.02)
    raise AssertionError(f"no kubectl port-forward for namespace {namespace} appeared within {timeout:.0f}s")


def listening(pid: int) -> bool:
    """Whether process ``pid`` has a listening TCP socket (kubectl port-forward is forwarding)."""
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return False
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        if any(len(f) > 9 and f[3] == "0A" and f[9] in inodes for f in (r.split() for r in rows)):
            return True
    return False


def wait_listening(pid: int, timeout: float = 30.0) -> bool:
    """Until ``pid`` listens (True) or exits first (False). No event for either: a short capped
    backoff, bounded by ``timeout``."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while not listening(pid):
        if not Path(f"/proc/{pid}").exists() or not port_forward_alive(pid):
            return False
        if time.monotonic() > deadline:
            raise AssertionError(f"pid {pid} did not start listening within {timeout:.0f}s")
        threading.Event().wait(delay)
        delay = min(delay * 2, 0.05)
    return True


def port_forward_alive(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_and_reap(pid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    os.kill(pid, sig)
    assert wait_exit(pid, 30.0), f"pid {pid} survived {sig.name}"


# ------------------------------------------------------------------ slow lifecycle stages


def _default_stage(name: str) -> Obj:
    for doc in yaml.safe_load_all((MANIFESTS / "stages.yaml").read_text()):
        if isinstance(doc, dict) and doc.get("metadata", {}).get("name") == name:
            return doc
    raise KeyError(f"no default kwok stage {name!r} in stages.yaml")


def slow_stage(name: str, default: str, selector: Sequence[faults.Expression], delay_s: float) -> faults.Fault:
    """The default stage ``default`` (pod-ready, pod-complete, pod-delete), for the selected pods
    only, taking ``delay_s`` seconds: same transition, later. Weight 10000, like every fault."""
    stage = copy.deepcopy(_default_stage(default))
    stage["metadata"] = {"name": name, "labels": {faults.LABEL_FAULT: "true"}}
    spec = stage["spec"]
    spec["selector"]["matchExpressions"] = [*spec["selector"]["matchExpressions"], *selector]
    spec["weight"] = faults.FAULT_WEIGHT
    ms = int(delay_s * 1000)
    spec["delay"] = {"durationMilliseconds": ms, "jitterDurationMilliseconds": ms}
    return faults.Fault(name, (stage,))


# ------------------------------------------------------------------ what the figures are made of


@dataclass
class FaultRecord:
    """One injected fault: what, where, and how long until things were well again."""

    scenario: str
    fault: str
    step: str
    recovery_s: float
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self, survived: bool) -> dict[str, Any]:
        return {"scenario": self.scenario, "fault": self.fault, "step": self.step,
                "recovery_s": round(self.recovery_s, 3), "survived": survived, **self.detail}
