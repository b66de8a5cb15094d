"""The capacity section of the report: the per-node table and an inline SVG picture of GPU slots.

Drawn from the ledger's ``capacity`` section alone (``CapacityResult.to_dict()``), so an old ledger
renders the same; one row per node (and GPU resource), one cell per GPU slot, coloured by holder.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from deploy_suite.constants import GPU_RESOURCE
from deploy_suite.reports.values import Links, get_map, rest, value_node

_CAPACITY_COLOUR = {"sufficient": "#1a7f37", "insufficient": "#cf222e", "unknown": "#9a6700"}

# GPU slot picture: one colour per holder kind (capacity.CapacityResult.grid() kinds).
SLOT_FILL = {"other": "#8c959f", "planned": "#0969da", "free": "#dafbe1", "over": "#cf222e"}
SLOT_STROKE = {"other": "#6e7781", "planned": "#0550ae", "free": "#4ac26b", "over": "#a40e26"}
SLOT_LABEL = {"other": "held by other pods", "planned": "this DGD (planned)", "free": "free",
              "over": "over-committed"}
_CELL, _GAP, _ROW_H = 20, 4, 28


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
    suffix = f" ({resource})" if resource and resource != GPU_RESOURCE else ""
    return f"{row.get('node')}{suffix}"


def _unschedulable(row: Mapping[str, Any]) -> str:
    """Why new pods may not land on the node: cordoned, or taints a pod must tolerate."""
    parts = ["cordoned"] if row.get("cordoned") else []
    taints = row.get("taints") or []
    if taints:
        parts.append("tainted " + ", ".join(str(t) for t in taints))
    return "; ".join(parts)


def capacity_picture(table: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The view model of the inline SVG: one row per node (and GPU resource), one cell per GPU slot,
    coloured by holder (None: no row to draw).

    Free slots of a cordoned or tainted node are hatched (a new pod lands there only if it tolerates
    the taint); the node's state is tagged at the end of its row.
    """
    grid = capacity_grid(table)
    if not grid:
        return None
    char_w = 7.2  # ~12px bold sans-serif; the label column is sized from the longest label
    label_w = int(max(len(_node_label(g)) for g in grid) * char_w) + 24
    max_slots = max([len(g["slots"]) for g in grid] + [8])
    info_x = label_w + max_slots * (_CELL + _GAP) + 12
    info_w = max(len(_row_counts(g)) for g in grid) * 6.3 + 12
    tag_x = int(info_x + info_w)
    tags_w = max(_tags_width(g) for g in grid)
    width = max(tag_x + tags_w + 8, 560)
    rows = []
    for r, g in enumerate(grid):
        y = 2 + r * _ROW_H
        blocked = _unschedulable(g)
        label = _node_label(g)
        slots = []
        for i, slot in enumerate(g["slots"]):
            kind, who = slot["kind"], slot["holder"]
            tip = f"{g['node']} GPU {i}: " + (
                f"{who} ({SLOT_LABEL[kind]})" if who else SLOT_LABEL[kind] + (f", but {blocked}" if blocked else ""))
            slots.append({"kind": kind, "x": label_w + i * (_CELL + _GAP), "tip": tip, "stroke": SLOT_STROKE[kind],
                          "fill": "url(#dsr-hatch)" if kind == "free" and blocked else SLOT_FILL[kind]})
        tags, x = [], tag_x
        for text, colour, tip in _tags(g):
            tags.append({"text": text, "colour": colour, "tip": tip, "x": x})
            x += int(len(text) * 7 + 30)
        rows.append({"node": g["node"], "resource": g["resource"], "shaded": r % 2 == 0, "y": y,
                     "mid": y + _ROW_H / 2 + 4, "slot_y": y + (_ROW_H - _CELL) / 2, "label": label,
                     "title": label + (": " + blocked if blocked else ""), "slots": slots,
                     "counts": _row_counts(g), "tags": tags})
    return {"width": width, "height": len(grid) * _ROW_H + 4, "row_h": _ROW_H, "cell": _CELL, "info_x": info_x,
            "rows": rows}


def _tags(g: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(text, colour, tooltip) of the state tags at the end of a node's row."""
    tags = [("cordoned", "#cf222e", "spec.unschedulable: no new pod lands here")] if g.get("cordoned") else []
    for taint in g.get("taints") or []:
        tags.append((f"taint {taint}", "#9a6700", f"new pods land here only if they tolerate {taint}"))
    return tags


def _tags_width(g: Mapping[str, Any]) -> int:
    return int(sum(len(t) * 7 + 30 for t, _, _ in _tags(g)))


def _row_counts(g: Mapping[str, Any]) -> str:
    counts = Counter(s["kind"] for s in g["slots"])
    return (f"{counts['other']} held \u00b7 {counts['planned']} planned \u00b7 {counts['free']} free"
            + (f" \u00b7 {counts['over']} over" if counts["over"] else ""))


def _row(r: Mapping[str, Any]) -> dict[str, Any]:
    """One node's row of the table; its holders coloured like the picture's slots."""
    return {**{k: r.get(k) for k in ("node", "resource", "total", "held", "free", "planned", "free_after")},
            "state": _unschedulable(r),
            "holders": [{"pod": h.get("pod"), "gpus": h.get("gpus"),
                         "colour": SLOT_STROKE["planned"] if h.get("kind") == "planned" else "#57606a"}
                        for h in r.get("holders") or []]}


def capacity_view(ledger: Mapping[str, Any], links: Links) -> dict[str, Any] | None:
    """The view model of the capacity section (None: no capacity evidence in the ledger)."""
    cap = get_map(ledger, "capacity")
    if not cap:
        return None
    # CapacityResult.to_dict() names the answer "capacity"; the forbidden-list fallbacks name it "outcome".
    outcome = str(cap.get("capacity") or cap.get("outcome") or "unknown")
    placement = cap.get("placement")
    shown = ("capacity", "outcome", "gpus_requested", "exact", "search_steps", "simulation_ok",
             "simulation_unplaced", "placement", "reasons", "warnings", "table", "limitations")
    table = [r for r in cap.get("table") or [] if isinstance(r, Mapping)]
    return {
        "outcome": outcome, "colour": _CAPACITY_COLOUR.get(outcome, "#6e7781"), "gpus": cap.get("gpus_requested"),
        "exact": cap.get("exact"), "steps": f" ({cap.get('search_steps')} steps)" if cap.get("search_steps") else None,
        "simulation": None if "simulation_ok" not in cap else "placed every pod" if cap.get("simulation_ok")
        else "left pods unplaced: " + ", ".join(map(str, cap.get("simulation_unplaced") or [])),
        "placement": list(placement.items()) if isinstance(placement, Mapping) and placement else [],
        "listed": [(key, value_node(cap.get(key), links)) for key in ("reasons", "warnings") if cap.get(key)],
        "rest": rest(cap, shown, links),
        "limitations": value_node(cap.get("limitations"), links) if cap.get("limitations") else None,
        "picture": capacity_picture(table), "rows": [_row(r) for r in table],
        "slots": {"fill": SLOT_FILL, "stroke": SLOT_STROKE, "label": SLOT_LABEL},
    }
