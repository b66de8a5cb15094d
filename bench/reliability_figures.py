"""Faults survived: run the fault scenarios on the offline cluster and print the figures of docs/reliability.md.

    .venv/bin/python bench/reliability_figures.py [-- extra pytest args, e.g. -k smoke]

Runs ``pytest tests/reliability`` (its own offline cluster, as ``make test`` does) with
``DEPLOY_SUITE_FAULT_LOG`` pointing at a scratch file the tests append one JSON line per injected
fault to, then prints one JSON line (faults injected, faults survived, recovery time per fault)
and a table. A fault is survived when its test passed: the run ended ``ready`` (or, for the
concurrent run, was refused in one line while the first ended ``ready``). Recovery time per kind:

* kube-apiserver killed and restarted: the outage, from SIGKILL until ``/readyz`` answers ``ok``;
* ``kubectl port-forward`` killed: until the harness's next port-forward is up;
* harness SIGKILLed: the rerun with the same inputs, from start to ``ready``;
* second run of the same iteration: until it has refused (its whole run).

The exit status is non-zero when a test failed or a fault was not survived.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    extra = argv[1:] if argv[:1] == ["--"] else argv
    with tempfile.TemporaryDirectory(prefix="reliability-figures-") as tmp:
        log = Path(tmp) / "faults.jsonl"
        env = {**os.environ, "DEPLOY_SUITE_FAULT_LOG": str(log)}
        started = time.monotonic()
        rc = subprocess.call([sys.executable, "-m", "pytest", "tests/reliability", "-q", "-p", "no:cacheprovider",
                              *extra], cwd=REPO, env=env)
        wall = time.monotonic() - started
        records: list[dict[str, Any]] = [json.loads(line) for line in log.read_text().splitlines()
                                         if line.strip()] if log.exists() else []
    survived = [r for r in records if r["survived"]]
    summary = {
        "bench": "reliability_faults",
        "faults_injected": len(records),
        "faults_survived": len(survived),
        "tests_exit_status": rc,
        "wall_s": round(wall, 1),
        "faults": [{k: r.get(k) for k in ("fault", "step", "recovery_s", "survived", "outage_s",
                                          "port_forward_restarts", "step_s")} for r in records],
    }
    print(json.dumps(summary))
    print()
    print(f"{'fault':<48} {'step':<24} {'recovery s':>10}  survived  notes")
    for r in records:
        notes = ", ".join(f"{k}={r[k]}" for k in ("step_s", "port_forward_restarts", "reachable_s")
                          if r.get(k) is not None)
        recovery = "-" if r.get("recovery_s") is None else f"{r['recovery_s']:.2f}"
        print(f"{r['fault']:<48} {r['step']:<24} {recovery:>10}  {'yes' if r['survived'] else 'NO':<8}  {notes}")
    print(f"\nfaults injected {len(records)}, survived {len(survived)}; tests/reliability took {wall:.0f}s "
          f"(exit status {rc})")
    return 1 if rc != 0 or len(survived) != len(records) or not records else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
