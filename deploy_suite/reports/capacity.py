"""The capacity section of the report: the per-node table and an inline SVG picture of GPU slots.

Drawn from the ledger's ``capacity`` section alone (``CapacityResult.to_dict()``), so an old ledger
renders the same; one row per node (and GPU resource), one cell per GPU slot, coloured by holder.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from deploy_suite.constants import GPU_RESOURCE
from deploy_suite.reports.values import Links, badge, esc, get_map, html_table, kv_table, muted, rest, value_html

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
        out.append(f'<g class="dsr-node" data-node="{esc(g["node"])}" data-resource="{esc(g["resource"])}">')
        if r % 2 == 0:
            out.append(f'<rect x="0" y="{y}" width="{width}" height="{_ROW_H}" fill="#f6f8fa"/>')
        out.append(f'<text x="8" y="{mid}" fill="#1f2328" font-weight="600">{esc(label)}'
                   f"<title>{esc(label + (': ' + blocked if blocked else ''))}</title></text>")
        for i, slot in enumerate(g["slots"]):
            kind = slot["kind"]
            x = label_w + i * (_CELL + _GAP)
            fill = "url(#dsr-hatch)" if kind == "free" and blocked else SLOT_FILL[kind]
            who = slot["holder"]
            tip = f"{g['node']} GPU {i}: " + (
                f"{who} ({SLOT_LABEL[kind]})" if who else SLOT_LABEL[kind] + (f", but {blocked}" if blocked else ""))
            out.append(f'<rect class="dsr-slot dsr-slot-{kind}" x="{x}" y="{y + (_ROW_H - _CELL) / 2}" '
                       f'width="{_CELL}" height="{_CELL}" rx="3" fill="{fill}" stroke="{SLOT_STROKE[kind]}">'
                       f"<title>{esc(tip)}</title></rect>")
        out.append(f'<text x="{info_x}" y="{mid}" fill="#57606a">{esc(_row_counts(g))}</text>')
        x = tag_x
        for text, colour, tip in _tags(g):
            out.append(f'<g class="dsr-state"><title>{esc(tip)}</title>'
                       f'<rect x="{x}" y="{y + 9}" width="10" height="10" rx="2" fill="{colour}"/>'
                       f'<text x="{x + 15}" y="{mid}" fill="{colour}" font-weight="600">{esc(text)}</text></g>')
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

    items = [swatch(SLOT_FILL[k], SLOT_STROKE[k]) + esc(SLOT_LABEL[k]) for k in ("other", "planned", "free")]
    # Its own pattern id: the legend must not depend on the picture being present.
    hatch = _HATCH.replace("dsr-hatch", "dsr-hatch-legend")
    items.append(swatch("url(#dsr-hatch-legend)", SLOT_STROKE["free"], f"<defs>{hatch}</defs>")
                 + "free on a cordoned / tainted node")
    items.append(swatch(SLOT_FILL["over"], SLOT_STROKE["over"]) + esc(SLOT_LABEL["over"]))
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
        items.append(f'<span style="color:{colour}">{esc(h.get("pod"))}&nbsp;\u00d7{esc(h.get("gpus"))}</span>')
    return ", ".join(items) or muted("none")


def capacity_section(ledger: Mapping[str, Any], links: Links) -> str:
    cap = get_map(ledger, "capacity")
    if not cap:
        return "<h2>Capacity</h2>" + muted("no capacity evidence recorded (step2_validate did not get that far)")
    # CapacityResult.to_dict() names the answer "capacity"; the forbidden-list fallbacks name it "outcome".
    outcome = str(cap.get("capacity") or cap.get("outcome") or "unknown")
    head = [
        ("capacity", badge(outcome, _CAPACITY_COLOUR.get(outcome, "#6e7781"))),
        ("GPUs requested", esc(cap.get("gpus_requested"))),
        ("exact search", esc(cap.get("exact")) + (muted(f" ({cap.get('search_steps')} steps)")
                                                 if cap.get("search_steps") else "")),
        ("scheduler simulation", ("placed every pod" if cap.get("simulation_ok") else
                                  "left pods unplaced: " + esc(", ".join(map(str, cap.get("simulation_unplaced")
                                                                             or [])))
                                  ) if "simulation_ok" in cap else muted("not run")),
    ]
    placement = cap.get("placement")
    if isinstance(placement, Mapping) and placement:
        head.append(("placement (this DGD)", ", ".join(
            f"{esc(p)} \u2192 <code>{esc(n)}</code>" for p, n in placement.items())))
    for key in ("reasons", "warnings"):
        if cap.get(key):
            head.append((key, value_html(cap.get(key), links)))
    shown = ("capacity", "outcome", "gpus_requested", "exact", "search_steps", "simulation_ok",
             "simulation_unplaced", "placement", "reasons", "warnings", "table", "limitations")
    head.extend(rest(cap, shown, links))
    if cap.get("limitations"):
        head.append(("limitations", value_html(cap.get("limitations"), links)))
    table = [r for r in cap.get("table") or [] if isinstance(r, Mapping)]
    parts = ["<h2>Capacity</h2>", kv_table(head)]
    if table:
        rows = [
            [f"<b>{esc(r.get('node'))}</b>", esc(r.get("resource")), esc(r.get("total")), esc(r.get("held")),
             esc(r.get("free")), f"<b>{esc(r.get('planned'))}</b>" if r.get("planned") else esc(r.get("planned")),
             esc(r.get("free_after")),
             f'<span style="color:#cf222e">{esc(_unschedulable(r))}</span>' if _unschedulable(r) else "schedulable",
             _holders(r)]
            for r in table
        ]
        parts.append('<div class="dsr-svg">' + capacity_svg(table) + "</div>" + capacity_legend())
        parts.append(html_table(["node", "resource", "total", "held (other pods)", "free now", "planned (this DGD)",
                             "free after", "state", "holders"], rows, frozenset({2, 3, 4, 5, 6}),
                            cls="dsr-capacity-table"))
        parts.append(muted("GPU nodes only; a pod on a node holds its full GPU request whatever its container "
                            "state. Planned = the placement the capacity check found for this DGD's pods."))
    else:
        parts.append(muted("no per-node table recorded"))
    return "".join(parts)
