"""Render a deployment ledger as HTML, so any ledger (also an old one) can be re-rendered.

The pytest-html report of a run puts ``report_html(ledger)`` at its top (``plugins/report.py``);
``deploy-suite report LEDGER`` calls ``main`` to write a standalone page from a ledger alone. Like
pytest-html, the data model (the ledger dict) is kept apart from the renderer: nothing here reads
anything but the ledger.

What a reviewer sees, in order: the summary that fits one screen (status, DGD, cluster, endpoint,
served model, blockers with their fix, failed attempts, next action, one line per step), the
per-step evidence as key/values, the capacity evidence (table and an inline SVG picture of GPU
slots per node), readiness, smoke, patches, limitations, the Kubernetes commands and the cleanup
commands. The page is self-contained (inline CSS and SVG, no script, no external resource) and
every ledger string is HTML-escaped. Classes are prefixed ``dsr-`` so that pytest-html's own
stylesheet and script leave the block alone.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from deploy_suite import ledger as ledger_mod
from deploy_suite.errors import LedgerError

_STATUS_COLOUR = {"ready": "#1a7f37", "in_progress": "#9a6700", "blocked": "#cf222e", "failed": "#cf222e"}
_OUTCOME_COLOUR = {"passed": "#1a7f37", "failed": "#cf222e", "blocked": "#cf222e", "skipped": "#9a6700",
                   "not_run": "#6e7781"}
_OUTCOME_MARK = {"passed": "\u2713", "failed": "\u2717", "blocked": "\u2717", "skipped": "\u21b7",
                 "not_run": "\u2013"}
_CAPACITY_COLOUR = {"sufficient": "#1a7f37", "insufficient": "#cf222e", "unknown": "#9a6700"}
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
_DOT = " \u00b7 "

# GPU slot picture: one colour per holder kind (capacity.CapacityResult.grid() kinds).
SLOT_FILL = {"other": "#8c959f", "planned": "#0969da", "free": "#dafbe1", "over": "#cf222e"}
SLOT_STROKE = {"other": "#6e7781", "planned": "#0550ae", "free": "#4ac26b", "over": "#a40e26"}
SLOT_LABEL = {"other": "held by other pods", "planned": "this DGD (planned)", "free": "free",
              "over": "over-committed"}
_CELL, _GAP, _ROW_H = 20, 4, 28

_CSS = """
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
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _muted(text: str) -> str:
    return f'<span class="dsr-muted">{_e(text)}</span>'


def _badge(text: str, colour: str) -> str:
    return f'<span class="dsr-badge" style="background:{colour}">{_e(text)}</span>'


def _seconds(value: Any) -> str:
    return f"{value:.2f} s" if isinstance(value, int | float) and not isinstance(value, bool) else ""


def _get_map(ledger: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = ledger.get(key)
    return value if isinstance(value, Mapping) else {}


def _get_list(container: Mapping[str, Any], key: str) -> list[Any]:
    value = container.get(key)
    return list(value) if isinstance(value, list) else []


def next_action(ledger: Mapping[str, Any]) -> str:
    """One sentence: what a person (or the next role) should do now."""
    status = ledger.get("status")
    iteration = ledger.get("iteration")
    blockers = ledger.get("blockers") or []
    if status == "ready":
        endpoint = ledger.get("endpoint") or {}
        target = endpoint.get("target") or ledger.get("frontend_service") or "the frontend"
        return (f"hand off to perf-analyzer: {ledger.get('served_model') or 'the served model'} is answering on "
                f"{target} in {ledger.get('namespace')} (context {ledger.get('kube_context')})")
    if status == "blocked" and blockers:
        return "fix the blocker, then rerun the same command (a rerun of this candidate resumes in place)"
    if status == "failed":
        return ("read the diagnostics and failed_attempts; make a diagnosis-backed run-scoped patch and rerun, "
                "or hand off to troubleshooting (no blind retries)")
    step = ledger.get("current_step")
    return (f"continue with {step}: rerun `pytest --iter={iteration}` with the same handoff; it resumes in the "
            "same directory")


# --------------------------------------------------------------------------------------------
# Generic values: evidence dicts as readable key/values, artifact paths as relative links
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Links:
    """How EXP_ROOT-relative ledger paths become links: ``prefix`` leads from the page to EXP_ROOT.

    ``prefix`` None: paths are shown as text (the page's location relative to EXP_ROOT is unknown).
    """

    prefix: str | None = None

    def path(self, path: Any) -> str:
        text = str(path)
        # Only plain EXP_ROOT-relative paths become links; quote() also turns "scheme:" into "scheme%3A".
        if self.prefix is None or not text or text.startswith("/") or ".." in text.split("/") or any(
            c.isspace() for c in text
        ):
            return f"<code>{_e(text)}</code>"
        return f'<a href="{_e(self.prefix + quote(text))}"><code>{_e(text)}</code></a>'


def _looks_like_artifact(text: str) -> bool:
    return text.startswith(("artifacts/", "inputs/")) and not any(c.isspace() for c in text)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def value_html(value: Any, links: Links = Links(), depth: int = 0) -> str:
    """One ledger value as HTML: scalars inline, dicts as key/value tables, uniform lists as tables."""
    if value is None:
        return _muted("\u2013")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return _e(value)
    if isinstance(value, str):
        if value == "":
            return _muted("(empty)")
        if "\n" in value or len(value) > 240:
            return f"<pre>{_e(value)}</pre>"
        return links.path(value) if _looks_like_artifact(value) else _e(value)
    if depth >= 4:
        return f"<pre>{_e(json.dumps(value, indent=1, default=str))}</pre>"
    if isinstance(value, Mapping):
        if not value:
            return _muted("none")
        inner = list(value.values())
        if len(inner) > 1 and all(isinstance(v, Mapping) and v and all(_is_scalar(x) for x in v.values())
                                  for v in inner):
            # A dict of flat records (e.g. copies by manifest type): one row per key reads best.
            keys: list[str] = []
            for item in inner:
                keys.extend(str(k) for k in item if str(k) not in keys)
            if len(keys) <= 6:
                return _table(["", *keys], [[f"<b>{_e(k)}</b>", *(value_html(v.get(c), links, depth + 1)
                                                                for c in keys)] for k, v in value.items()])
        return kv_table([(str(k), value_html(v, links, depth + 1)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        if not value:
            return _muted("none")
        if all(_is_scalar(v) for v in value):
            parts = [value_html(v, links, depth + 1) for v in value]
            if sum(len(str(v)) for v in value) <= 120 and not any(_looks_like_artifact(str(v)) for v in value):
                return ", ".join(parts)
            return "<ul>" + "".join(f"<li>{p}</li>" for p in parts) + "</ul>"
        if all(isinstance(v, Mapping) for v in value):
            cols: list[str] = []
            for item in value:
                cols.extend(str(k) for k in item if str(k) not in cols)
            if len(cols) <= 8:
                return _table(cols, [[value_html(item.get(k), links, depth + 1) for k in cols] for item in value])
        return "<ul>" + "".join(f"<li>{value_html(v, links, depth + 1)}</li>" for v in value) + "</ul>"
    return _e(value)


def kv_table(pairs: Sequence[tuple[str, str]], cls: str = "dsr-kv") -> str:
    """Rows of (escaped-by-us key, already-rendered HTML value)."""
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in pairs)
    return f'<table class="{cls}"><tbody>{rows}</tbody></table>'


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], numeric: frozenset[int] = frozenset(),
           cls: str = "") -> str:
    """A table with an escaped header and already-rendered cells; ``numeric`` column indexes align right."""
    def td(i: int, cell: str, tag: str = "td") -> str:
        return f'<{tag} class="dsr-num">{cell}</{tag}>' if i in numeric else f"<{tag}>{cell}</{tag}>"

    thead = "".join(td(i, _e(h), "th") for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(td(i, c) for i, c in enumerate(row)) + "</tr>" for row in rows)
    klass = f' class="{cls}"' if cls else ""
    return f"<table{klass}><thead><tr>{thead}</tr></thead><tbody>{body}</tbody></table>"


def _rest(section: Mapping[str, Any], shown: Sequence[str], links: Links) -> list[tuple[str, str]]:
    """Key/values of a section not shown by its dedicated rendering: nothing of the ledger is hidden."""
    return [(str(k), value_html(v, links, 1)) for k, v in section.items() if k not in shown]


# --------------------------------------------------------------------------------------------
# Summary: one screen
# --------------------------------------------------------------------------------------------


def _endpoint(ledger: Mapping[str, Any]) -> str:
    endpoint = ledger.get("endpoint")
    if not endpoint:
        return _muted("not known yet")
    port = f":{endpoint['port']}" if endpoint.get("port") else ""
    text = f"{endpoint.get('kind', '?')} {endpoint.get('target', '?')}{port}{endpoint.get('path', '')}"
    worker = endpoint.get("worker_instance_id")
    return _e(text) + (_muted(f" (worker instance {worker})") if worker not in (None, "") else "")


def _step_line(step: Mapping[str, Any]) -> str:
    outcome = str(step.get("outcome"))
    colour = _OUTCOME_COLOUR.get(outcome, "#6e7781")
    mark = _OUTCOME_MARK.get(outcome, "?")
    reason = step.get("reason")
    return (f'<tr><td style="color:{colour};font-weight:700;width:1%">{_e(mark)}</td>'
            f"<td style=\"width:1%;white-space:nowrap\">{_e(step.get('name'))}</td>"
            f"<td style=\"width:1%\">{_badge(outcome, colour)}</td>"
            f'<td class="dsr-num" style="width:1%;white-space:nowrap">{_e(_seconds(step.get("duration_s")))}</td>'
            f"<td>{_e(reason) if reason else ''}</td></tr>")


def summary_html(ledger: Mapping[str, Any], ledger_path: str | None = None, links: Links = Links()) -> str:
    """The block at the top of a report: status, DGD, cluster, endpoint, blockers, next action, steps."""
    status = str(ledger.get("status"))
    colour = _STATUS_COLOUR.get(status, "#6e7781")
    source = _get_map(ledger, "source_dgd")
    session = _get_map(ledger, "session")
    bits = [f"iteration {ledger.get('iteration')}", str(ledger.get("provenance") or "")]
    if ledger.get("review_id"):
        bits.append(f"review {ledger.get('review_id')}")
    bits.append(f"updated {ledger.get('updated_at')}")
    if session and session.get("finished_at") is None:
        bits.append("session not finished (running or interrupted)")
    head = (f'<div class="dsr-head"><span class="dsr-pill" style="background:{colour}">{_e(status)}</span>'
            f'<span class="dsr-title">{_e(ledger.get("deploy_id"))}</span>'
            f"{_muted(_DOT.join(b for b in bits if b))}"
            f"{_muted(_DOT + 'current step ')}<b>{_e(ledger.get('current_step'))}</b></div>")
    dgd = (f"<b>{_e(ledger.get('dgd_name') or '?')}</b> "
           + (f"from {links.path(source.get('path'))} "
              f"{_muted('sha256 ' + str(source.get('sha256') or '')[:12])}" if source
              else _muted("source not known: step1_inputs did not pass")))
    pairs = [
        ("DGD", dgd),
        ("context / namespace", f"<code>{_e(ledger.get('kube_context'))}</code> / "
                                f"<code>{_e(ledger.get('namespace'))}</code>"),
        ("endpoint", _endpoint(ledger)),
        ("served model", _e(ledger.get("served_model")) if ledger.get("served_model") else _muted("not known yet")),
        ("GPUs requested", _e(ledger.get("gpus_requested")) if ledger.get("gpus_requested") is not None
         else _muted("not known yet")),
    ]
    if ledger_path:
        pairs.append(("ledger", f"<code>{_e(ledger_path)}</code>"))
    left = kv_table(pairs)

    blockers = [b for b in ledger.get("blockers") or [] if isinstance(b, Mapping)]
    attempts = [a for a in ledger.get("failed_attempts") or [] if isinstance(a, Mapping)]
    right = []
    if blockers:
        items = "".join(
            f"<li><b>{_e(b.get('step'))}</b> [{_e(b.get('class'))}] {_e(b.get('message'))}"
            f"<br><i>fix:</i> {_e(b.get('fix'))}</li>" for b in blockers
        )
        right.append(f'<div class="dsr-box dsr-blockers"><b class="dsr-label">blockers ({len(blockers)})</b>'
                     f"<ul>{items}</ul></div>")
    else:
        right.append('<div class="dsr-box dsr-ok"><b class="dsr-label">blockers</b>none</div>')
    if attempts:
        items = "".join(
            f"<li>{_e(a.get('at'))} <b>{_e(a.get('step'))}</b> [{_e(a.get('category'))}] {_e(a.get('diagnosis'))}</li>"
            for a in attempts
        )
        right.append(f'<div class="dsr-box dsr-warn"><b class="dsr-label">failed attempts ({len(attempts)})</b>'
                     f"<ul>{items}</ul></div>")
    else:
        right.append(f'<div class="dsr-box dsr-ok"><b class="dsr-label">failed attempts</b>none'
                     f"{_torn_down(ledger)}</div>")
    steps = "".join(_step_line(s) for s in ledger.get("steps") or [] if isinstance(s, Mapping))
    right.append(f'<table class="dsr-steps"><tbody>{steps}</tbody></table>')
    return (
        '<div class="deploy-suite-summary">'
        f"{head}"
        f'<div class="dsr-next"><b>next action:</b> {_e(next_action(ledger))}</div>'
        f'<div class="dsr-grid"><div>{left}</div><div>{"".join(right)}</div></div>'
        "</div>"
    )


def _torn_down(ledger: Mapping[str, Any]) -> str:
    at = ledger.get("torn_down_at")
    return f"; torn down at {_e(at)}" if at else ""


# --------------------------------------------------------------------------------------------
# Step evidence
# --------------------------------------------------------------------------------------------


def evidence_html(evidence: Mapping[str, Any], links: Links = Links()) -> str:
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
    cards = []
    for s in ledger.get("steps") or []:
        if not isinstance(s, Mapping):
            continue
        outcome = str(s.get("outcome"))
        colour = _OUTCOME_COLOUR.get(outcome, "#6e7781")
        evidence = s.get("evidence") or {}
        body = value_html(evidence, links) if evidence else _muted("no evidence recorded")
        if s.get("reason"):
            body = f'<div class="dsr-reason"><i>reason:</i> {_e(s.get("reason"))}</div>{body}'
        # Big evidence (nested tables) gets the full width instead of a horizontal scrollbar.
        wide = " dsr-wide" if _has_records(evidence) or len(json.dumps(evidence, default=str)) > 600 else ""
        cards.append(
            f'<div class="dsr-card{wide}" style="border-top-color:{colour}"><div class="dsr-card-head">'
            f'<span style="color:{colour}">{_e(_OUTCOME_MARK.get(outcome, "?"))}</span> <b>{_e(s.get("name"))}</b> '
            f"{_badge(outcome, colour)} {_muted(_seconds(s.get('duration_s')))}</div>{body}</div>"
        )
    if not cards:
        return ""
    return f'<h2>Step evidence</h2><div class="dsr-cards">{"".join(cards)}</div>'


# --------------------------------------------------------------------------------------------
# Capacity: table and picture
# --------------------------------------------------------------------------------------------


def capacity_grid(table: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Nodes x GPU slots from the ledger's ``capacity.table`` rows, like ``CapacityResult.grid()``.

    Slots: holders in order (other pods first, then this DGD's planned pods), one slot per GPU,
    slots beyond the node's total marked ``over``, then ``free`` up to the total.
    """
    out = []
    for row in table:
        total = _int(row.get("total"))
        slots: list[dict[str, Any]] = []
        for h in row.get("holders") or []:
            kind = "planned" if h.get("kind") == "planned" else "other"
            slots.extend({"kind": kind, "holder": h.get("pod")} for _ in range(_int(h.get("gpus"))))
        # A table written without holders still has the counts: draw them anonymously.
        if not row.get("holders"):
            slots = ([{"kind": "other", "holder": None}] * _int(row.get("held"))
                     + [{"kind": "planned", "holder": None}] * _int(row.get("planned")))
        slots = [{"kind": "over", "holder": s["holder"]} if i >= total else s for i, s in enumerate(slots)]
        slots.extend({"kind": "free", "holder": None} for _ in range(max(0, total - len(slots))))
        out.append({"node": row.get("node"), "resource": row.get("resource"), "slots": slots,
                    "cordoned": bool(row.get("cordoned")), "taints": list(row.get("taints") or [])})
    return out


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _node_label(row: Mapping[str, Any]) -> str:
    resource = row.get("resource")
    suffix = f" ({resource})" if resource and resource != DEFAULT_GPU_RESOURCE else ""
    return f"{row.get('node')}{suffix}"


def _unschedulable(row: Mapping[str, Any]) -> str:
    """Why new pods may not land on the node: cordoned, or taints a pod must tolerate."""
    parts = ["cordoned"] if row.get("cordoned") else []
    taints = row.get("taints") or []
    if taints:
        parts.append("tainted " + ", ".join(str(t) for t in taints))
    return "; ".join(parts)


def capacity_svg(table: Sequence[Mapping[str, Any]]) -> str:
    """Inline SVG: one row per node (and GPU resource), one cell per GPU slot, coloured by holder.

    Free slots of a cordoned or tainted node are hatched (a new pod lands there only if it tolerates
    the taint); the node's state is tagged at the end of its row.
    """
    grid = capacity_grid(table)
    if not grid:
        return ""
    char_w = 7.2  # ~12px bold sans-serif; the label column is sized from the longest label
    label_w = int(max(len(_node_label(g)) for g in grid) * char_w) + 24
    max_slots = max([len(g["slots"]) for g in grid] + [8])
    info_x = label_w + max_slots * (_CELL + _GAP) + 12
    info_w = max(len(_row_counts(g)) for g in grid) * 6.3 + 12
    tag_x = int(info_x + info_w)
    tags_w = max(_tags_width(g) for g in grid)
    width = max(tag_x + tags_w + 8, 560)
    height = len(grid) * _ROW_H + 4
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="dsr-capacity-grid" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="GPU slots per node, coloured by holder" '
        'font-family="-apple-system,Segoe UI,Helvetica,Arial,sans-serif" font-size="12">',
        f"<defs>{_HATCH}</defs>",
    ]
    for r, g in enumerate(grid):
        y = 2 + r * _ROW_H
        mid = y + _ROW_H / 2 + 4
        blocked = _unschedulable(g)
        label = _node_label(g)
        out.append(f'<g class="dsr-node" data-node="{_e(g["node"])}" data-resource="{_e(g["resource"])}">')
        if r % 2 == 0:
            out.append(f'<rect x="0" y="{y}" width="{width}" height="{_ROW_H}" fill="#f6f8fa"/>')
        out.append(f'<text x="8" y="{mid}" fill="#1f2328" font-weight="600">{_e(label)}'
                   f"<title>{_e(label + (': ' + blocked if blocked else ''))}</title></text>")
        for i, slot in enumerate(g["slots"]):
            kind = slot["kind"]
            x = label_w + i * (_CELL + _GAP)
            fill = "url(#dsr-hatch)" if kind == "free" and blocked else SLOT_FILL[kind]
            who = slot["holder"]
            tip = f"{g['node']} GPU {i}: " + (
                f"{who} ({SLOT_LABEL[kind]})" if who else SLOT_LABEL[kind] + (f", but {blocked}" if blocked else ""))
            out.append(f'<rect class="dsr-slot dsr-slot-{kind}" x="{x}" y="{y + (_ROW_H - _CELL) / 2}" '
                       f'width="{_CELL}" height="{_CELL}" rx="3" fill="{fill}" stroke="{SLOT_STROKE[kind]}">'
                       f"<title>{_e(tip)}</title></rect>")
        out.append(f'<text x="{info_x}" y="{mid}" fill="#57606a">{_e(_row_counts(g))}</text>')
        x = tag_x
        for text, colour, tip in _tags(g):
            out.append(f'<g class="dsr-state"><title>{_e(tip)}</title>'
                       f'<rect x="{x}" y="{y + 9}" width="10" height="10" rx="2" fill="{colour}"/>'
                       f'<text x="{x + 15}" y="{mid}" fill="{colour}" font-weight="600">{_e(text)}</text></g>')
            x += int(len(text) * 7 + 30)
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


_HATCH = ('<pattern id="dsr-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
          'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff"/>'
          '<line x1="0" y1="0" x2="0" y2="6" stroke="#cf222e" stroke-width="2" stroke-opacity="0.5"/></pattern>')


def _tags(g: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(text, colour, tooltip) of the state tags at the end of a node's row."""
    tags = [("cordoned", "#cf222e", "spec.unschedulable: no new pod lands here")] if g.get("cordoned") else []
    for taint in g.get("taints") or []:
        tags.append((f"taint {taint}", "#9a6700", f"new pods land here only if they tolerate {taint}"))
    return tags


def _tags_width(g: Mapping[str, Any]) -> int:
    return int(sum(len(t) * 7 + 30 for t, _, _ in _tags(g)))


def capacity_legend() -> str:
    """The picture's legend (HTML, so that it wraps on a narrow screen)."""
    def swatch(fill: str, stroke: str, defs: str = "") -> str:
        return (f'<svg width="14" height="14" viewBox="0 0 14 14" aria-hidden="true">{defs}'
                f'<rect x="0.5" y="0.5" width="13" height="13" rx="3" fill="{fill}" stroke="{stroke}"/></svg>')

    items = [swatch(SLOT_FILL[k], SLOT_STROKE[k]) + _e(SLOT_LABEL[k]) for k in ("other", "planned", "free")]
    # Its own pattern id: the legend must not depend on the picture being present.
    hatch = _HATCH.replace("dsr-hatch", "dsr-hatch-legend")
    items.append(swatch("url(#dsr-hatch-legend)", SLOT_STROKE["free"], f"<defs>{hatch}</defs>")
                 + "free on a cordoned / tainted node")
    items.append(swatch(SLOT_FILL["over"], SLOT_STROKE["over"]) + _e(SLOT_LABEL["over"]))
    items.append(swatch("#cf222e", "#cf222e") + "cordoned node")
    items.append(swatch("#9a6700", "#9a6700") + "tainted node (pods need a toleration)")
    return '<div class="dsr-legend">' + "".join(f"<span>{i}</span>" for i in items) + "</div>"


def _row_counts(g: Mapping[str, Any]) -> str:
    counts = Counter(s["kind"] for s in g["slots"])
    return (f"{counts['other']} held \u00b7 {counts['planned']} planned \u00b7 {counts['free']} free"
            + (f" \u00b7 {counts['over']} over" if counts["over"] else ""))


def _holders(row: Mapping[str, Any]) -> str:
    items = []
    for h in row.get("holders") or []:
        colour = SLOT_STROKE["planned"] if h.get("kind") == "planned" else "#57606a"
        items.append(f'<span style="color:{colour}">{_e(h.get("pod"))}&nbsp;\u00d7{_e(h.get("gpus"))}</span>')
    return ", ".join(items) or _muted("none")


def _capacity_section(ledger: Mapping[str, Any], links: Links) -> str:
    cap = _get_map(ledger, "capacity")
    if not cap:
        return "<h2>Capacity</h2>" + _muted("no capacity evidence recorded (step2_validate did not get that far)")
    # CapacityResult.to_dict() names the answer "capacity"; the forbidden-list fallbacks name it "outcome".
    outcome = str(cap.get("capacity") or cap.get("outcome") or "unknown")
    head = [
        ("capacity", _badge(outcome, _CAPACITY_COLOUR.get(outcome, "#6e7781"))),
        ("GPUs requested", _e(cap.get("gpus_requested"))),
        ("exact search", _e(cap.get("exact")) + (_muted(f" ({cap.get('search_steps')} steps)")
                                                 if cap.get("search_steps") else "")),
        ("scheduler simulation", ("placed every pod" if cap.get("simulation_ok") else
                                  "left pods unplaced: " + _e(", ".join(map(str, cap.get("simulation_unplaced")
                                                                             or [])))
                                  ) if "simulation_ok" in cap else _muted("not run")),
    ]
    placement = cap.get("placement")
    if isinstance(placement, Mapping) and placement:
        head.append(("placement (this DGD)", ", ".join(
            f"{_e(p)} \u2192 <code>{_e(n)}</code>" for p, n in placement.items())))
    for key in ("reasons", "warnings"):
        if cap.get(key):
            head.append((key, value_html(cap.get(key), links)))
    shown = ("capacity", "outcome", "gpus_requested", "exact", "search_steps", "simulation_ok",
             "simulation_unplaced", "placement", "reasons", "warnings", "table", "limitations")
    head.extend(_rest(cap, shown, links))
    if cap.get("limitations"):
        head.append(("limitations", value_html(cap.get("limitations"), links)))
    table = [r for r in cap.get("table") or [] if isinstance(r, Mapping)]
    parts = ["<h2>Capacity</h2>", kv_table(head)]
    if table:
        rows = [
            [f"<b>{_e(r.get('node'))}</b>", _e(r.get("resource")), _e(r.get("total")), _e(r.get("held")),
             _e(r.get("free")), f"<b>{_e(r.get('planned'))}</b>" if r.get("planned") else _e(r.get("planned")),
             _e(r.get("free_after")),
             f'<span style="color:#cf222e">{_e(_unschedulable(r))}</span>' if _unschedulable(r) else "schedulable",
             _holders(r)]
            for r in table
        ]
        parts.append('<div class="dsr-svg">' + capacity_svg(table) + "</div>" + capacity_legend())
        parts.append(_table(["node", "resource", "total", "held (other pods)", "free now", "planned (this DGD)",
                             "free after", "state", "holders"], rows, frozenset({2, 3, 4, 5, 6}),
                            cls="dsr-capacity-table"))
        parts.append(_muted("GPU nodes only; a pod on a node holds its full GPU request whatever its container "
                            "state. Planned = the placement the capacity check found for this DGD's pods."))
    else:
        parts.append(_muted("no per-node table recorded"))
    return "".join(parts)


# --------------------------------------------------------------------------------------------
# Readiness, smoke, patches, limitations, commands
# --------------------------------------------------------------------------------------------


def _readiness_section(ledger: Mapping[str, Any], links: Links) -> str:
    rd = _get_map(ledger, "readiness")
    if not rd:
        return ""
    state = str(rd.get("state"))
    colour = "#1a7f37" if state == "ready" else "#cf222e" if state not in ("waiting", "None") else "#9a6700"
    pairs = [
        ("state", _badge(state, colour) + (_muted(f" after {_seconds(rd.get('seconds'))}")
                                           if rd.get("seconds") is not None else "")),
        ("DGD state", _e(rd.get("dgd_state"))),
        ("Ready condition", f"{_e(rd.get('ready_condition'))} {_muted(str(rd.get('ready_reason') or ''))}"),
        ("allocated at", _e(rd.get("allocated_at"))),
    ]
    if rd.get("diagnosis"):
        pairs.append(("diagnosis", value_html(rd.get("diagnosis"), links)))
    if rd.get("evidence"):
        pairs.append(("evidence", value_html(rd.get("evidence"), links)))
    pairs.extend(_rest(rd, ("state", "seconds", "dgd_state", "ready_condition", "ready_reason", "allocated_at",
                            "diagnosis", "evidence", "components", "contention"), links))
    parts = ["<h2>Readiness</h2>", kv_table(pairs)]
    comps = rd.get("components")
    if isinstance(comps, Mapping) and comps:
        rows = []
        for name, raw in comps.items():
            c: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
            ok = c.get("ready") == c.get("expected")
            ratio = f"{_e(c.get('ready'))}/{_e(c.get('expected'))}"
            rows.append([f"<b>{_e(name)}</b>", f'<span style="color:{"#1a7f37" if ok else "#cf222e"}">{ratio}</span>',
                         value_html(c.get("pods"), links), value_html(c.get("nodes"), links)])
        parts.append(_table(["component", "ready", "pods", "nodes"], rows, frozenset({1})))
    contention = rd.get("contention")
    parts.append("<h3>Contention</h3>" + (value_html(contention, links) if contention
                                           else _muted("none: no pod waited for GPUs held by others")))
    return "".join(parts)


def _smoke_section(ledger: Mapping[str, Any], links: Links) -> str:
    sm = _get_map(ledger, "smoke")
    if not sm:
        return ""
    ok = bool(sm.get("success"))
    pairs = [
        ("result", _badge("passed" if ok else "failed", "#1a7f37" if ok else "#cf222e")),
        ("HTTP codes", f"<code>/v1/models</code> {_e(sm.get('models_http_code'))}, "
                       f"<code>/v1/chat/completions</code> {_e(sm.get('api_http_code'))}"),
        ("gate", _e(sm.get("gate")) if sm.get("gate") else _muted("no gate failed" if ok else "none recorded")),
    ]
    if sm.get("diagnosis"):
        pairs.append(("diagnosis", value_html(sm.get("diagnosis"), links)))
    timings = sm.get("timings")
    if isinstance(timings, Mapping) and timings:
        pairs.append(("timings", ", ".join(f"{_e(k.removesuffix('_s'))} {_e(_seconds(v))}"
                                           for k, v in timings.items())))
    if sm.get("artifact"):
        pairs.append(("artifact", links.path(sm.get("artifact"))))
    bodies = _get_list(sm, "bodies")
    if bodies:
        pairs.append(("response bodies", "<br>".join(links.path(b) for b in bodies)))
    pairs.extend(_rest(sm, ("success", "models_http_code", "api_http_code", "gate", "diagnosis", "timings",
                            "artifact", "bodies"), links))
    return "<h2>Smoke</h2>" + kv_table(pairs)


def _patches_section(ledger: Mapping[str, Any], links: Links) -> str:
    patches = [p for p in ledger.get("patches") or [] if isinstance(p, Mapping)]
    if not patches:
        return "<h2>Patches</h2>" + _muted("none: the run-scoped copies are the handed-off files")
    rows = [[links.path(p.get("file")), _e(p.get("change")), _e(p.get("reason")), _muted(str(p.get("at")))]
            for p in patches]
    return f"<h2>Patches ({len(patches)})</h2>" + _table(["file", "change", "reason", "at"], rows)


def _list_section(title: str, items: Sequence[Any], links: Links, empty: str) -> str:
    if not items:
        return f"<h2>{_e(title)}</h2>" + _muted(empty)
    return f"<h2>{_e(title)} ({len(items)})</h2>" + "<ul>" + "".join(
        f"<li>{value_html(i, links, 1)}</li>" for i in items) + "</ul>"


def _commands_section(ledger: Mapping[str, Any]) -> str:
    commands = [c for c in ledger.get("commands") or [] if isinstance(c, Mapping)]
    kinds = Counter(str(c.get("kind")) for c in commands)
    counted = ", ".join(f"{n} {k}" for k, n in kinds.most_common())
    rows = [[_e(i), _e(c.get("kind")), _e(c.get("outcome")), _muted(str(c.get("at"))),
             f"<code>{_e(c.get('command'))}</code>"] for i, c in enumerate(commands, 1)]
    body = _table(["#", "kind", "outcome", "at", "command"], rows, frozenset({0})) if rows else _muted("none")
    return (f"<h2>Commands</h2><details><summary>{len(commands)} Kubernetes request(s)"
            f"{' (' + _e(counted) + ')' if counted else ''}, kubectl-equivalent</summary>{body}</details>")


def _cleanup_section(ledger: Mapping[str, Any]) -> str:
    cmds = [str(c) for c in ledger.get("cleanup_commands") or []]
    body = f"<pre>{_e(chr(10).join(cmds))}</pre>" if cmds else _muted("none recorded")
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
        parts.append(f"<details><summary>{_e(key.replace('_', ' '))}{count}</summary>"
                     f"{value_html(value, links)}</details>")
    return "<h2>More ledger detail</h2>" + "".join(parts) if parts else ""


def report_html(ledger: Mapping[str, Any], ledger_path: str | None = None, links: Links = Links()) -> str:
    """Everything a reviewer needs, as one self-contained block (its own scoped CSS)."""
    diagnostics = _get_list(ledger, "diagnostics")
    limitations = _get_list(ledger, "limitations")
    sections = [
        summary_html(ledger, ledger_path, links),
        _steps_section(ledger, links),
        _capacity_section(ledger, links),
        _readiness_section(ledger, links),
        _smoke_section(ledger, links),
        _patches_section(ledger, links),
        _list_section("Limitations", limitations, links, "none recorded"),
        _list_section("Diagnostics", diagnostics, links, "none") if diagnostics else "",
        _commands_section(ledger),
        _cleanup_section(ledger),
        _more_section(ledger, links),
    ]
    return f'<div class="dsr"><style>{_CSS}</style>{"".join(sections)}</div>'


def render(ledger: Mapping[str, Any], ledger_path: str | None = None, links: Links = Links()) -> str:
    """A standalone HTML page for one ledger (no external resources, no script)."""
    title = f"{ledger.get('deploy_id')} - dynamo-deploy-suite"
    return (
        f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{_e(title)}</title>"
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
    parser.add_argument("ledger", type=Path, help="a deployment_ledger.json")
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
