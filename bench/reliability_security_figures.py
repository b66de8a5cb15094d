"""The reliability and security figures (docs/reliability.md, docs/security.md) in one command.

    .venv/bin/python bench/reliability_security_figures.py      # or: make figures

Runs ``bench/security_figures.py`` (bad-input corpus, secrets, decoy context) and
``bench/reliability_figures.py`` (faults injected and survived) one after the other, then prints
those documents' figures as one JSON line and a table. Exit status is non-zero when
either part failed or a figure that must be 0 is not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent


def _run(script: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([sys.executable, str(BENCH / script)], capture_output=True, text=True, check=False)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    first_json = next((line for line in proc.stdout.splitlines() if line.startswith("{")), "{}")
    return proc.returncode, json.loads(first_json)


def main() -> int:
    rc_sec, sec = _run("security_figures.py")
    rc_rel, rel = _run("reliability_figures.py")
    figures = {
        "inputs_tried": sec.get("inputs_tried"),
        "inputs_refused_with_one_clear_line": sec.get("inputs_refused_with_one_clear_line"),
        "faults_injected": rel.get("faults_injected"),
        "faults_survived": rel.get("faults_survived"),
        "mutating_requests_before_validation": sec.get("mutating_requests_before_validation"),
        "secret_leaks": sec.get("secret_leaks"),
        "decoy_connections": sec.get("decoy_connections"),
    }
    print(json.dumps({"bench": "reliability_and_security", **figures}))
    for key, value in figures.items():
        print(f"{key.replace('_', ' '):<40} {value}")
    zeros_ok = all(figures[k] == 0 for k in ("mutating_requests_before_validation", "secret_leaks",
                                             "decoy_connections"))
    survived_ok = figures["faults_injected"] and figures["faults_injected"] == figures["faults_survived"]
    return 0 if rc_sec == 0 and rc_rel == 0 and zeros_ok and survived_ok else 1


if __name__ == "__main__":
    sys.exit(main())
