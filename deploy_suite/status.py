"""``deploy-suite status EXP_ROOT [--json]``: where an experiment stands, read from its files only.

One line (``--json``: one object) per iteration: status, blocker class, failed attempts (and what
the ledger counts against ``max_failed_deploys``: :func:`deploy_suite.record.experiment.failed_deploys`), DGD,
endpoint, smoke result, GPU-hours; then the experiment's budgets and the next action, which is
what the skill file (.agents/skills/deploy-dynamo-recipe/SKILL.md) tells an agent to do. The
ledgers are read as the experiment page reads them (:func:`deploy_suite.reports.experiment_page.load`):
budgets and GPU-hours as of the last ledger write, so an archived experiment reads the same
tomorrow. The JSON fields: docs/status.md and docs/status.schema.json.

Exit codes: 0 the last iteration is ready, 1 it needs action (or there is none yet), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deploy_suite.record import experiment, resume
from deploy_suite.reports import experiment_page

SCHEMA_VERSION = 1
EXIT_READY, EXIT_ACTION, EXIT_BAD_INPUT = 0, 1, 2
# The next action's vocabulary (docs/status.md): one per outcome of the skill file.
HAND_OFF, STOP_FIX, HAND_BACK, STOP_BUDGET, RERUN, RUN_FIRST, PATCH_RERUN = (
    "hand-off-endpoint", "stop-report-fix", "hand-back-to-challenger", "stop-budget-spent", "rerun", "run-iteration-0",
    "patch-and-rerun")
# A failed attempt the scheduler's own words explain (an untolerated taint, a selector or affinity no
# node matches): the procedure's remedy is a run-scoped fix and a redeploy in the same iteration.
_SCHEDULER_WORDS = ("FailedScheduling", "Unschedulable")
_FIX = "pass an experiment root runs/<EXP_ID> (the directory holding artifacts/deploy-iter-NNN/)"


def _rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def _smoke(data: Mapping[str, Any]) -> dict[str, Any]:
    smoke = data.get("smoke")
    if not isinstance(smoke, Mapping) or smoke.get("success") is None:
        return {"result": "not-run", "gate": None, "diagnosis": None}
    passed = smoke.get("success") == 1
    return {"result": "passed" if passed else "failed", "gate": smoke.get("gate") or None,
            "diagnosis": None if passed else (smoke.get("diagnosis") or None)}


def _endpoint(data: Mapping[str, Any]) -> dict[str, Any] | None:
    endpoint = data.get("endpoint")
    if not isinstance(endpoint, Mapping) or not endpoint.get("target"):
        return None
    return {"kind": endpoint.get("kind"), "target": endpoint.get("target"), "port": endpoint.get("port"),
            "path": endpoint.get("path"), "worker_instance_id": endpoint.get("worker_instance_id"),
            "served_model": data.get("served_model"), "namespace": data.get("namespace"),
            "kube_context": data.get("kube_context")}


def _diagnosis(data: Mapping[str, Any]) -> str | None:
    """What failed, for the challenger: the last failed attempt's diagnosis, else readiness' or smoke's."""
    attempts = [a for a in data.get("failed_attempts") or [] if isinstance(a, Mapping)]
    if attempts:
        last = attempts[-1]
        return f"{last.get('category')}: {last.get('diagnosis')}"
    for section in ("readiness", "smoke"):
        found = data.get(section)
        if isinstance(found, Mapping) and found.get("diagnosis"):
            return str(found["diagnosis"])
    return None


def _scheduling(data: Mapping[str, Any]) -> bool:
    """Whether the last failed attempt is one the scheduler's words explain (docs/procedure.md, step 6)."""
    attempts = [a for a in data.get("failed_attempts") or [] if isinstance(a, Mapping)]
    if not attempts or attempts[-1].get("category") != "failed-deploy":
        return False
    return any(word in str(attempts[-1].get("evidence")) for word in _SCHEDULER_WORDS)


def iteration_status(root: Path, it: experiment_page.Iteration, as_of: str | None) -> dict[str, Any]:
    data = it.data
    blockers = [{"step": b.get("step"), "class": b.get("class"), "message": b.get("message"), "fix": b.get("fix")}
                for b in data.get("blockers") or [] if isinstance(b, Mapping)]
    smoke_artifact = it.path.parent / "smoke_test_artifact.json"
    return {
        "deploy_id": it.deploy_id, "iteration": it.number, "status": data.get("status"),
        "current_step": data.get("current_step"),
        "blocker_class": blockers[0]["class"] if blockers else None, "blockers": blockers,
        "failed_attempts": len([a for a in data.get("failed_attempts") or [] if isinstance(a, Mapping)]),
        "failed_deploys": experiment.failed_deploys_in(data),
        "diagnosis": _diagnosis(data) if data.get("status") == "failed" else None,
        "scheduling_failure": data.get("status") == "failed" and _scheduling(data),
        "dgd": data.get("dgd_name"), "endpoint": _endpoint(data), "smoke": _smoke(data),
        "gpus_requested": data.get("gpus_requested") or 0,
        "gpu_hours": resume.gpu_hours(data, now=as_of), "torn_down_at": data.get("torn_down_at"),
        "deploy_root": _rel(root, it.path.parent), "ledger": _rel(root, it.path),
        "smoke_artifact": _rel(root, smoke_artifact) if smoke_artifact.is_file() else None,
    }


def next_action(last: Mapping[str, Any] | None, budget_blockers: list[str]) -> dict[str, Any]:
    """What the caller does now, by the last iteration's outcome (the skill file's table)."""
    if last is None:
        return {"deploy_id": None, "action": RUN_FIRST,
                "message": "no deployment ledger yet: run iteration 0 (pytest --iter=0 --handoff=...)"}
    deploy_id, status = last["deploy_id"], last["status"]
    endpoint = last["endpoint"] or {}
    if status == "ready":
        where = f"{endpoint.get('kind')} {endpoint.get('target')}:{endpoint.get('port')}" if endpoint else "?"
        return {"deploy_id": deploy_id, "action": HAND_OFF,
                "message": f"hand off to perf-analyzer: {endpoint.get('served_model')} answers on {where} in "
                           f"namespace {endpoint.get('namespace')} (context {endpoint.get('kube_context')})"}
    budget = [b for b in last["blockers"] if b["class"] == "budget"]
    if budget or (status != "failed" and budget_blockers):
        said = budget[0]["message"] if budget else budget_blockers[0]
        return {"deploy_id": deploy_id, "action": STOP_BUDGET,
                "message": f"stop the experiment: {said}"}
    if status == "blocked" and last["blockers"]:
        first = last["blockers"][0]
        return {"deploy_id": deploy_id, "action": STOP_FIX,
                "message": f"stop, do not redeploy; report the {first['class']} blocker ({first['step']}): "
                           f"{first['message']}; fix: {first['fix']}"}
    if status == "failed":
        return _after_failure(last)
    return {"deploy_id": deploy_id, "action": RERUN,
            "message": f"the run stopped before its end (next step {last['current_step']}): rerun the same "
                       f"command; it resumes in {last['deploy_root']}"}


def _after_failure(last: Mapping[str, Any]) -> dict[str, Any]:
    """A failed attempt: repaired in the same iteration when the scheduler's words explain it, else
    handed back (N > 0) or reported (the baseline, iteration 0)."""
    deploy_id, said = last["deploy_id"], last["diagnosis"] or "see the ledger"
    if last.get("scheduling_failure"):
        return {"deploy_id": deploy_id, "action": PATCH_RERUN,
                "message": "a scheduling mismatch, not the candidate's performance: hand over a Kubernetes-only fix "
                           "(--compat-patch FILE: the recipe's scheduling mechanism with values retargeted to the "
                           f"contract's hardware, never a node name) and rerun the same iteration; diagnosis: {said} "
                           f"(ledger {last['ledger']})"}
    if last["iteration"] == 0:
        return {"deploy_id": deploy_id, "action": STOP_FIX,
                "message": "the baseline itself fails (iteration 0 has no challenger to hand back to): report the "
                           f"diagnosis to the user: {said} (ledger {last['ledger']})"}
    return {"deploy_id": deploy_id, "action": HAND_BACK,
            "message": f"hand back to hypothesis-challenger with the diagnosis: {said} "
                       f"({last['failed_attempts']} failed attempt(s), ledger {last['ledger']})"}


def status(exp_root: Path) -> dict[str, Any]:
    """The status document of ``exp_root`` (docs/status.schema.json)."""
    exp = experiment_page.load(exp_root)
    iterations = [iteration_status(exp.root, it, exp.as_of) for it in exp.iterations]
    state = exp.state
    budgets = None if state is None else state.as_dict()
    spent = [message for _, message, _ in state.blockers] if state is not None else []
    action = next_action(iterations[-1] if iterations else None, spent)
    ready = bool(iterations) and iterations[-1]["status"] == "ready"
    return {"schema_version": SCHEMA_VERSION, "exp_id": exp.exp_id, "as_of": exp.as_of, "iterations": iterations,
            "budgets": budgets, "next_action": action, "exit_code": EXIT_READY if ready else EXIT_ACTION}


def _usage(name: str, usage: Mapping[str, Any], unit: str) -> str:
    limit = "ungated" if usage["limit"] is None else f"{usage['limit']:g}"
    if any(str(c).startswith("unknown:") for c in usage.get("counted") or []):  # record/budget.py: not countable
        return f"{name} unknown of {limit}{unit}"
    return f"{name} {usage['used']:g}{unit} of {limit}{' (spent)' if usage['spent'] else ''}"


def render_text(doc: Mapping[str, Any]) -> str:
    lines = []
    for it in doc["iterations"]:
        endpoint = it["endpoint"]
        where = f"{endpoint['kind']} {endpoint['target']}:{endpoint['port']}" if endpoint else "-"
        blocker = it["blockers"][0] if it["blockers"] else None
        # A ledger of the older rule counts a run that ended failed without an attempt: said so.
        counted = f" (counted {it['failed_deploys']})" if it["failed_deploys"] != it["failed_attempts"] else ""
        lines.append(f"{it['deploy_id']}  {it['status']}  blocker {blocker['class'] if blocker else '-'}  "
                     f"failed attempts {it['failed_attempts']}{counted}  dgd {it['dgd'] or '-'}  endpoint {where}  "
                     f"smoke {it['smoke']['result']}  GPU-hours {it['gpu_hours']:.3f}"
                     + (f"  ({blocker['message']})" if blocker else ""))
    budgets = doc["budgets"]
    if budgets is None:
        lines.append("budgets: not counted (no ledger with a time of writing)")
    else:
        lines.append(f"budgets as of {budgets['at']}: " + ", ".join((
            _usage("failed deploys", budgets["max_failed_deploys"], ""),
            _usage("GPU-hours", budgets["gpu_hours"], ""),
            _usage("wall clock", budgets["wall_clock_hours"], " h"))))
    action = doc["next_action"]
    lines.append(f"next action ({action['deploy_id'] or doc['exp_id']}): {action['action']}: {action['message']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``deploy-suite status EXP_ROOT [--json]``."""
    parser = argparse.ArgumentParser(prog="deploy-suite status", description=__doc__.splitlines()[0])
    parser.add_argument("exp_root", type=Path, help="an experiment root runs/<EXP_ID>")
    parser.add_argument("--json", action="store_true", help="one JSON object (docs/status.schema.json)")
    args = parser.parse_args(argv)
    root: Path = args.exp_root
    problem = ("does not exist" if not root.exists() else "is not a directory" if not root.is_dir()
               else "has no artifacts/ directory" if not (root / "artifacts").is_dir() else None)
    if problem:
        print(f"deploy-suite status: error: EXP_ROOT {root} {problem}; fix: {_FIX}", file=sys.stderr)
        return EXIT_BAD_INPUT
    doc = status(root)
    print(json.dumps(doc, indent=2) if args.json else render_text(doc))
    return int(doc["exit_code"])
