"""Drives the step lifecycle and writes ``deployment_ledger.json`` after every step.

Anatomy of pytest's own ``stepwise``/``junitxml`` plugins: ``pytest_configure`` builds the run's
``Lifecycle`` (``lifecycle.py``, stashed under ``RUN_KEY``; the steps receive only its
``StepContext``) and registers ``LedgerPlugin`` and the steps' fixtures only when the run deploys,
and never under pytest-xdist (``parallel_refusal``: one line, exit status 4). The plugin then

* orders the collected step tests by the registry in ``deploy_suite.procedure.registry``;
* skips a step with ``blocked by <step>: <reason>`` when an earlier one failed, blocked or did
  not run (the procedure's order is a safety order: nothing mutates before validation);
* judges each step's outcome: ``InputError`` => ``blocked`` shown as one line (no traceback);
  any other exception by one rule (``Lifecycle.stop_step``, docs/procedure.md "Outcomes"): ``failed``
  only for a failed attempt, the candidate's own failure, else ``blocked`` with its class;
* writes the ledger when a step starts and ends and at session end (atomically, checked against
  its schema where a step ends, see ``deploy_suite.record.ledger``), and attaches the step's evidence to
  the HTML report.

Test-only hook: ``DEPLOY_SUITE_TEST_KILL_AFTER=<step>`` SIGKILLs the run right after that step's
ledger write, so the e2e tests can prove a killed run leaves a valid ledger.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Generator
from typing import Any

import pytest
from pytest_html import extras

from deploy_suite.errors import InputError, LedgerError, StepBlocked, StepFailure
from deploy_suite.procedure.registry import STEP_NAMES, step_for_module
from deploy_suite.vocab import StepOutcome

from .keys import LEDGER_ERROR_KEY, RUN_KEY, SETTINGS_KEY, STEP_KEY
from .lifecycle import Lifecycle

KILL_ENV = "DEPLOY_SUITE_TEST_KILL_AFTER"


def step_of(item: pytest.Item) -> str | None:
    """The registry step an item belongs to: a ``test_stepN_*.py`` module in a ``steps`` dir."""
    if item.path.parent.name != "steps":
        return None
    spec = step_for_module(item.path.name)
    return spec.name if spec else None


def parallel_refusal(config: pytest.Config) -> str | None:
    """Why this deployment may not run here, as one line, when pytest-xdist would spread it over
    processes: the steps run one after another in one process, with one lifecycle and one ledger file
    per iteration, which steps run in parallel would race on. pytest-xdist is read, not imported: its
    controller's ``dist`` option (anything but ``no`` starts workers) and the ``workerinput`` it sets
    on a worker's configuration."""
    worker = getattr(config, "workerinput", None)
    if isinstance(worker, dict):
        where = f"in pytest-xdist worker {worker.get('workerid', '?')}"
    elif getattr(config.option, "dist", "no") != "no":
        where = f"under pytest-xdist (--dist {config.option.dist})"
    else:
        return None
    return (f"a deployment cannot run {where}: its steps run in order in one process, and their one ledger "
            "file per iteration would be raced on; fix: run it without -n/--dist")


def pytest_configure(config: pytest.Config) -> None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        return
    refusal = parallel_refusal(config)
    if refusal is not None:
        raise pytest.UsageError(refusal)
    run = Lifecycle.create(settings)

    def to_terminal(line: str) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        # Waits run inside a test, where pytest captures stdout: without lifting the capture the live
        # line would only reach the captured output of a failed step, never the person waiting.
        capman = config.pluginmanager.get_plugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
            reporter.write_line(f"  ... {line}")

    run.recorder.sink = to_terminal
    config.stash[RUN_KEY] = run
    config.pluginmanager.register(LedgerPlugin(run, config), "deploy-suite-ledger")
    # The steps' fixtures (`run`, `kube`, `namespace`, ...) exist in deployment runs only: every other
    # pytest run in the environment keeps those common names free.
    config.pluginmanager.import_plugin("deploy_suite.fixtures.steps")


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


class LedgerPlugin:
    def __init__(self, run: Lifecycle, config: pytest.Config) -> None:
        self.run = run
        self.config = config
        self._step_by_nodeid: dict[str, str] = {}

    def _guarded(self, action: Any, *args: Any) -> Any:
        """A ledger that cannot be written (schema break, secret guard) must not crash pytest: the
        error is shown in the terminal summary and the run fails (``None`` returned)."""
        try:
            return action(*args)
        except LedgerError as exc:
            self.config.stash[LEDGER_ERROR_KEY] = str(exc)
            return None

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        order = {name: index for index, name in enumerate(STEP_NAMES)}
        for item in items:
            name = step_of(item)
            if name is not None:
                item.stash[STEP_KEY] = name
                self._step_by_nodeid[item.nodeid] = name
                item.user_properties.append(("step", name))
        # Stable sort: tests inside one step module keep their file order.
        items.sort(key=lambda it: order.get(it.stash.get(STEP_KEY, ""), len(order)))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        name = item.stash.get(STEP_KEY, None)
        if name is None:
            return
        reason = self.run.blocked_reason(name)
        if reason is not None:
            pytest.skip(reason)
        self._guarded(self.run.begin_step, name)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        name = item.stash.get(STEP_KEY, None)
        if name is None:
            return
        if report.skipped:
            self._guarded(self.run.end_step, name, StepOutcome.SKIPPED, _skip_reason(report))
        elif report.failed:
            self._judge_failure(name, call, report)
        elif report.when == "call":
            self._guarded(self.run.end_step, name, StepOutcome.PASSED)
        else:
            return
        entry = self.run.ledger.step(name)
        # junitxml writes the teardown report's properties, which are copied from the item.
        item.user_properties[:] = [p for p in item.user_properties if p[0] != "outcome"]
        item.user_properties.append(("outcome", entry["outcome"]))
        if entry["evidence"]:
            evidence = extras.json(entry["evidence"], name=f"{name} evidence")
            # pytest-html's own attribute on reports (its makereport wrapper collects it).
            report.extras = [*getattr(report, "extras", []), evidence]  # type: ignore[attr-defined]

    def _judge_failure(self, name: str, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
        excinfo = call.excinfo
        error = excinfo.value if excinfo is not None else None
        if isinstance(error, InputError):
            self._guarded(self.run.refuse_input, name, error)
            # Bad input is one line for a person, not a traceback.
            report.longrepr = str(error)
            self._guarded(self.run.end_step, name, StepOutcome.BLOCKED, str(error))
            return
        # The step's partial result, then one rule: failed for a failed attempt, else blocked with its class.
        line = self._guarded(self.run.stop_step, name, error, report.when)
        if line is not None and isinstance(error, StepBlocked | StepFailure):
            # A judged verdict with its evidence in the ledger (a missing prerequisite, a crash loop,
            # a failed Job, a smoke gate): one line for a person; a traceback would show our own frames.
            report.longrepr = line

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        name = self._step_by_nodeid.get(nodeid)
        if name is not None and os.environ.get(KILL_ENV) == name:
            os.kill(os.getpid(), signal.SIGKILL)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        problems: list[str] = []
        try:
            problems = self.run.finish(int(exitstatus))
        except LedgerError as exc:
            self.config.stash[LEDGER_ERROR_KEY] = str(exc)
        if (problems or LEDGER_ERROR_KEY in self.config.stash) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
