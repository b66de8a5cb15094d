"""What a person sees: the HTML report's summary, per-step evidence, and the terminal summary.

pytest-html writes ``reports/<EXP_ID>/deploy-iter-NNN.html`` (self-contained; paths set by the
``options`` plugin); at the end of the run the ledger's page (``deploy_suite.reports.iteration.render``) is
written beside the ledger (``artifacts/deploy-iter-NNN/deploy-iter-NNN.html``) and the experiment page
(``artifacts/experiment.html``, ``deploy_suite.reports.experiment_page``) is rebuilt, and the last lines
of the terminal say where each is. This plugin puts the whole ledger report (summary, step
evidence, capacity table and GPU picture, readiness, smoke, patches, limitations, commands,
cleanup) at the top of pytest-html's page through the
``pytest_html_results_summary`` hook, and adds each step's evidence as readable key/values to that
step's row (next to the raw JSON extra the ``ledger`` plugin attaches). The HTML is rendered by
``deploy_suite.reports.iteration`` from the ledger dict, so ``deploy-suite report LEDGER`` shows the same thing
for an old ledger. JUnit XML (one test case per step test, with ``step`` and ``outcome``
properties) is pytest's own ``junitxml``.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from pytest_html import extras

from deploy_suite.errors import SuiteError
from deploy_suite.record import ledger as ledger_mod
from deploy_suite.reports import experiment_page
from deploy_suite.reports import iteration as renderer
from deploy_suite.vocab import RunStatus, StepOutcome

from .keys import LEDGER_ERROR_KEY, REPORT_PATHS_KEY, RUN_KEY, STEP_KEY
from .lifecycle import Lifecycle


@pytest.hookimpl(trylast=True)  # after the ledger plugin created the run state
def pytest_configure(config: pytest.Config) -> None:
    run = config.stash.get(RUN_KEY, None)
    if run is not None:
        config.pluginmanager.register(ReportPlugin(run, config), "deploy-suite-report")


def _show(path: Path, base: Path) -> str:
    """Relative to where the user ran pytest when that is shorter; absolute otherwise."""
    try:
        return os.path.relpath(path, base) if path.is_relative_to(base) else str(path)
    except ValueError:
        return str(path)


class ReportPlugin:
    def __init__(self, run: Lifecycle, config: pytest.Config) -> None:
        self.run = run
        self.config = config
        self.pages: list[tuple[str, Path | str]] = []  # (label, written page or why not)

    # After the ledger plugin closed the session record (its pytest_sessionfinish), so both pages
    # show the ledger as it stays; before the terminal summary, which says where they are.
    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        path = self.run.ledger_path
        if path is None:  # nothing of this run is in the experiment tree: leave it as it was
            return
        try:
            page = experiment_page.iteration_page(path)
            ledger_mod.atomic_write_text(page, renderer.render(self.run.document, self.run.context.rel(path),
                                                               renderer.links_for(path, page.parent)))
            self.pages.append(("iteration page", page))
        except OSError as exc:
            self.pages.append(("iteration page", f"not written ({exc})"))
        try:
            self.pages.append(("experiment page", experiment_page.write(self.run.context.exp_root)))
        except (OSError, SuiteError) as exc:
            self.pages.append(("experiment page", f"not written ({exc})"))

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # Our summary (pytest_terminal_summary below) already says how each step ended and why;
        # pytest's own "short test summary" would repeat a blocker's line (in full when CI is
        # set), so a deployment run drops it unless the user asked for it with -r.
        args = [str(a) for a in self.config.invocation_params.args]
        if not any(a.startswith("-r") for a in args):
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.reportchars = ""

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_report_title(self, report: Any) -> None:
        report.title = f"{self.run.settings.deploy_id} - dynamo-deploy-suite"

    def _links(self) -> renderer.Links:
        """Ledger paths are EXP_ROOT-relative: link them relative to where the HTML report is written."""
        html_path = self.config.stash.get(REPORT_PATHS_KEY, {}).get("html")
        if html_path is None:
            return renderer.Links(None)
        rel = Path(os.path.relpath(self.run.context.exp_root, html_path.parent)).as_posix()
        return renderer.Links("" if rel == "." else rel + "/")

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(self, prefix: list[str], summary: list[str], postfix: list[str],
                                    session: pytest.Session) -> None:
        path = self.run.ledger_path
        shown = self.run.context.rel(path) if path is not None else "not written (no deployment directory)"
        prefix.append(renderer.report_html(self.run.document, shown, self._links()))

    # Registered after the ledger plugin, so this wrapper is the outer one: the ledger has recorded
    # the step's outcome and evidence by the time the code after ``yield`` runs.
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        name = item.stash.get(STEP_KEY, None)
        if name is not None and report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            # The ledger (inner wrapper) kept the full reason; the HTML row and JUnit only name the
            # step that stopped the run, whose reason the summary at the top shows once.
            where, line, message = report.longrepr
            short = renderer.step_reason({"outcome": StepOutcome.SKIPPED,
                                          "reason": str(message).removeprefix("Skipped: ")})
            report.longrepr = (where, line, f"Skipped: {short}")
        # The same phases at which the ledger plugin ends a step and attaches its JSON evidence.
        if name is None or not (report.skipped or report.failed or report.when == "call"):
            return
        evidence = self.run.ledger.step(name).get("evidence") or {}
        if evidence:
            readable = extras.html(renderer.evidence_html(evidence, self._links()))
            report.extras = [*getattr(report, "extras", []), readable]  # type: ignore[attr-defined]

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        tr = terminalreporter
        data = self.run.document
        base = self.config.invocation_params.dir
        status = data["status"]
        tr.write_sep("=", "dynamo-deploy-suite")
        colour = {RunStatus.READY: {"green": True}, RunStatus.IN_PROGRESS: {"yellow": True}}.get(status, {"red": True})
        tr.write_line(f"{self.run.settings.deploy_id}: {status} (current step: {data['current_step']})",
                      bold=True, **colour)
        for step in data["steps"]:
            took = f"{step['duration_s']:.2f}s" if step["duration_s"] is not None else ""
            # The reason itself is the blocker line below: skipped rows only name the step that
            # stopped the run ("blocked by <step>"), so the error is said once, not once per step.
            reason = renderer.step_reason(step)
            extra = f"  {reason}" if reason and step["outcome"] == StepOutcome.SKIPPED else ""
            tr.write_line(f"  {step['name']:<25} {step['outcome']:<8} {took:>8}{extra}".rstrip())
        for blocker in data["blockers"]:
            tr.write_line(f"blocked: {blocker['message']}; fix: {blocker['fix']}", red=True)
        ledger_error = self.config.stash.get(LEDGER_ERROR_KEY, None)
        if ledger_error:
            tr.write_line(f"ledger error: {ledger_error}", red=True)
        path = self.run.ledger_path
        if path is not None:
            tr.write_line(f"ledger: {_show(path, base)}")
        elif self.run.settings.deploy_root.exists():
            deploy_id = self.run.settings.deploy_id
            tr.write_line(f"ledger: not written ({deploy_id} holds another candidate; left as it was)")
        else:
            tr.write_line("ledger: not written (refused before the deployment directory existed)")
        for kind, report_path in self.config.stash.get(REPORT_PATHS_KEY, {}).items():
            tr.write_line(f"{'report' if kind == 'html' else kind}: {_show(report_path, base)}")
        for label, written in self.pages:
            tr.write_line(f"{label}: {_show(written, base) if isinstance(written, Path) else written}")
        tr.write_line(f"next: {renderer.next_action(data)}")
