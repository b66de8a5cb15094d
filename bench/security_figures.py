"""Bad input and secrets: run the corpus and the security checks, print the figures of docs/security.md.

    .venv/bin/python bench/security_figures.py [-- extra pytest args]

Runs ``pytest tests/security`` (its own offline cluster, as ``make test`` does) with
``DEPLOY_SUITE_SECURITY_FIGURES`` pointing at a scratch file the tests append their measurements
to, then prints one JSON line and a table: inputs tried (and refused with one clear line),
requests and mutating requests the bad inputs caused, mutations of full runs before step 2
validated, secret-value leaks and connections to the decoy current-context. The exit status is
non-zero when a test failed or a figure that must be 0 is not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MUST_BE_ZERO = ("mutating_requests_before_validation", "secret_leaks", "decoy_connections")


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="security-figures-") as tmp:
        figures_file = Path(tmp) / "figures.jsonl"
        junit = Path(tmp) / "junit.xml"
        env = {**os.environ, "DEPLOY_SUITE_SECURITY_FIGURES": str(figures_file)}
        env.pop("PYTEST_ADDOPTS", None)
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", "tests/security", "-q", "-p", "no:cacheprovider",
                               f"--junitxml={junit}", *argv], cwd=REPO, env=env, check=False)
        seconds = time.monotonic() - started
        records = [json.loads(line) for line in figures_file.read_text().splitlines()] if figures_file.exists() else []
        cases = list(ET.parse(junit).getroot().iter("testcase")) if junit.exists() else []

    def ok(case: ET.Element) -> bool:
        return case.find("failure") is None and case.find("error") is None and case.find("skipped") is None

    corpus_cases = [c for c in cases if c.get("name", "").startswith("test_bad_input_is_refused")]
    corpus = [r for r in records if r["kind"] == "corpus"]
    leaks = [r for r in records if r["kind"] == "secret-leaks"]
    decoy = [r for r in records if r["kind"] == "decoy"]
    full = [r for r in records if r["kind"] == "full-run-mutations-before-validation"]
    figures: dict[str, Any] = {
        "inputs_tried": len(corpus),
        "inputs_refused_with_one_clear_line": sum(ok(c) for c in corpus_cases),
        "requests_caused_by_bad_inputs": sum(r["requests"] for r in corpus),
        "mutating_requests_before_validation": sum(r["mutations"] for r in corpus) + sum(r["mutations"] for r in full),
        "secret_leaks": sum(r["leaks"] for r in leaks) if leaks else None,
        "places_searched_for_the_secret": sum(r["searched"] for r in leaks) if leaks else None,
        "decoy_connections": sum(r["connections"] for r in decoy) if decoy else None,
        "slowest_bad_input_s": max((r["seconds"] for r in corpus), default=None),
        "peak_rss_bad_input_mb": max((r["max_rss_mb"] for r in corpus), default=None),
        # The inputs meant to exhaust time or memory: (seconds, peak RSS MB) of the whole run.
        "bounded": {r["case"]: [r["seconds"], r["max_rss_mb"]] for r in corpus
                    if r["case"] in ("dgd-huge-file", "dgd-alias-bomb", "dgd-deep-nesting", "handoff-deep-nesting")},
        "security_tests_passed": sum(ok(c) for c in cases),
        "security_tests": len(cases),
        "wall_s": round(seconds, 1),
    }
    print(json.dumps(figures))
    rows = [
        ("inputs tried (corpus cases)", figures["inputs_tried"], ""),
        ("refused with one clear line, non-zero exit", figures["inputs_refused_with_one_clear_line"], "= inputs tried"),
        ("requests caused by bad inputs", figures["requests_caused_by_bad_inputs"], "0"),
        ("mutating requests before validation", figures["mutating_requests_before_validation"], "must be 0"),
        ("secret leaks (canary, plain or base64)", figures["secret_leaks"], "must be 0"),
        ("  places searched", figures["places_searched_for_the_secret"], ""),
        ("decoy current-context connections", figures["decoy_connections"], "must be 0"),
        ("slowest bad input (s)", figures["slowest_bad_input_s"], ""),
        ("peak RSS of a bad-input run (MB)", figures["peak_rss_bad_input_mb"], ""),
        *((f"  {name} (s / MB)", f"{v[0]} / {v[1]:.0f}", "bounded") for name, v in sorted(figures["bounded"].items())),
        ("security tests passed", f"{figures['security_tests_passed']}/{figures['security_tests']}", ""),
        ("wall time (s)", figures["wall_s"], ""),
    ]
    print(f"\n| {'figure':<44} | {'value':>9} | {'goal':<14} |")
    print(f"|{'-' * 46}|{'-' * 11}|{'-' * 16}|")
    for name, value, goal in rows:
        print(f"| {name:<44} | {'n/a' if value is None else value!s:>9} | {goal:<14} |")
    bad = [key for key in MUST_BE_ZERO if figures[key] != 0]
    complete = figures["inputs_tried"] > 0 and figures["inputs_refused_with_one_clear_line"] == figures["inputs_tried"]
    if proc.returncode != 0 or bad or not complete:
        print(f"\nsecurity figures: FAILED (pytest exit {proc.returncode}; not zero: {bad or 'none'}; "
              f"all inputs refused clearly: {complete})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
