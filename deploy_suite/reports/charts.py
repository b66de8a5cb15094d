"""The experiment page's two inline SVG charts: budgets used against their grants, and the timeline.

Pure functions of values read from the ledgers; no script, every string escaped. The timeline is a
Gantt on one time axis: a lane per iteration holding its steps (started_at + duration_s) and,
below them, the intervals its DGD held GPUs (``allocations``, docs/procedure.md, "Resume"; an open one ends at
``torn_down_at``, else it is drawn up to the experiment's last ledger write as still held). Where a
later iteration retired a lane's DGD (step 3 wrote ``torn_down_at``) a marker names who retired it.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass

from deploy_suite.reports.values import esc

STEP_COLOURS = {"step1_inputs": "#8c959f", "step2_validate": "#0969da", "step3_retire_previous": "#cf222e",
                "step4_support_manifests": "#bf8700", "step5_apply": "#8250df", "step6_readiness": "#1a7f37",
                "step7_smoke": "#1b7c83"}
ALLOCATION_COLOUR = "#fb8f44"
HOLD_COLOUR = "#d4a72c"
_WIDTH, _LABEL, _LANE, _TOP = 1080, 150, 26, 28


@dataclass(frozen=True)
class Span:
    start: _dt.datetime
    end: _dt.datetime
    label: str
    colour: str
    failed: bool = False


@dataclass(frozen=True)
class Lane:
    """One iteration on the timeline."""

    name: str
    steps: tuple[Span, ...]
    allocations: tuple[Span, ...]
    retired_at: _dt.datetime | None = None
    retired_by: str | None = None
    # Step 6's hold decisions: pods waiting for GPUs others hold (docs/procedure.md, step 6: contention).
    holds: tuple[_dt.datetime, ...] = ()


@dataclass(frozen=True)
class Bar:
    """One budget: used of the grant (None: ungated)."""

    label: str
    used: float
    limit: float | None
    unit: str


def budget_svg(bars: Sequence[Bar]) -> str:
    """Horizontal bars, one per budget: the share of the grant used; red once spent."""
    width, label_w, bar_w, row = 640, 150, 330, 26
    parts = []
    for i, b in enumerate(bars):
        y = 8 + i * row
        parts.append(f'<text x="0" y="{y + 13}" font-size="12">{esc(b.label)}</text>'
                     f'<rect x="{label_w}" y="{y}" width="{bar_w}" height="16" fill="#eaeef2" rx="3"/>')
        if b.limit is None:
            text = f"{b.used:g} {b.unit} used, ungated"
        else:
            share = min(1.0, b.used / b.limit) if b.limit > 0 else 1.0
            spent = b.used >= b.limit
            parts.append(f'<rect class="dsr-budget-used" x="{label_w}" y="{y}" width="{bar_w * share:.1f}" '
                         f'height="16" fill="{"#cf222e" if spent else "#1a7f37"}" rx="3"/>')
            text = f"{b.used:g} of {b.limit:g} {b.unit}" + (" (spent)" if spent else "")
        parts.append(f'<text x="{label_w + bar_w + 8}" y="{y + 13}" font-size="12">{esc(text)}</text>')
    height = 8 + len(bars) * row
    return (f'<svg class="dsr-budgets" role="img" aria-label="budgets used against their grants" '
            f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">{"".join(parts)}</svg>')


def _ticks(start: _dt.datetime, end: _dt.datetime, count: int = 6) -> list[_dt.datetime]:
    span = (end - start).total_seconds()
    return [start + _dt.timedelta(seconds=span * i / (count - 1)) for i in range(count)]


def _fmt(at: _dt.datetime, long: bool) -> str:
    return at.strftime("%m-%d %H:%M" if long else "%H:%M:%S")


def timeline_svg(lanes: Sequence[Lane]) -> str:
    """The Gantt of every lane's steps and GPU allocations on one axis (empty text without times)."""
    times = [t for lane in lanes for s in (*lane.steps, *lane.allocations) for t in (s.start, s.end)]
    times.extend(lane.retired_at for lane in lanes if lane.retired_at is not None)
    times.extend(at for lane in lanes for at in lane.holds)
    if not times:
        return ""
    start, end = min(times), max(times)
    total = max((end - start).total_seconds(), 1.0)
    plot = _WIDTH - _LABEL - 10

    def x(at: _dt.datetime) -> float:
        return _LABEL + plot * (at - start).total_seconds() / total

    def rect(s: Span, y: float, h: float, css: str) -> str:
        x0 = x(s.start)
        w = max(2.0, x(s.end) - x0)
        stroke = ' stroke="#82071e" stroke-width="2"' if s.failed else ""
        took = (s.end - s.start).total_seconds()
        return (f'<rect class="{css}" x="{x0:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h}" fill="{s.colour}"'
                f'{stroke}><title>{esc(f"{s.label}: {took:.2f} s from {s.start.isoformat()}")}</title></rect>')

    long = total > 86400
    parts = []
    ticks = _ticks(start, end)
    for n, tick in enumerate(ticks):
        tx = x(tick)
        anchor = "start" if n == 0 else "end" if n == len(ticks) - 1 else "middle"  # the ends stay inside
        parts.append(f'<line x1="{tx:.1f}" y1="{_TOP - 4}" x2="{tx:.1f}" y2="{_TOP + len(lanes) * _LANE}" '
                     f'stroke="#d0d7de"/><text x="{tx:.1f}" y="{_TOP - 8}" font-size="10" text-anchor="{anchor}">'
                     f"{esc(_fmt(tick, long))}</text>")
    for i, lane in enumerate(lanes):
        y = _TOP + i * _LANE
        parts.append(f'<g class="dsr-lane" data-lane="{esc(lane.name)}">'
                     f'<text x="0" y="{y + 15}" font-size="11">{esc(lane.name)}</text>')
        parts.extend(rect(s, y + 3, 10, "dsr-step") for s in lane.steps)
        parts.extend(rect(s, y + 15, 7, "dsr-alloc") for s in lane.allocations)
        for at in lane.holds:
            hx = x(at)
            parts.append(f'<path class="dsr-hold" d="M{hx - 4:.1f} {y + 1} L{hx + 4:.1f} {y + 1} L{hx:.1f} {y + 8} Z" '
                         f'fill="{HOLD_COLOUR}"><title>{esc(f"{lane.name} waiting for capacity at {at.isoformat()}")}'
                         "</title></path>")
        if lane.retired_at is not None:
            rx = x(lane.retired_at)
            who = f"retired by {lane.retired_by}" if lane.retired_by else "torn down"
            # Near the right edge the label goes left of the mark, so it is never cut off.
            tx, anchor = (rx - 3, "end") if rx > _WIDTH - 110 else (rx + 3, "start")
            parts.append(f'<g class="dsr-retire"><line x1="{rx:.1f}" y1="{y + 1}" x2="{rx:.1f}" y2="{y + 24}" '
                         f'stroke="#cf222e" stroke-width="2"/><text x="{tx:.1f}" y="{y + 24}" font-size="9" '
                         f'text-anchor="{anchor}" fill="#cf222e">{esc(who)}</text>'
                         f"<title>{esc(who)} at {esc(lane.retired_at.isoformat())}</title></g>")
        parts.append("</g>")
    height = _TOP + len(lanes) * _LANE + 6
    return (f'<svg class="dsr-timeline" role="img" aria-label="timeline of every iteration\'s steps and GPU '
            f'allocations" xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
            f'viewBox="0 0 {_WIDTH} {height}">{"".join(parts)}</svg>')


# What each step's time is spent on, for the legend (docs/procedure.md, the steps table).
_MEANING = {"step2_validate": "checks, capacity", "step3_retire_previous": "retire the previous DGD",
            "step4_support_manifests": "model cache, download", "step5_apply": "apply",
            "step6_readiness": "waiting for capacity, loading", "step7_smoke": "smoke"}


def legend_html() -> str:
    """The timeline's colours, as HTML beside it (readable when printed in black and white too)."""
    items = [*((f"{name} ({_MEANING[name]})" if name in _MEANING else name, colour)
               for name, colour in STEP_COLOURS.items()), ("GPUs held (allocation interval)", ALLOCATION_COLOUR),
             ("waiting for capacity (a hold decision)", HOLD_COLOUR)]
    return '<div class="dsr-legend">' + "".join(
        f'<span><svg width="12" height="10"><rect width="12" height="10" fill="{colour}"/></svg>{esc(name)}</span>'
        for name, colour in items) + "</div>"

