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

from deploy_suite.errors import LedgerError
from deploy_suite.record import experiment, resume
from deploy_suite.record import ledger as ledger_mod
from deploy_suite.reports.capacity import capacity_section
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


CSS = """
.dsr{color:#1f2328;font:13px/1.45 -apple-system,BlinkMacSystemFont,"Segoe UI",Helvetica,Arial,sans-serif;
 max-width:1320px}
.dsr h2{font-size:17px;color:#1f2328;margin:22px 0 6px;padding-bottom:4px;border-bottom:1px solid #d0d7de}
.dsr h3{font-size:14px;color:#1f2328;margin:12px 0 4px}
.dsr a{color:#0969da}
.dsr code,.dsr pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.dsr td code{overflow-wrap:anywhere}
.dsr pre{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:8px;margin:4px 0;
 overflow:auto;white-space:pre-wrap;word-break:break-word}
.dsr table{border-collapse:collapse;margin:4px 0}
.dsr th,.dsr td{padding:3px 8px;text-align:left;vertical-align:top;border:1px solid #d0d7de}
.dsr thead th{background:#f6f8fa;font-weight:600;white-space:nowrap}
.dsr td.dsr-num,.dsr th.dsr-num{text-align:right;font-variant-numeric:tabular-nums}
.dsr table.dsr-kv>tbody>tr>th{background:#f6f8fa;font-weight:600;white-space:nowrap;width:1%}
.dsr table.dsr-kv table.dsr-kv{margin:0}
.dsr table.dsr-kv table.dsr-kv th,.dsr table.dsr-kv table.dsr-kv td{padding:1px 6px}
.dsr ul{margin:2px 0;padding-left:18px}
.dsr .dsr-muted{color:#6e7781}
.dsr .dsr-head{display:flex;align-items:center;gap:12px;flex-wrap:wrap;margin:4px 0 8px}
.dsr .dsr-pill{display:inline-block;color:#fff;font-weight:700;border-radius:12px;padding:2px 12px;
 letter-spacing:.04em;text-transform:uppercase}
.dsr .dsr-badge{display:inline-block;color:#fff;font-size:11px;font-weight:600;border-radius:10px;
 padding:0 8px;white-space:nowrap}
.dsr .dsr-title{font-size:18px;font-weight:700}
.dsr .dsr-next{border-left:4px solid #0969da;background:#ddf4ff;padding:6px 10px;margin:6px 0;
 border-radius:0 6px 6px 0}
.dsr .dsr-grid{display:grid;grid-template-columns:minmax(0,1.25fr) minmax(0,1fr);gap:12px;align-items:start}
.dsr .dsr-box{border-left:4px solid #cf222e;background:#ffebe9;padding:6px 10px;margin:6px 0;
 border-radius:0 6px 6px 0}
.dsr .dsr-box.dsr-warn{border-color:#bf8700;background:#fff8c5}
.dsr .dsr-box.dsr-ok{border-color:#1a7f37;background:#dafbe1}
.dsr .dsr-box b.dsr-label{display:block;margin-bottom:2px}
.dsr table.dsr-steps td{border:none;border-bottom:1px solid #eaeef2;padding:2px 8px}
.dsr table.dsr-steps{width:100%;margin-top:6px}
.dsr .dsr-cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:10px;
 align-items:start}
.dsr .dsr-card{border:1px solid #d0d7de;border-top:3px solid #6e7781;border-radius:6px;padding:6px 8px;
 overflow-x:auto}
.dsr .dsr-card-head{margin-bottom:4px}
.dsr .dsr-card table.dsr-kv{width:100%}
.dsr .dsr-card th,.dsr .dsr-card td{border-color:#eaeef2;padding:2px 6px}
.dsr .dsr-card.dsr-wide{grid-column:1/-1}
.dsr .dsr-reason{margin-bottom:4px}
.dsr .dsr-legend{display:flex;flex-wrap:wrap;gap:4px 18px;align-items:center;margin:2px 0 8px}
.dsr .dsr-legend svg{vertical-align:middle;margin-right:5px}
.dsr details{margin:6px 0}
.dsr summary{cursor:pointer;font-weight:600}
.dsr .dsr-svg{overflow-x:auto;margin:6px 0}
.dsr .dsr-svg svg{max-width:100%;height:auto}
@media (max-width:1000px){.dsr .dsr-grid{grid-template-columns:1fr}}
@media print{@page{size:A4;margin:12mm}body{margin:0}.dsr{font-size:10px;max-width:none}
 .dsr .dsr-grid,.dsr .dsr-cards{display:block}.dsr .dsr-card{break-inside:avoid;margin:4px 0}
 .dsr tr,.dsr svg{break-inside:avoid}.dsr .dsr-svg{overflow:visible}.dsr a{color:inherit;text-decoration:none}
 .dsr pre{white-space:pre-wrap}.dsr code,.dsr pre{font-size:9px}.dsr th,.dsr td{padding:2px 4px}
 .dsr .dsr-pill,.dsr .dsr-badge{font-size:8px;padding:0 5px}}
"""


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


def _endpoint(ledger: Mapping[str, Any]) -> str:
    endpoint = ledger.get("endpoint")
    if not endpoint:
        return muted("not known yet")
    port = f":{endpoint['port']}" if endpoint.get("port") else ""
    text = f"{endpoint.get('kind', '?')} {endpoint.get('target', '?')}{port}{endpoint.get('path', '')}"
    worker = endpoint.get("worker_instance_id")
    return esc(text) + (muted(f" (worker instance {worker})") if worker not in (None, "") else "")


def stopped_by(ledger: Mapping[str, Any]) -> tuple[str, str] | None:
    """The step that stopped the run (the first failed or blocked one) and its reason."""
    for step in ledger.get("steps") or []:
        if isinstance(step, Mapping) and step.get("outcome") in (StepOutcome.FAILED, StepOutcome.BLOCKED):
            return str(step.get("name")), str(step.get("reason") or step.get("outcome"))
    return None


STOPPED_HERE = "stopped the run (the reason is at the top)"
OLDER_FAILED_RUN = ("<li>a run that ended <b>failed</b> without a recorded attempt (a ledger written before a "
                    "failed run required one): it counts one failed deploy, as it did</li>")


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


def _step_line(step: Mapping[str, Any], stopper: str | None) -> str:
    outcome = str(step.get("outcome"))
    colour = _OUTCOME_COLOUR.get(outcome, "#6e7781")
    mark = _OUTCOME_MARK.get(outcome, "?")
    reason = step_reason(step, stopper)
    return (f'<tr><td style="color:{colour};font-weight:700;width:1%">{esc(mark)}</td>'
            f"<td style=\"width:1%;white-space:nowrap\">{esc(step.get('name'))}</td>"
            f"<td style=\"width:1%\">{badge(outcome, colour)}</td>"
            f'<td class="dsr-num" style="width:1%;white-space:nowrap">{esc(seconds(step.get("duration_s")))}</td>'
            f"<td>{esc(reason) if reason else ''}</td></tr>")


def summary_html(ledger: Mapping[str, Any], ledger_path: str | None = None, links: Links = NO_LINKS) -> str:
    """The block at the top of a report: status, DGD, cluster, endpoint, blockers, next action, steps."""
    status = str(ledger.get("status"))
    colour = _STATUS_COLOUR.get(status, "#6e7781")
    source = get_map(ledger, "source_dgd")
    session = get_map(ledger, "session")
    bits = [f"iteration {ledger.get('iteration')}", str(ledger.get("provenance") or "")]
    if ledger.get("review_id"):
        bits.append(f"review {ledger.get('review_id')}")
    bits.append(f"updated {ledger.get('updated_at')}")
    if session and session.get("finished_at") is None:
        bits.append("session not finished (running or interrupted)")
    head = (f'<div class="dsr-head"><span class="dsr-pill" style="background:{colour}">{esc(status)}</span>'
            f'<span class="dsr-title">{esc(ledger.get("deploy_id"))}</span>'
            f"{muted(_DOT.join(b for b in bits if b))}"
            f"{muted(_DOT + 'current step ')}<b>{esc(ledger.get('current_step'))}</b></div>")
    dgd = (f"<b>{esc(ledger.get('dgd_name') or '?')}</b> "
           + (f"from {links.path(source.get('path'))} "
              f"{muted('sha256 ' + str(source.get('sha256') or '')[:12])}" if source
              else muted("source not known: step1_inputs did not pass")))
    pairs = [
        ("DGD", dgd),
        ("context / namespace", f"<code>{esc(ledger.get('kube_context'))}</code> / "
                                f"<code>{esc(ledger.get('namespace'))}</code>"),
        ("endpoint", _endpoint(ledger)),
        ("served model", esc(ledger.get("served_model")) if ledger.get("served_model") else muted("not known yet")),
        ("GPUs requested", esc(ledger.get("gpus_requested")) if ledger.get("gpus_requested") is not None
         else muted("not known yet")),
    ]
    pairs.append(("GPU allocation", _allocation(ledger)))
    pairs.append(("ownership", _ownership(ledger)))
    pairs.append(("budget", _budget(ledger)))
    if ledger_path:
        pairs.append(("ledger", f"<code>{esc(ledger_path)}</code>"))
    left = kv_table(pairs)

    blockers = [b for b in ledger.get("blockers") or [] if isinstance(b, Mapping)]
    attempts = [a for a in ledger.get("failed_attempts") or [] if isinstance(a, Mapping)]
    # A ledger of the older rule: runs that ended failed without an attempt, counted as they were.
    older = experiment.failed_deploys_in(ledger) - len(attempts)
    right = [
        _box("blockers", "dsr-blockers", [
            f"<li><b>{esc(b.get('step'))}</b> [{esc(b.get('class'))}] {esc(b.get('message'))}"
            f"<br><i>fix:</i> {esc(b.get('fix'))}</li>" for b in blockers]),
        _box("failed attempts", "dsr-warn", [
            f"<li>{esc(a.get('at'))} <b>{esc(a.get('step'))}</b> [{esc(a.get('category'))}] "
            f"{esc(a.get('diagnosis'))}</li>" for a in attempts] + [OLDER_FAILED_RUN] * max(older, 0),
            _torn_down(ledger)),
    ]
    if attempts and isinstance(ledger.get("teardown"), Mapping):
        right.append(f'<div class="dsr-box dsr-warn">{_torn_down(ledger).removeprefix("<br>")}</div>')
    stopped = stopped_by(ledger)
    stopper = stopped[0] if stopped else None
    if stopped and not any(b.get("step") == stopper for b in blockers):
        right.insert(0, f'<div class="dsr-box dsr-blockers"><b class="dsr-label">stopped by {esc(stopper)}</b>'
                        f"{esc(stopped[1])}</div>")
    steps = "".join(_step_line(s, stopper) for s in ledger.get("steps") or [] if isinstance(s, Mapping))
    right.append(f'<table class="dsr-steps"><tbody>{steps}</tbody></table>')
    return (
        '<div class="deploy-suite-summary">'
        f"{head}"
        f'<div class="dsr-next"><b>next action:</b> {esc(next_action(ledger))}</div>'
        f'<div class="dsr-grid"><div>{left}</div><div>{"".join(right)}</div></div>'
        "</div>"
    )


def _box(label: str, css: str, items: list[str], when_empty: str = "") -> str:
    """A summary box listing ``items``, or saying ``none`` (plus ``when_empty``) in green."""
    if not items:
        return f'<div class="dsr-box dsr-ok"><b class="dsr-label">{label}</b>none{when_empty}</div>'
    return (f'<div class="dsr-box {css}"><b class="dsr-label">{label} ({len(items)})</b>'
            f"<ul>{''.join(items)}</ul></div>")


def _ownership(ledger: Mapping[str, Any]) -> str:
    """Whose the DGD is (docs/procedure.md, "Ownership"): the field manager step 5 applied it with."""
    applied = ledger.get("applied_dgd")
    if not isinstance(applied, Mapping):
        return muted("not applied by this run")
    manager = applied.get("field_manager")
    if not manager:
        return f"applied, uid <code>{esc(applied.get('uid'))}</code>"
    return (f"applied with field manager <code>{esc(manager)}</code>, uid <code>{esc(applied.get('uid'))}</code> "
            + muted("(a same-named DGD without this manager is never changed or deleted)"))


def _allocation(ledger: Mapping[str, Any]) -> str:
    """The allocation intervals (docs/procedure.md, "Resume") and their GPU-hours as of the ledger's last write."""
    spans = resume.intervals(ledger)
    if not spans:
        return muted("no GPU pod bound yet")
    until = ledger.get("updated_at")
    hours = resume.gpu_hours(ledger, now=str(until) if until else None)
    held = spans[-1].get("released_at") is None and not ledger.get("torn_down_at")
    return (f"{len(spans)} interval(s) from {esc(spans[0].get('allocated_at'))}, {hours:g} GPU-hours"
            + (f" {muted('(still held at ' + str(until) + ')')}" if held else _torn_down(ledger)))


_BUDGETS = (("max_failed_deploys", "failed deploys", "{:g}"), ("gpu_hours", "GPU-hours", "{:.2f}"),
            ("wall_clock_hours", "wall-clock hours", "{:.2f}"))


def _budget(ledger: Mapping[str, Any]) -> str:
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
        parts.append(f'<b style="color:#cf222e">{esc(text)} (spent)</b>' if usage.get("spent") else esc(text))
    return _DOT.join(parts) + " " + muted(f"at {state.get('at')}")


def _torn_down(ledger: Mapping[str, Any]) -> str:
    """The teardown policy and what it did (step 6), or when the DGD was torn down."""
    teardown = ledger.get("teardown")
    if isinstance(teardown, Mapping):
        return (f"<br><i>teardown ({esc(teardown.get('policy'))}):</i> {esc(teardown.get('action'))} at "
                f"{esc(teardown.get('at'))}: {esc(teardown.get('reason'))}")
    at = ledger.get("torn_down_at")
    return f"; torn down at {esc(at)}" if at else ""


# --------------------------------------------------------------------------------------------
# Step evidence
# --------------------------------------------------------------------------------------------


def evidence_html(evidence: Mapping[str, Any], links: Links = NO_LINKS) -> str:
    """One step's evidence as key/values (also the pytest-html extra of a step)."""
    return f'<div class="dsr">{value_html(dict(evidence), links)}</div>' if evidence else ""


def _has_records(value: Any) -> bool:
    """Whether a value renders as a table with a header row (a list of dicts): wide content."""
    if isinstance(value, Mapping):
        return any(_has_records(v) for v in value.values())
    if isinstance(value, list):
        return any(isinstance(v, Mapping) for v in value) or any(_has_records(v) for v in value)
    return False


def _steps_section(ledger: Mapping[str, Any], links: Links) -> str:
    stopped = stopped_by(ledger)
    cards = []
    for s in ledger.get("steps") or []:
        if not isinstance(s, Mapping):
            continue
        outcome = str(s.get("outcome"))
        colour = _OUTCOME_COLOUR.get(outcome, "#6e7781")
        evidence = s.get("evidence") or {}
        body = value_html(evidence, links) if evidence else muted("no evidence recorded")
        reason = step_reason(s, stopped[0] if stopped else None)
        if reason:
            body = f'<div class="dsr-reason"><i>reason:</i> {esc(reason)}</div>{body}'
        # Big evidence (nested tables) gets the full width instead of a horizontal scrollbar.
        wide = " dsr-wide" if _has_records(evidence) or len(json.dumps(evidence, default=str)) > 600 else ""
        cards.append(
            f'<div class="dsr-card{wide}" style="border-top-color:{colour}"><div class="dsr-card-head">'
            f'<span style="color:{colour}">{esc(_OUTCOME_MARK.get(outcome, "?"))}</span> <b>{esc(s.get("name"))}</b> '
            f"{badge(outcome, colour)} {muted(seconds(s.get('duration_s')))}</div>{body}</div>"
        )
    if not cards:
        return ""
    return f'<h2>Step evidence</h2><div class="dsr-cards">{"".join(cards)}</div>'


# --------------------------------------------------------------------------------------------
# Readiness, smoke, patches, limitations, commands
# --------------------------------------------------------------------------------------------


def _readiness_section(ledger: Mapping[str, Any], links: Links) -> str:
    rd = get_map(ledger, "readiness")
    if not rd:
        return ""
    state = str(rd.get("state"))
    colour = "#1a7f37" if state == "ready" else "#cf222e" if state not in ("waiting", "None") else "#9a6700"
    pairs = [
        ("state", badge(state, colour) + (muted(f" after {seconds(rd.get('seconds'))}")
                                           if rd.get("seconds") is not None else "")),
        ("DGD state", esc(rd.get("dgd_state"))),
        ("Ready condition", f"{esc(rd.get('ready_condition'))} {muted(str(rd.get('ready_reason') or ''))}"),
        ("allocated at", esc(rd.get("allocated_at"))),
    ]
    if rd.get("diagnosis"):
        pairs.append(("diagnosis", value_html(rd.get("diagnosis"), links)))
    if rd.get("evidence"):
        pairs.append(("evidence", value_html(rd.get("evidence"), links)))
    pairs.extend(rest(rd, ("state", "seconds", "dgd_state", "ready_condition", "ready_reason", "allocated_at",
                            "diagnosis", "evidence", "components", "contention"), links))
    parts = ["<h2>Readiness</h2>", kv_table(pairs)]
    comps = rd.get("components")
    if isinstance(comps, Mapping) and comps:
        rows = []
        # A multinode component's leader and workers, each on its node (membership.multinode_role).
        layout = any(isinstance(c, Mapping) and c.get("layout") for c in comps.values())
        for name, raw in comps.items():
            c: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
            ok = c.get("ready") == c.get("expected")
            ratio = f"{esc(c.get('ready'))}/{esc(c.get('expected'))}"
            row = [f"<b>{esc(name)}</b>", f'<span style="color:{"#1a7f37" if ok else "#cf222e"}">{ratio}</span>',
                   value_html(c.get("pods"), links), value_html(c.get("nodes"), links)]
            if layout:
                lines = [f"{esc(e.get('role'))}: {esc(e.get('pod'))} on {esc(e.get('node'))}"
                         for e in c.get("layout") or [] if isinstance(e, Mapping)]
                row.append("<br>".join(lines) or muted("single node"))
            rows.append(row)
        parts.append(html_table(["component", "ready", "pods", "nodes", *(["leader/workers"] if layout else [])],
                                rows, frozenset({1})))
    contention = rd.get("contention")
    parts.append("<h3>Contention</h3>" + (value_html(contention, links) if contention
                                           else muted("none: no pod waited for GPUs held by others")))
    return "".join(parts)


def _smoke_section(ledger: Mapping[str, Any], links: Links) -> str:
    sm = get_map(ledger, "smoke")
    if not sm:
        return ""
    ok = bool(sm.get("success"))
    pairs = [
        ("result", badge("passed" if ok else "failed", "#1a7f37" if ok else "#cf222e")),
        ("HTTP codes", f"<code>/v1/models</code> {esc(sm.get('models_http_code'))}, "
                       f"<code>/v1/chat/completions</code> {esc(sm.get('api_http_code'))}"),
        ("gate", esc(sm.get("gate")) if sm.get("gate") else muted("no gate failed" if ok else "none recorded")),
    ]
    if sm.get("diagnosis"):
        pairs.append(("diagnosis", value_html(sm.get("diagnosis"), links)))
    timings = sm.get("timings")
    if isinstance(timings, Mapping) and timings:
        pairs.append(("timings", ", ".join(f"{esc(k.removesuffix('_s'))} {esc(seconds(v))}"
                                           for k, v in timings.items())))
    if sm.get("artifact"):
        pairs.append(("artifact", links.path(sm.get("artifact"))))
    bodies = get_list(sm, "bodies")
    if bodies:
        pairs.append(("response bodies", "<br>".join(links.path(b) for b in bodies)))
    pairs.extend(rest(sm, ("success", "models_http_code", "api_http_code", "gate", "diagnosis", "timings",
                            "artifact", "bodies"), links))
    return "<h2>Smoke</h2>" + kv_table(pairs)


def _patches_section(ledger: Mapping[str, Any], links: Links) -> str:
    patches = [p for p in ledger.get("patches") or [] if isinstance(p, Mapping)]
    if not patches:
        return "<h2>Patches</h2>" + muted("none: the run-scoped copies are the handed-off files")
    rows = [[links.path(p.get("file")), esc(p.get("change")), esc(p.get("reason")), muted(str(p.get("at")))]
            for p in patches]
    return f"<h2>Patches ({len(patches)})</h2>" + html_table(["file", "change", "reason", "at"], rows)


def _list_section(title: str, items: Sequence[Any], links: Links, empty: str) -> str:
    if not items:
        return f"<h2>{esc(title)}</h2>" + muted(empty)
    return f"<h2>{esc(title)} ({len(items)})</h2>" + "<ul>" + "".join(
        f"<li>{value_html(i, links, 1)}</li>" for i in items) + "</ul>"


def _commands_section(ledger: Mapping[str, Any]) -> str:
    commands = [c for c in ledger.get("commands") or [] if isinstance(c, Mapping)]
    kinds = Counter(str(c.get("kind")) for c in commands)
    counted = ", ".join(f"{n} {k}" for k, n in kinds.most_common())
    rows = [[esc(i), esc(c.get("kind")), esc(c.get("outcome")), muted(str(c.get("at"))),
             f"<code>{esc(c.get('command'))}</code>"] for i, c in enumerate(commands, 1)]
    body = html_table(["#", "kind", "outcome", "at", "command"], rows, frozenset({0})) if rows else muted("none")
    return (f"<h2>Commands</h2><details><summary>{len(commands)} Kubernetes request(s)"
            f"{' (' + esc(counted) + ')' if counted else ''}, kubectl-equivalent</summary>{body}</details>")


def _cleanup_section(ledger: Mapping[str, Any]) -> str:
    cmds = [str(c) for c in ledger.get("cleanup_commands") or []]
    body = f"<pre>{esc(chr(10).join(cmds))}</pre>" if cmds else muted("none recorded")
    return "<h2>Cleanup</h2>" + body


_MORE = ("applied_manifests", "preflight", "config_engagement", "retired_previous", "previous_deployment",
         "hold_decisions", "reapplies", "resumes", "settings")


def _more_section(ledger: Mapping[str, Any], links: Links) -> str:
    parts = []
    for key in _MORE:
        value = ledger.get(key)
        if value in (None, [], {}):
            continue
        count = f" ({len(value)})" if isinstance(value, list) else ""
        parts.append(f"<details><summary>{esc(key.replace('_', ' '))}{count}</summary>"
                     f"{value_html(value, links)}</details>")
    return "<h2>More ledger detail</h2>" + "".join(parts) if parts else ""


def report_html(ledger: Mapping[str, Any], ledger_path: str | None = None, links: Links = NO_LINKS) -> str:
    """Everything a reviewer needs, as one self-contained block (its own scoped CSS)."""
    diagnostics = get_list(ledger, "diagnostics")
    limitations = get_list(ledger, "limitations")
    sections = [
        summary_html(ledger, ledger_path, links),
        _steps_section(ledger, links),
        capacity_section(ledger, links),
        _readiness_section(ledger, links),
        _smoke_section(ledger, links),
        _patches_section(ledger, links),
        _list_section("Limitations", limitations, links, "none recorded"),
        _list_section("Diagnostics", diagnostics, links, "none") if diagnostics else "",
        _commands_section(ledger),
        _cleanup_section(ledger),
        _more_section(ledger, links),
    ]
    return f'<div class="dsr"><style>{CSS}</style>{"".join(sections)}</div>'


def render(ledger: Mapping[str, Any], ledger_path: str | None = None, links: Links = NO_LINKS) -> str:
    """A standalone HTML page for one ledger (no external resources, no script)."""
    title = f"{ledger.get('deploy_id')} - dynamo-deploy-suite"
    return (
        f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{esc(title)}</title>"
        "<style>body{margin:16px 24px;background:#fff}</style></head><body>"
        f"{report_html(ledger, ledger_path, links)}</body></html>\n"
    )


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
