"""Render a deployment ledger as HTML, so any ledger (also an old one) can be re-rendered.

The pytest-html report of a run puts ``report_html(ledger)`` at its top (``deploy_suite.plugins.report``);
``deploy-suite report LEDGER`` calls ``main`` to write a standalone page from a ledger alone. The
data model (the ledger dict) is kept apart from the renderer, so an archived ledger renders as it
did on the day: nothing here reads anything but the ledger.

What a reviewer sees, in order: the summary that fits one screen (status, DGD, cluster, endpoint,
served model, blockers with their fix, failed attempts, next action, one line per step), the
per-step evidence as key/values, the capacity evidence (table and an inline SVG picture of GPU
slots per node), readiness, smoke, patches, limitations, the Kubernetes commands and the cleanup
commands. The page is self-contained (inline CSS and SVG, no script, no external resource) and
every ledger string is HTML-escaped. Classes are prefixed ``dsr-`` so that pytest-html's own
stylesheet and script leave the block alone.

Here: the view model of the summary, the sections and the page (what each shows); their markup is
``templates/iteration.html.j2`` (the block), ``iteration_page.html.j2`` (the page) and
``report.css``. Ledger values as view models are ``deploy_suite.reports.values``; the capacity
section's ``deploy_suite.reports.gpu_slots``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from deploy_suite.errors import LedgerError
from deploy_suite.record import experiment, resume
from deploy_suite.record import ledger as ledger_mod
from deploy_suite.reports import markup
from deploy_suite.reports.gpu_slots import capacity_view
from deploy_suite.reports.values import NO_LINKS, Muted, Node, get_list, get_map, rest, seconds, value_node
from deploy_suite.reports.values import Links as Links  # re-exported: the type of every links= argument
from deploy_suite.vocab import BlockerClass, RunStatus, StepOutcome

_STATUS_COLOUR: dict[str, str] = {RunStatus.READY: "#1a7f37", RunStatus.IN_PROGRESS: "#9a6700",
                                  RunStatus.BLOCKED: "#cf222e", RunStatus.FAILED: "#cf222e"}
_OUTCOME_COLOUR: dict[str, str] = {StepOutcome.PASSED: "#1a7f37", StepOutcome.FAILED: "#cf222e",
                                   StepOutcome.BLOCKED: "#cf222e", StepOutcome.SKIPPED: "#9a6700",
                                   StepOutcome.NOT_RUN: "#6e7781"}
_OUTCOME_MARK: dict[str, str] = {StepOutcome.PASSED: "\u2713", StepOutcome.FAILED: "\u2717",
                                 StepOutcome.BLOCKED: "\u2717", StepOutcome.SKIPPED: "\u21b7",
                                 StepOutcome.NOT_RUN: "\u2013"}
_DOT = " \u00b7 "
_TEMPLATE = "iteration.html.j2"


def next_action(ledger: Mapping[str, Any]) -> str:
    """One sentence: what a person (or the next role) should do now."""
    status = ledger.get("status")
    iteration = ledger.get("iteration")
    blockers = ledger.get("blockers") or []
    if status == RunStatus.READY:
        endpoint = ledger.get("endpoint") or {}
        target = endpoint.get("target") or ledger.get("frontend_service") or "the frontend"
        return (f"hand off to perf-analyzer: {ledger.get('served_model') or 'the served model'} is answering on "
                f"{target} in {ledger.get('namespace')} (context {ledger.get('kube_context')})")
    if status == RunStatus.BLOCKED and any(isinstance(b, Mapping) and b.get("class") == BlockerClass.BUDGET
                                         for b in blockers):
        return ("the experiment's budget is spent: stop the experiment or ask the user for more budget (nothing "
                "was retired or applied; the previous deployment is still live)")
    if status == RunStatus.BLOCKED and blockers:
        return "fix the blocker, then rerun the same command (a rerun of this candidate resumes in place)"
    if status == RunStatus.FAILED:
        return ("read the diagnostics and failed_attempts; make a diagnosis-backed run-scoped patch and rerun, "
                "or hand off to troubleshooting (no blind retries)")
    step = ledger.get("current_step")
    return (f"continue with {step}: rerun `pytest --iter={iteration}` with the same handoff; it resumes in the "
            "same directory")


def stopped_by(ledger: Mapping[str, Any]) -> tuple[str, str] | None:
    """The step that stopped the run (the first failed or blocked one) and its reason."""
    for step in ledger.get("steps") or []:
        if isinstance(step, Mapping) and step.get("outcome") in (StepOutcome.FAILED, StepOutcome.BLOCKED):
            return str(step.get("name")), str(step.get("reason") or step.get("outcome"))
    return None


STOPPED_HERE = "stopped the run (the reason is at the top)"


def step_reason(step: Mapping[str, Any], stopper: str | None = None) -> str:
    """A step's reason as a summary line or card says it: once. A skipped step only names the step
    that stopped the run (``blocked by step2_validate``); the stopping step points to the top,
    where its reason is shown once (the blockers box, or the "stopped by" line)."""
    reason = str(step.get("reason") or "")
    if step.get("outcome") == StepOutcome.SKIPPED and reason.startswith("blocked by "):
        return reason.split(":", 1)[0]
    if stopper is not None and step.get("name") == stopper and reason:
        return STOPPED_HERE
    return reason


# --------------------------------------------------------------------------------------------
# Summary: one screen
# --------------------------------------------------------------------------------------------


def _step_line(step: Mapping[str, Any], stopper: str | None) -> dict[str, Any]:
    outcome = str(step.get("outcome"))
    return {"outcome": outcome, "colour": _OUTCOME_COLOUR.get(outcome, "#6e7781"),
            "mark": _OUTCOME_MARK.get(outcome, "?"), "name": step.get("name"),
            "seconds": seconds(step.get("duration_s")), "reason": step_reason(step, stopper)}


def _endpoint(ledger: Mapping[str, Any]) -> dict[str, Any] | None:
    endpoint = ledger.get("endpoint")
    if not endpoint:
        return None
    port = f":{endpoint['port']}" if endpoint.get("port") else ""
    worker = endpoint.get("worker_instance_id")
    return {"text": f"{endpoint.get('kind', '?')} {endpoint.get('target', '?')}{port}{endpoint.get('path', '')}",
            "worker": f" (worker instance {worker})" if worker not in (None, "") else None}


def _ownership(ledger: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Whose the DGD is (docs/procedure.md, "Ownership"): the field manager step 5 applied it with."""
    applied = ledger.get("applied_dgd")
    return applied if isinstance(applied, Mapping) else None


def _teardown(ledger: Mapping[str, Any]) -> dict[str, Any]:
    """The teardown policy and what it did (step 6), or when the DGD was torn down."""
    teardown = ledger.get("teardown")
    return {"teardown": teardown if isinstance(teardown, Mapping) else None, "at": ledger.get("torn_down_at")}


def _allocation(ledger: Mapping[str, Any]) -> dict[str, Any] | None:
    """The allocation intervals (docs/procedure.md, "Resume") and their GPU-hours as of the ledger's last write."""
    spans = resume.intervals(ledger)
    if not spans:
        return None
    until = ledger.get("updated_at")
    hours = resume.gpu_hours(ledger, now=str(until) if until else None)
    held = spans[-1].get("released_at") is None and not ledger.get("torn_down_at")
    return {"count": len(spans), "since": spans[0].get("allocated_at"), "hours": f"{hours:g}",
            "held": f"(still held at {until})" if held else None}


_BUDGETS = (("max_failed_deploys", "failed deploys", "{:g}"), ("gpu_hours", "GPU-hours", "{:.2f}"),
            ("wall_clock_hours", "wall-clock hours", "{:.2f}"))


def _budget(ledger: Mapping[str, Any]) -> dict[str, Any] | None:
    """Used of granted for each budget (step 2's ``budget`` section); a spent one in red."""
    state = get_map(ledger, "budget")
    if not state:
        return None
    parts = []
    for key, label, fmt in _BUDGETS:
        found = state.get(key)
        usage: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        used, limit = usage.get("used"), usage.get("limit")
        text = f"{label} {fmt.format(used) if isinstance(used, int | float) else '?'} of " + (
            fmt.format(limit) if isinstance(limit, int | float) else "unlimited")
        parts.append({"text": text, "spent": bool(usage.get("spent"))})
    return {"parts": parts, "at": f"at {state.get('at')}"}


def _next_step(attempt: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a failed attempt's troubleshooting shape says to do next (docs/triage.md, "The
    troubleshooting shape"): its strongest signal, the command to run, the patch; None for an
    attempt recorded before the shape existed."""
    shape = attempt.get("troubleshooting")
    if not isinstance(shape, Mapping):
        return None
    found = shape.get("next_step")
    step: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    return {"signal": shape.get("strongest_signal"), "command": step.get("command"), "patch": step.get("patch")}


def _summary(ledger: Mapping[str, Any], ledger_path: str | None, links: Links) -> dict[str, Any]:
    """The block at the top of a report: status, DGD, cluster, endpoint, blockers, next action, steps."""
    status = str(ledger.get("status"))
    source = get_map(ledger, "source_dgd")
    session = get_map(ledger, "session")
    bits = [f"iteration {ledger.get('iteration')}", str(ledger.get("provenance") or "")]
    if ledger.get("review_id"):
        bits.append(f"review {ledger.get('review_id')}")
    bits.append(f"updated {ledger.get('updated_at')}")
    if session and session.get("finished_at") is None:
        bits.append("session not finished (running or interrupted)")
    blockers = [b for b in ledger.get("blockers") or [] if isinstance(b, Mapping)]
    attempts = [a for a in ledger.get("failed_attempts") or [] if isinstance(a, Mapping)]
    stopped = stopped_by(ledger)
    stopper = stopped[0] if stopped else None
    return {
        "status": status, "colour": _STATUS_COLOUR.get(status, "#6e7781"), "deploy_id": ledger.get("deploy_id"),
        "bits": _DOT.join(b for b in bits if b), "current_step": ledger.get("current_step"),
        "next_action": next_action(ledger),
        "dgd": {"name": ledger.get("dgd_name") or "?", "source": links.path(source.get("path")) if source else None,
                "sha": "sha256 " + str(source.get("sha256") or "")[:12]},
        "context": ledger.get("kube_context"), "namespace": ledger.get("namespace"), "endpoint": _endpoint(ledger),
        "served_model": ledger.get("served_model"), "gpus_requested": ledger.get("gpus_requested"),
        "allocation": _allocation(ledger), "ownership": _ownership(ledger), "budget": _budget(ledger),
        "ledger_path": ledger_path, "teardown": _teardown(ledger),
        # Shown when a step stopped the run without a blocker saying so.
        "stopped": stopped if stopped and not any(b.get("step") == stopper for b in blockers) else None,
        "blockers": blockers, "attempts": [{**a, "next": _next_step(a)} for a in attempts],
        # A ledger of the older rule: runs that ended failed without an attempt, counted as they were.
        "older": max(experiment.failed_deploys_in(ledger) - len(attempts), 0),
        "steps": [_step_line(s, stopper) for s in ledger.get("steps") or [] if isinstance(s, Mapping)],
    }


def summary_html(ledger: Mapping[str, Any], ledger_path: str | None = None, links: Links = NO_LINKS) -> str:
    """The block at the top of a report: status, DGD, cluster, endpoint, blockers, next action, steps."""
    return markup.block(_TEMPLATE, "summary", _summary(ledger, ledger_path, links))


# --------------------------------------------------------------------------------------------
# Step evidence
# --------------------------------------------------------------------------------------------


def evidence_html(evidence: Mapping[str, Any], links: Links = NO_LINKS) -> str:
    """One step's evidence as key/values (also the pytest-html extra of a step)."""
    return markup.block(_TEMPLATE, "evidence", value_node(dict(evidence), links)) if evidence else ""


def _has_records(value: Any) -> bool:
    """Whether a value renders as a table with a header row (a list of dicts): wide content."""
    if isinstance(value, Mapping):
        return any(_has_records(v) for v in value.values())
    if isinstance(value, list):
        return any(isinstance(v, Mapping) for v in value) or any(_has_records(v) for v in value)
    return False


def _cards(ledger: Mapping[str, Any], links: Links) -> list[dict[str, Any]]:
    stopped = stopped_by(ledger)
    cards = []
    for s in ledger.get("steps") or []:
        if not isinstance(s, Mapping):
            continue
        evidence = s.get("evidence") or {}
        card = _step_line(s, stopped[0] if stopped else None)
        card["body"] = value_node(evidence, links) if evidence else Muted("no evidence recorded")
        # Big evidence (nested tables) gets the full width instead of a horizontal scrollbar.
        card["wide"] = _has_records(evidence) or len(json.dumps(evidence, default=str)) > 600
        cards.append(card)
    return cards


# --------------------------------------------------------------------------------------------
# Readiness, smoke, patches, limitations, commands
# --------------------------------------------------------------------------------------------


def _components(comps: Any, links: Links) -> dict[str, Any] | None:
    """Step 6's components: ready of expected, pods, nodes (and a multinode component's leader and
    workers, each on its node: membership.multinode_role)."""
    if not isinstance(comps, Mapping) or not comps:
        return None
    rows = []
    layout = any(isinstance(c, Mapping) and c.get("layout") for c in comps.values())
    for name, raw in comps.items():
        c: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        rows.append({"name": name, "ready": c.get("ready"), "expected": c.get("expected"),
                     "ok": c.get("ready") == c.get("expected"), "pods": value_node(c.get("pods"), links),
                     "nodes": value_node(c.get("nodes"), links),
                     "layout": [f"{e.get('role')}: {e.get('pod')} on {e.get('node')}"
                                for e in c.get("layout") or [] if isinstance(e, Mapping)]})
    return {"layout": layout, "rows": rows}


def _readiness(ledger: Mapping[str, Any], links: Links) -> dict[str, Any] | None:
    rd = get_map(ledger, "readiness")
    if not rd:
        return None
    state = str(rd.get("state"))
    contention = rd.get("contention")
    return {
        "state": state,
        "colour": "#1a7f37" if state == "ready" else "#cf222e" if state not in ("waiting", "None") else "#9a6700",
        "after": f" after {seconds(rd.get('seconds'))}" if rd.get("seconds") is not None else None,
        "dgd_state": rd.get("dgd_state"), "ready_condition": rd.get("ready_condition"),
        "ready_reason": str(rd.get("ready_reason") or ""), "allocated_at": rd.get("allocated_at"),
        "diagnosis": value_node(rd.get("diagnosis"), links) if rd.get("diagnosis") else None,
        "evidence": value_node(rd.get("evidence"), links) if rd.get("evidence") else None,
        "rest": rest(rd, ("state", "seconds", "dgd_state", "ready_condition", "ready_reason", "allocated_at",
                          "diagnosis", "evidence", "components", "contention"), links),
        "components": _components(rd.get("components"), links),
        "contention": value_node(contention, links) if contention else None,
    }


def _smoke(ledger: Mapping[str, Any], links: Links) -> dict[str, Any] | None:
    sm = get_map(ledger, "smoke")
    if not sm:
        return None
    timings = sm.get("timings")
    return {
        "ok": bool(sm.get("success")), "models": sm.get("models_http_code"), "api": sm.get("api_http_code"),
        "gate": sm.get("gate"),
        "diagnosis": value_node(sm.get("diagnosis"), links) if sm.get("diagnosis") else None,
        "timings": ", ".join(f"{k.removesuffix('_s')} {seconds(v)}" for k, v in timings.items())
        if isinstance(timings, Mapping) and timings else None,
        "artifact": links.path(sm.get("artifact")) if sm.get("artifact") else None,
        "bodies": [links.path(b) for b in get_list(sm, "bodies")],
        "rest": rest(sm, ("success", "models_http_code", "api_http_code", "gate", "diagnosis", "timings",
                          "artifact", "bodies"), links),
    }


def _patches(ledger: Mapping[str, Any], links: Links) -> list[dict[str, Any]]:
    return [{"file": links.path(p.get("file")), "change": p.get("change"), "reason": p.get("reason"),
             "at": str(p.get("at"))} for p in ledger.get("patches") or [] if isinstance(p, Mapping)]


def _commands(ledger: Mapping[str, Any]) -> dict[str, Any]:
    commands = [c for c in ledger.get("commands") or [] if isinstance(c, Mapping)]
    kinds = Counter(str(c.get("kind")) for c in commands)
    return {"counted": ", ".join(f"{n} {k}" for k, n in kinds.most_common()),
            "rows": [{"kind": c.get("kind"), "outcome": c.get("outcome"), "at": str(c.get("at")),
                      "command": c.get("command")} for c in commands]}


_MORE = ("applied_manifests", "preflight", "config_engagement", "retired_previous", "previous_deployment",
         "hold_decisions", "reapplies", "resumes", "settings")


def _more(ledger: Mapping[str, Any], links: Links) -> list[tuple[str, Node]]:
    parts = []
    for key in _MORE:
        value = ledger.get(key)
        if value in (None, [], {}):
            continue
        count = f" ({len(value)})" if isinstance(value, list) else ""
        parts.append((f"{key.replace('_', ' ')}{count}", value_node(value, links)))
    return parts


def _listing(items: Sequence[Any], links: Links) -> list[Node]:
    return [value_node(i, links, 1) for i in items]


def _report(ledger: Mapping[str, Any], ledger_path: str | None, links: Links) -> dict[str, Any]:
    """The view model of everything a reviewer needs."""
    cleanup = [str(c) for c in ledger.get("cleanup_commands") or []]
    return {
        "summary": _summary(ledger, ledger_path, links), "cards": _cards(ledger, links),
        "capacity": capacity_view(ledger, links), "readiness": _readiness(ledger, links),
        "smoke": _smoke(ledger, links), "patches": _patches(ledger, links),
        "limitations": _listing(get_list(ledger, "limitations"), links),
        "diagnostics": _listing(get_list(ledger, "diagnostics"), links),
        "commands": _commands(ledger),
        "cleanup": "\n".join(cleanup) if cleanup else None,
        "more": _more(ledger, links),
    }


def report_html(ledger: Mapping[str, Any], ledger_path: str | None = None, links: Links = NO_LINKS) -> str:
    """Everything a reviewer needs, as one self-contained block (its own scoped CSS)."""
    return markup.block(_TEMPLATE, "report", _report(ledger, ledger_path, links))


def render(ledger: Mapping[str, Any], ledger_path: str | None = None, links: Links = NO_LINKS) -> str:
    """A standalone HTML page for one ledger (no external resources, no script)."""
    return markup.page("iteration_page.html.j2", title=f"{ledger.get('deploy_id')} - dynamo-deploy-suite",
                           report=_report(ledger, ledger_path, links))


def links_for(ledger_path: Path, page_dir: Path) -> Links:
    """Links from a page in ``page_dir`` to the artifacts of the ledger at ``ledger_path``.

    A ledger lives at ``EXP_ROOT/artifacts/deploy-iter-NNN/deployment_ledger.json`` and its paths are
    EXP_ROOT-relative; a ledger copied elsewhere gets no links (they would point nowhere).
    """
    deploy_dir = ledger_path.resolve().parent
    if deploy_dir.parent.name != "artifacts":
        return Links(None)
    exp_root = deploy_dir.parent.parent
    rel = Path(os.path.relpath(exp_root, page_dir.resolve())).as_posix()
    return Links("" if rel == "." else rel + "/")


def main(argv: list[str] | None = None) -> int:
    """``deploy-suite report LEDGER [-o OUT]``: write the HTML page of a ledger."""
    parser = argparse.ArgumentParser(prog="deploy-suite report", description=main.__doc__)
    parser.add_argument("ledger", type=Path, help="a deployment_ledger.json (given an experiment root directory "
                                                  "instead, deploy-suite report writes the experiment page)")
    parser.add_argument("-o", "--output", default=None,
                        help="output file, '-' for stdout (default: reports/<deploy_id>.html in the current "
                             "directory; never inside the deployment directory)")
    args = parser.parse_args(argv)
    try:
        data = ledger_mod.read(args.ledger)
    except (OSError, LedgerError) as exc:
        print(f"deploy-suite report: error: {exc}", file=sys.stderr)
        return 2
    try:
        ledger_mod.validate(data)
    except LedgerError as exc:
        # Still render: an old or hand-edited ledger is exactly what one wants to look at.
        print(f"deploy-suite report: warning: {exc}", file=sys.stderr)
    if args.output == "-":
        sys.stdout.write(render(data, str(args.ledger), links_for(args.ledger, Path.cwd())))
        return 0
    out = Path(args.output) if args.output else Path("reports") / f"{data.get('deploy_id', 'ledger')}.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    ledger_mod.atomic_write_text(out, render(data, str(args.ledger), links_for(args.ledger, out.parent)))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
