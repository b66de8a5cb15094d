"""The experiment page's two inline SVG charts: budgets used against their grants, and the timeline.

Their view models (every coordinate, colour and tooltip), pure functions of values read from the
ledgers; their markup is ``templates/charts.html.j2`` (no script, every string escaped). The timeline is a
Gantt on one time axis: a lane per iteration holding its steps (started_at + duration_s) and,
below them, the intervals its DGD held GPUs (``allocations``, docs/procedure.md, "Resume"; an open one ends at
``torn_down_at``, else it is drawn up to the experiment's last ledger write as still held). Where a
later iteration retired a lane's DGD (step 3 wrote ``torn_down_at``) a marker names who retired it.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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


def budget_chart(bars: Sequence[Bar]) -> dict[str, Any]:
    """The view model of the budgets' chart (templates/charts.html.j2, ``budgets``): horizontal bars,
    one per budget, the share of the grant used; red once spent."""
    width, label_w, bar_w, row = 640, 150, 330, 26
    shown = []
    for i, b in enumerate(bars):
        y = 8 + i * row
        bar: dict[str, Any] = {"label": b.label, "x": label_w, "y": y, "w": bar_w, "text_y": y + 13,
                               "value_x": label_w + bar_w + 8, "used_w": None}
        if b.limit is None:
            bar["text"] = f"{b.used:g} {b.unit} used, ungated"
        else:
            share = min(1.0, b.used / b.limit) if b.limit > 0 else 1.0
            spent = b.used >= b.limit
            bar.update(used_w=f"{bar_w * share:.1f}", fill="#cf222e" if spent else "#1a7f37",
                       text=f"{b.used:g} of {b.limit:g} {b.unit}" + (" (spent)" if spent else ""))
        shown.append(bar)
    return {"width": width, "height": 8 + len(bars) * row, "bars": shown}


def _ticks(start: _dt.datetime, end: _dt.datetime, count: int = 6) -> list[_dt.datetime]:
    span = (end - start).total_seconds()
    return [start + _dt.timedelta(seconds=span * i / (count - 1)) for i in range(count)]


def _fmt(at: _dt.datetime, long: bool) -> str:
    return at.strftime("%m-%d %H:%M" if long else "%H:%M:%S")


def timeline_chart(lanes: Sequence[Lane]) -> dict[str, Any] | None:
    """The view model of the timeline (templates/charts.html.j2, ``timeline``): the Gantt of every
    lane's steps and GPU allocations on one axis (None without times)."""
    times = [t for lane in lanes for s in (*lane.steps, *lane.allocations) for t in (s.start, s.end)]
    times.extend(lane.retired_at for lane in lanes if lane.retired_at is not None)
    times.extend(at for lane in lanes for at in lane.holds)
    if not times:
        return None
    start, end = min(times), max(times)
    total = max((end - start).total_seconds(), 1.0)
    plot = _WIDTH - _LABEL - 10

    def x(at: _dt.datetime) -> float:
        return _LABEL + plot * (at - start).total_seconds() / total

    def rect(s: Span, y: float, h: float, css: str) -> dict[str, Any]:
        x0 = x(s.start)
        took = (s.end - s.start).total_seconds()
        return {"css": css, "x": f"{x0:.1f}", "y": f"{y:.1f}", "w": f"{max(2.0, x(s.end) - x0):.1f}", "h": h,
                "colour": s.colour, "failed": s.failed, "title": f"{s.label}: {took:.2f} s from {s.start.isoformat()}"}

    long = total > 86400
    ticks = _ticks(start, end)
    shown_ticks = [{"x": f"{x(tick):.1f}", "y1": _TOP - 4, "y2": _TOP + len(lanes) * _LANE, "text_y": _TOP - 8,
                    # the ends stay inside
                    "anchor": "start" if n == 0 else "end" if n == len(ticks) - 1 else "middle",
                    "text": _fmt(tick, long)} for n, tick in enumerate(ticks)]
    shown = []
    for i, lane in enumerate(lanes):
        y = _TOP + i * _LANE
        holds = [{"d": f"M{x(at) - 4:.1f} {y + 1} L{x(at) + 4:.1f} {y + 1} L{x(at):.1f} {y + 8} Z",
                  "colour": HOLD_COLOUR, "title": f"{lane.name} waiting for capacity at {at.isoformat()}"}
                 for at in lane.holds]
        retired = None
        if lane.retired_at is not None:
            rx = x(lane.retired_at)
            # Near the right edge the label goes left of the mark, so it is never cut off.
            tx, anchor = (rx - 3, "end") if rx > _WIDTH - 110 else (rx + 3, "start")
            retired = {"x": f"{rx:.1f}", "y1": y + 1, "y2": y + 24, "text_x": f"{tx:.1f}", "anchor": anchor,
                       "who": f"retired by {lane.retired_by}" if lane.retired_by else "torn down",
                       "at": lane.retired_at.isoformat()}
        shown.append({"name": lane.name, "text_y": y + 15, "holds": holds, "retired": retired,
                      "spans": [*(rect(s, y + 3, 10, "dsr-step") for s in lane.steps),
                                *(rect(s, y + 15, 7, "dsr-alloc") for s in lane.allocations)]})
    return {"width": _WIDTH, "height": _TOP + len(lanes) * _LANE + 6, "ticks": shown_ticks, "lanes": shown}


# What each step's time is spent on, for the legend (docs/procedure.md, the steps table).
_MEANING = {"step2_validate": "checks, capacity", "step3_retire_previous": "retire the previous DGD",
            "step4_support_manifests": "model cache, download", "step5_apply": "apply",
            "step6_readiness": "waiting for capacity, loading", "step7_smoke": "smoke"}


def legend() -> list[tuple[str, str]]:
    """The timeline's colours (name, colour), shown beside it (readable when printed in black and white too)."""
    items = [*((f"{name} ({_MEANING[name]})" if name in _MEANING else name, colour)
               for name, colour in STEP_COLOURS.items()), ("GPUs held (allocation interval)", ALLOCATION_COLOUR),
             ("waiting for capacity (a hold decision)", HOLD_COLOUR)]
    return items
