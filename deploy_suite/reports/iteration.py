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

Here: the summary, the sections and the page. Ledger values as HTML (key/values, record tables,
links) are ``deploy_suite.reports.values``; the capacity table and GPU picture ``report_capacity``.
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

from markupsafe import Markup

from deploy_suite.errors import LedgerError
from deploy_suite.record import experiment, resume
from deploy_suite.record import ledger as ledger_mod
from deploy_suite.reports.capacity import capacity_section
from deploy_suite.reports.markup import macros, page, style
from deploy_suite.reports.values import (
    NO_LINKS,
    badge,
    esc,
    get_list,
    get_map,
    html_table,
    kv_table,
    muted,
    rest,
    seconds,
    value_html,
)
from deploy_suite.reports.values import code as values_code
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


# The pages' scoped stylesheet (also the experiment page's base): templates/report.css.
CSS = style("report.css")


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


# --------------------------------------------------------------------------------------------
# Summary: one screen
# --------------------------------------------------------------------------------------------


def _t() -> Any:
    return macros("iteration.html.j2")


def _endpoint(ledger: Mapping[str, Any]) -> Markup:
    endpoint = ledger.get("endpoint")
    if not endpoint:
        return muted("not known yet")
    port = f":{endpoint['port']}" if endpoint.get("port") else ""
    text = f"{endpoint.get('kind', '?')} {endpoint.get('target', '?')}{port}{endpoint.get('path', '')}"
    worker = endpoint.get("worker_instance_id")
    return Markup(_t().endpoint(text, f" (worker instance {worker})" if worker not in (None, "") else None))


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


def _step_line(step: Mapping[str, Any], stopper: str | None) -> dict[str, Any]:
    outcome = str(step.get("outcome"))
    return {"outcome": outcome, "colour": _OUTCOME_COLOUR.get(outcome, "#6e7781"),
            "mark": _OUTCOME_MARK.get(outcome, "?"), "name": step.get("name"),
            "seconds": seconds(step.get("duration_s")), "reason": step_reason(step, stopper)}


def summary_html(ledger: Mapping[str, Any], ledger_path: str | None = None, links: Links = NO_LINKS) -> Markup:
    """The block at the top of a report: status, DGD, cluster, endpoint, blockers, next action, steps."""
    t = _t()
    status = str(ledger.get("status"))
    source = get_map(ledger, "source_dgd")
    session = get_map(ledger, "session")
    bits = [f"iteration {ledger.get('iteration')}", str(ledger.get("provenance") or "")]
    if ledger.get("review_id"):
        bits.append(f"review {ledger.get('review_id')}")
    bits.append(f"updated {ledger.get('updated_at')}")
    if session and session.get("finished_at") is None:
        bits.append("session not finished (running or interrupted)")
    not_known = muted("not known yet")
    pairs = [
        ("DGD", t.dgd(ledger.get("dgd_name") or "?", bool(source), links.path(source.get("path")) if source else "",
                      str(source.get("sha256") or "")[:12])),
        ("context / namespace", t.context(ledger.get("kube_context"), ledger.get("namespace"))),
        ("endpoint", _endpoint(ledger)),
        ("served model", esc(ledger.get("served_model")) if ledger.get("served_model") else not_known),
        ("GPUs requested", esc(ledger.get("gpus_requested")) if ledger.get("gpus_requested") is not None
         else not_known),
        ("GPU allocation", _allocation(ledger)),
        ("ownership", _ownership(ledger)),
        ("budget", _budget(ledger)),
    ]
    if ledger_path:
        pairs.append(("ledger", values_code(ledger_path)))
    blockers = [b for b in ledger.get("blockers") or [] if isinstance(b, Mapping)]
    attempts = [a for a in ledger.get("failed_attempts") or [] if isinstance(a, Mapping)]
    # A ledger of the older rule: runs that ended failed without an attempt, counted as they were.
    older = experiment.failed_deploys_in(ledger) - len(attempts)
    right = [
        t.box("blockers", "dsr-blockers", [t.blocker(b) for b in blockers], ""),
        t.box("failed attempts", "dsr-warn", [t.attempt(a) for a in attempts] + [t.older_failed_run()] * max(older, 0),
              _torn_down(ledger)),
    ]
    if attempts and isinstance(ledger.get("teardown"), Mapping):
        right.append(t.warn_box(_torn_down(ledger, br=False)))
    stopped = stopped_by(ledger)
    stopper = stopped[0] if stopped else None
    if stopped and not any(b.get("step") == stopper for b in blockers):
        right.insert(0, t.stopped_box(stopper, stopped[1]))
    right.append(t.steps_table([_step_line(s, stopper) for s in ledger.get("steps") or [] if isinstance(s, Mapping)]))
    return Markup(t.summary({"status": status, "colour": _STATUS_COLOUR.get(status, "#6e7781"),
                             "deploy_id": ledger.get("deploy_id"), "bits": _DOT.join(b for b in bits if b),
                             "current_step": ledger.get("current_step"), "next_action": next_action(ledger),
                             "left": kv_table(pairs), "right": right}))


def _ownership(ledger: Mapping[str, Any]) -> Markup:
    """Whose the DGD is (README, "Ownership"): the field manager step 5 applied it with."""
    applied = ledger.get("applied_dgd")
    if not isinstance(applied, Mapping):
        return muted("not applied by this run")
    return Markup(_t().ownership(applied.get("field_manager"), applied.get("uid")))


def _allocation(ledger: Mapping[str, Any]) -> Markup:
    """The allocation intervals (README, "Resume") and their GPU-hours as of the ledger's last write."""
    spans = resume.intervals(ledger)
    if not spans:
        return muted("no GPU pod bound yet")
    until = ledger.get("updated_at")
    hours = resume.gpu_hours(ledger, now=str(until) if until else None)
    held = spans[-1].get("released_at") is None and not ledger.get("torn_down_at")
    return Markup(_t().allocation(len(spans), spans[0].get("allocated_at"), f"{hours:g}",
                                  f"(still held at {until})" if held else None, _torn_down(ledger)))


_BUDGETS = (("max_failed_deploys", "failed deploys", "{:g}"), ("gpu_hours", "GPU-hours", "{:.2f}"),
            ("wall_clock_hours", "wall-clock hours", "{:.2f}"))


def _budget(ledger: Mapping[str, Any]) -> Markup:
    """Used of granted for each budget (step 2's ``budget`` section); a spent one in red."""
    state = get_map(ledger, "budget")
    if not state:
        return muted("not judged: step2_validate did not run")
    parts = []
    for key, label, fmt in _BUDGETS:
        found = state.get(key)
        usage: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        used, limit = usage.get("used"), usage.get("limit")
        text = f"{label} {fmt.format(used) if isinstance(used, int | float) else '?'} of " + (
            fmt.format(limit) if isinstance(limit, int | float) else "unlimited")
        parts.append((text, bool(usage.get("spent"))))
    return Markup(_t().budget(parts, state.get("at")))


def _torn_down(ledger: Mapping[str, Any], *, br: bool = True) -> Markup:
    """The teardown policy and what it did (step 6), or when the DGD was torn down."""
    teardown = ledger.get("teardown")
    return Markup(_t().torn_down(teardown if isinstance(teardown, Mapping) else None, ledger.get("torn_down_at"), br))


# --------------------------------------------------------------------------------------------
# Step evidence
# --------------------------------------------------------------------------------------------


def evidence_html(evidence: Mapping[str, Any], links: Links = NO_LINKS) -> str:
    """One step's evidence as key/values (also the pytest-html extra of a step)."""
    return Markup(_t().evidence(value_html(dict(evidence), links))) if evidence else ""


def _has_records(value: Any) -> bool:
    """Whether a value renders as a table with a header row (a list of dicts): wide content."""
    if isinstance(value, Mapping):
        return any(_has_records(v) for v in value.values())
    if isinstance(value, list):
        return any(isinstance(v, Mapping) for v in value) or any(_has_records(v) for v in value)
    return False


def _steps_section(ledger: Mapping[str, Any], links: Links) -> Markup:
    stopped = stopped_by(ledger)
    cards = []
    for s in ledger.get("steps") or []:
        if not isinstance(s, Mapping):
            continue
        evidence = s.get("evidence") or {}
        card = _step_line(s, stopped[0] if stopped else None)
        card["body"] = value_html(evidence, links) if evidence else muted("no evidence recorded")
        # Big evidence (nested tables) gets the full width instead of a horizontal scrollbar.
        card["wide"] = _has_records(evidence) or len(json.dumps(evidence, default=str)) > 600
        cards.append(card)
    return Markup(_t().steps_section(cards))


# --------------------------------------------------------------------------------------------
# Readiness, smoke, patches, limitations, commands
# --------------------------------------------------------------------------------------------


def _components(comps: Any, links: Links) -> Markup | str:
    """Step 6's components: ready of expected, pods, nodes (and a multinode component's leader and
    workers, each on its node: membership.multinode_role)."""
    if not isinstance(comps, Mapping) or not comps:
        return ""
    t = _t()
    rows = []
    layout = any(isinstance(c, Mapping) and c.get("layout") for c in comps.values())
    for name, raw in comps.items():
        c: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        row = [t.bold(name), t.ratio(c.get("ready"), c.get("expected"), c.get("ready") == c.get("expected")),
               value_html(c.get("pods"), links), value_html(c.get("nodes"), links)]
        if layout:
            row.append(t.layout([f"{e.get('role')}: {e.get('pod')} on {e.get('node')}"
                                 for e in c.get("layout") or [] if isinstance(e, Mapping)]))
        rows.append(row)
    return html_table(["component", "ready", "pods", "nodes", *(["leader/workers"] if layout else [])],
                      rows, frozenset({1}))


def _readiness_section(ledger: Mapping[str, Any], links: Links) -> Markup | str:
    rd = get_map(ledger, "readiness")
    if not rd:
        return ""
    t = _t()
    state = str(rd.get("state"))
    colour = "#1a7f37" if state == "ready" else "#cf222e" if state not in ("waiting", "None") else "#9a6700"
    after = f" after {seconds(rd.get('seconds'))}" if rd.get("seconds") is not None else None
    pairs = [
        ("state", t.readiness_state(state, colour, after)),
        ("DGD state", esc(rd.get("dgd_state"))),
        ("Ready condition", t.ready_condition(rd.get("ready_condition"), str(rd.get("ready_reason") or ""))),
        ("allocated at", esc(rd.get("allocated_at"))),
    ]
    if rd.get("diagnosis"):
        pairs.append(("diagnosis", value_html(rd.get("diagnosis"), links)))
    if rd.get("evidence"):
        pairs.append(("evidence", value_html(rd.get("evidence"), links)))
    pairs.extend(rest(rd, ("state", "seconds", "dgd_state", "ready_condition", "ready_reason", "allocated_at",
                            "diagnosis", "evidence", "components", "contention"), links))
    contention = rd.get("contention")
    return Markup(t.readiness(kv_table(pairs), _components(rd.get("components"), links),
                              value_html(contention, links) if contention else None))


def _smoke_section(ledger: Mapping[str, Any], links: Links) -> Markup | str:
    sm = get_map(ledger, "smoke")
    if not sm:
        return ""
    t = _t()
    ok = bool(sm.get("success"))
    pairs = [
        ("result", badge("passed" if ok else "failed", "#1a7f37" if ok else "#cf222e")),
        ("HTTP codes", t.http_codes(sm.get("models_http_code"), sm.get("api_http_code"))),
        ("gate", esc(sm.get("gate")) if sm.get("gate") else muted("no gate failed" if ok else "none recorded")),
    ]
    if sm.get("diagnosis"):
        pairs.append(("diagnosis", value_html(sm.get("diagnosis"), links)))
    timings = sm.get("timings")
    if isinstance(timings, Mapping) and timings:
        pairs.append(("timings", esc(", ".join(f"{k.removesuffix('_s')} {seconds(v)}" for k, v in timings.items()))))
    if sm.get("artifact"):
        pairs.append(("artifact", links.path(sm.get("artifact"))))
    bodies = get_list(sm, "bodies")
    if bodies:
        pairs.append(("response bodies", t.lines([links.path(b) for b in bodies])))
    pairs.extend(rest(sm, ("success", "models_http_code", "api_http_code", "gate", "diagnosis", "timings",
                            "artifact", "bodies"), links))
    return Markup(t.section("Smoke", kv_table(pairs)))


def _patches_section(ledger: Mapping[str, Any], links: Links) -> Markup:
    patches = [p for p in ledger.get("patches") or [] if isinstance(p, Mapping)]
    if not patches:
        return Markup(_t().section("Patches", muted("none: the run-scoped copies are the handed-off files")))
    rows = [[links.path(p.get("file")), esc(p.get("change")), esc(p.get("reason")), muted(str(p.get("at")))]
            for p in patches]
    return Markup(_t().section(f"Patches ({len(patches)})", html_table(["file", "change", "reason", "at"], rows)))


def _list_section(title: str, items: Sequence[Any], links: Links, empty: str) -> Markup:
    return Markup(_t().listing(title, [value_html(i, links, 1) for i in items], empty))


def _commands_section(ledger: Mapping[str, Any]) -> Markup:
    commands = [c for c in ledger.get("commands") or [] if isinstance(c, Mapping)]
    kinds = Counter(str(c.get("kind")) for c in commands)
    rows = [[esc(i), esc(c.get("kind")), esc(c.get("outcome")), muted(str(c.get("at"))), values_code(c.get("command"))]
            for i, c in enumerate(commands, 1)]
    body = html_table(["#", "kind", "outcome", "at", "command"], rows, frozenset({0})) if rows else muted("none")
    return Markup(_t().commands(len(commands), ", ".join(f"{n} {k}" for k, n in kinds.most_common()), body))


def _cleanup_section(ledger: Mapping[str, Any]) -> Markup:
    cmds = [str(c) for c in ledger.get("cleanup_commands") or []]
    return Markup(_t().cleanup("\n".join(cmds) if cmds else None))


_MORE = ("applied_manifests", "preflight", "config_engagement", "retired_previous", "previous_deployment",
         "hold_decisions", "reapplies", "resumes", "settings")


def _more_section(ledger: Mapping[str, Any], links: Links) -> Markup:
    parts = []
    for key in _MORE:
        value = ledger.get(key)
        if value in (None, [], {}):
            continue
        count = f" ({len(value)})" if isinstance(value, list) else ""
        parts.append((f"{key.replace('_', ' ')}{count}", value_html(value, links)))
    return Markup(_t().more(parts))


def report_html(ledger: Mapping[str, Any], ledger_path: str | None = None, links: Links = NO_LINKS) -> Markup:
    """Everything a reviewer needs, as one self-contained block (its own scoped CSS)."""
    diagnostics = get_list(ledger, "diagnostics")
    sections = [
        summary_html(ledger, ledger_path, links),
        _steps_section(ledger, links),
        capacity_section(ledger, links),
        _readiness_section(ledger, links),
        _smoke_section(ledger, links),
        _patches_section(ledger, links),
        _list_section("Limitations", get_list(ledger, "limitations"), links, "none recorded"),
        _list_section("Diagnostics", diagnostics, links, "none") if diagnostics else "",
        _commands_section(ledger),
        _cleanup_section(ledger),
        _more_section(ledger, links),
    ]
    return Markup(_t().report(CSS, sections))


def render(ledger: Mapping[str, Any], ledger_path: str | None = None, links: Links = NO_LINKS) -> str:
    """A standalone HTML page for one ledger (no external resources, no script)."""
    return page("page.html.j2", title=f"{ledger.get('deploy_id')} - dynamo-deploy-suite", style="",
                body=report_html(ledger, ledger_path, links))


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
