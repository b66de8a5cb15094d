"""The report pages opened in a real browser (headless Chromium over the DevTools protocol): no
console error, the DOM holds the rows and the diff, a screenshot and an A4 print kept under
``reports/browser/``. The checks themselves are proven to fail on a page missing a row, missing
a diff, or raising a script error."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from deploy_suite.fixtures.experiments.synthetic import write_synthetic_experiment
from deploy_suite.record import ledger
from deploy_suite.reports import experiment_page
from deploy_suite.reports import iteration as report
from tests.support.browser import open_page
from tests.support.pages import assert_experiment, keep, open_experiment

ROWS = range(6)
CHANGES = [1, 2, 3, 4, 5]


@pytest.fixture(scope="module")
def experiment_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exp = write_synthetic_experiment(tmp_path_factory.mktemp("browser"), len(ROWS))
    return experiment_page.write(exp.exp_root)


def test_the_experiment_page_in_chromium(experiment_html: Path) -> None:
    page = open_experiment(experiment_html, ROWS, CHANGES)
    keep(page, "experiment")
    assert_experiment(page, ROWS, CHANGES)
    assert page.pdf.startswith(b"%PDF") and page.screenshot.startswith(b"\x89PNG")
    # What the browser built holds the retire of iteration 0 on the timeline.
    assert "retired by deploy-iter-001" in page.dom


def test_an_iteration_page_in_chromium(experiment_html: Path) -> None:
    ledger_path = experiment_html.parent / "deploy-iter-003" / ledger.LEDGER_NAME  # the blocked one
    out = experiment_page.iteration_page(ledger_path)
    out.write_text(report.render(json.loads(ledger_path.read_text()), "artifacts/deploy-iter-003",
                                 report.links_for(ledger_path, out.parent)))
    page = open_page(out, [".deploy-suite-summary", "table.dsr-steps tr", ".dsr-blockers li"])
    keep(page, "iteration-blocked")
    assert page.errors == []
    assert page.counts == {".deploy-suite-summary": 1, "table.dsr-steps tr": 7, ".dsr-blockers li": 1}
    assert page.dom.count("blocked by step2_validate") == 2 * 5  # each skipped step's line and card, no reason


def _without(page: Path, pattern: str, dest: Path) -> Path:
    text, n = re.subn(pattern, "", page.read_text(), count=1, flags=re.S)
    assert n == 1, pattern
    dest.write_text(text)
    return dest


@pytest.mark.parametrize(("pattern", "said"), [
    (r'<tr class="dsr-iter" id="iter-2".*?</tr>', r"5 rows, expected 6"),
    (r'<section class="dsr-change" id="change-4".*?</section>', r"no diff shown for iteration\(s\) \[4\]"),
], ids=["a row", "the diff"])
def test_the_checks_fail_when_a_row_or_the_diff_is_missing(experiment_html: Path, tmp_path: Path, pattern: str,
                                                           said: str) -> None:
    broken = _without(experiment_html, pattern, tmp_path / "broken.html")
    page = open_experiment(broken, ROWS, CHANGES)
    with pytest.raises(AssertionError, match=said):
        assert_experiment(page, ROWS, CHANGES)


def test_the_checks_fail_on_a_script_error(experiment_html: Path, tmp_path: Path) -> None:
    broken = tmp_path / "error.html"
    broken.write_text(experiment_html.read_text().replace("</body>", "<script>notDefined()</script></body>"))
    page = open_experiment(broken, ROWS, CHANGES)
    assert any("notDefined" in e for e in page.errors)
    with pytest.raises(AssertionError, match="notDefined"):
        assert_experiment(page, ROWS, CHANGES)
