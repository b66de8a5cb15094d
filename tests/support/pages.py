"""What the browser tests check on the pages a run writes, so the same checks serve the generated
experiments (tests/browser) and a real run on the offline cluster (tests/e2e)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tests.support.browser import Page, open_page
from tests.support.runs import REPO

# Screenshots and A4 prints of the pages, kept as CI artifacts.
SHOTS = REPO / "reports" / "browser"


def experiment_selectors(rows: Iterable[int], changes: Iterable[int]) -> list[str]:
    return ["tr.dsr-iter", "section.dsr-change", "svg.dsr-timeline", "svg.dsr-budgets", "#dsr-top",
            *(f"#iter-{n}" for n in rows), *(f"#change-{n} tbody tr" for n in changes)]


def open_experiment(path: Path, rows: Iterable[int], changes: Iterable[int]) -> Page:
    return open_page(path, experiment_selectors(list(rows), list(changes)))


def assert_experiment(page: Page, rows: Iterable[int], changes: Iterable[int]) -> None:
    """No console error; one row per iteration; a non-empty diff for each iteration in ``changes``;
    the budgets chart, the timeline and the top line present."""
    rows, changes = list(rows), list(changes)
    assert page.errors == [], page.errors
    assert page.counts["tr.dsr-iter"] == len(rows), f"{page.counts['tr.dsr-iter']} rows, expected {len(rows)}"
    missing = [n for n in rows if page.counts.get(f"#iter-{n}") != 1]
    assert not missing, f"no row for iteration(s) {missing}"
    empty = [n for n in changes if not page.counts.get(f"#change-{n} tbody tr")]
    assert not empty, f"no diff shown for iteration(s) {empty}"
    for part in ("svg.dsr-timeline", "svg.dsr-budgets", "#dsr-top"):
        assert page.counts[part] == 1, f"{part} missing"


def keep(page: Page, name: str) -> Path:
    """Save the screenshot (and the A4 print) under reports/browser/ for CI to keep."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    png = SHOTS / f"{name}.png"
    png.write_bytes(page.screenshot)
    (SHOTS / f"{name}-a4.pdf").write_bytes(page.pdf)
    return png
