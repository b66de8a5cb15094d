"""Benchmark of the experiment page (``deploy-suite report EXP_ROOT``) on generated experiments.

1, 10 and 100 iterations (ready, failed and blocked ledgers mixed, each with its applied DGD;
fixtures/experiments/synthetic.py): the time to read the tree and write the page
(``deploy_suite.reports.experiment_page.write``: ledgers, DGD diffs, budgets, charts), its size, and
the same for the 100-iteration tree with ``<script>`` in every ledger string; and, where headless
Chromium is installed (scripts/install-chromium), how long the browser takes to load the
100-iteration page (navigation start to the end of the load event, as the browser times it).

Usage: python bench/bench_experiment_page.py [--runs N]
Prints one JSON line (figures) and one human line per size. Goal: 100 iterations < 2 s (median), < 5 MB.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deploy_suite.fixtures.experiments.synthetic import write_synthetic_experiment
from deploy_suite.reports import experiment_page
from tests.support.browser import open_page


def measure(iterations: int, runs: int, poison: str | None = None,
            browser: bool = False) -> dict[str, float | int | str | None]:
    with tempfile.TemporaryDirectory(prefix="bench-experiment-page-") as tmp:
        exp = write_synthetic_experiment(Path(tmp), iterations, poison=poison)
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            page = experiment_page.write(exp.exp_root)
            times.append(time.perf_counter() - started)
        size = page.stat().st_size
        loads = [open_page(page).load_ms / 1000 for _ in range(3)] if browser and shutil.which("chromium") else []
    return {"iterations": iterations, "poisoned": bool(poison), "median_s": round(statistics.median(times), 3),
            "max_s": round(max(times), 3), "bytes": size, "runs": runs,
            "browser_load_s": round(statistics.median(loads), 3) if loads else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    figures = [measure(n, args.runs, browser=n == 100) for n in (1, 10, 100)]
    figures.append(measure(100, args.runs, poison="<script>alert(1)</script>"))
    print(json.dumps({"experiment_page": figures}))
    ok = True
    for f in figures:
        big = f["iterations"] == 100
        good = not big or (float(f["median_s"]) < 2.0 and int(f["bytes"]) < 5_000_000)
        ok = ok and good
        print(f"{f['iterations']:>3} iterations{' (<script> everywhere)' if f['poisoned'] else ''}: median "
              f"{f['median_s']} s, max {f['max_s']} s, {int(f['bytes']) / 1e6:.2f} MB"
              + (f", Chromium loads it in {f['browser_load_s']} s" if f.get("browser_load_s") else "")
              + ("" if not big else "  (goal < 2 s, < 5 MB: " + ("met)" if good else "NOT met)")))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
