"""The reviewer's page of a whole experiment: every iteration, what changed, what it cost, where the time went.

``deploy-suite report EXP_ROOT`` and the end of every ``pytest --iter=N`` run write it (default
``<EXP_ROOT>/artifacts/experiment.html``). It is built only from files of the experiment tree: the
ledgers (``artifacts/deploy-iter-NNN/deployment_ledger.json``), their run-scoped copies
(``applied_manifests/deploy.yaml``), ``user_workload.yaml`` (budgets, ``resources.pinned``) and
``manifest.yaml`` (the session start), never the cluster, so it renders an archived experiment the
same way. Budgets and live GPU-hours are counted as of the experiment's last ledger write.

In order: one line with the experiment's blockers and next action; the budgets chart; one row per
iteration; what changed for each iteration > 0 (``deploy_suite.reports.dgd_diff``); the timeline
(``deploy_suite.reports.charts``). Self-contained (inline CSS and SVG, no script), every ledger
string escaped, an old ledger without the newer fields rendered with what it has. Here: the view
model of each part; the markup is ``templates/experiment_page.html.j2``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy_suite import clock
from deploy_suite.errors import InputError
from deploy_suite.model import workload
from deploy_suite.model.dgd import Dgd, load_dgd
from deploy_suite.record import budget, experiment, resume
from deploy_suite.record.ledger import atomic_write_text
from deploy_suite.reports import dgd_diff, markup
from deploy_suite.reports import iteration as iteration_report
from deploy_suite.reports.charts import (
    ALLOCATION_COLOUR,
    STEP_COLOURS,
    Bar,
    Lane,
    Span,
    budget_chart,
    legend,
    timeline_chart,
)
from deploy_suite.reports.values import Lines, Link, Links, Muted, Node, get_list, get_map, seconds
from deploy_suite.vocab import BlockerClass, RunStatus, StepOutcome
from deploy_suite.yamlio import load_one

PAGE = "experiment.html"


@dataclass(frozen=True)
class Iteration:
    """One deployment directory's ledger as read from disk."""

    path: Path
    data: Mapping[str, Any]

    @property
    def deploy_id(self) -> str:
        return str(self.data.get("deploy_id") or self.path.parent.name)

    @property
    def number(self) -> int:
        value = self.data.get("iteration")
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        digits = self.path.parent.name.rsplit("-", 1)[-1]
        return int(digits) if digits.isdigit() else -1


@dataclass(frozen=True)
class Experiment:
    root: Path
    exp_id: str
    iterations: tuple[Iteration, ...]
    pinned: tuple[str, ...]
    state: budget.BudgetState | None
    as_of: str | None


def iteration_page(ledger_path: Path) -> Path:
    """Where a run keeps its iteration page beside the ledger (``deploy-iter-NNN.html``)."""
    return ledger_path.parent / f"{ledger_path.parent.name}.html"


def _inside(root: Path, rel: object) -> Path | None:
    """An EXP_ROOT-relative path of a ledger as a file of this tree; None for anything that could
    lead out of it (absolute, ``..``): a ledger is data, not a pointer to follow anywhere."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or ".." in rel.split("/"):
        return None
    return root / rel


def _workload(root: Path, iterations: Sequence[Iteration]) -> Mapping[str, Any]:
    found = (_inside(root, get_map(it.data, "user_workload").get("path")) for it in reversed(iterations))
    path = next((p for p in found if p is not None), root / "user_workload.yaml")
    try:
        data = load_one(path, "user_workload.yaml")
    except (InputError, OSError):
        return {}
    return data if isinstance(data, Mapping) else {}


def load(exp_root: Path) -> Experiment:
    """Everything the page shows, from the experiment tree alone."""
    root = exp_root.resolve()
    documents = experiment.ledger_documents(root)
    iterations = tuple(sorted((Iteration(p, d) for p, d in documents), key=lambda i: i.number))
    work = _workload(root, iterations)
    pinned = workload.lookup(work, "resources.pinned")
    budgets = workload.lookup(work, "budgets")
    stamps = [clock.parse_iso(i.data.get("updated_at")) for i in iterations]
    known = [s for s in stamps if s is not None]
    as_of = max(known) if known else None
    state = None
    if as_of is not None:
        try:
            state = budget.assess(root, budgets if isinstance(budgets, Mapping) else {}, 0, now=as_of,
                                  summaries=[experiment.summarize(p, d) for p, d in documents])
        except InputError:  # a manifest.yaml that does not parse: the rest of the page still renders
            state = None
    return Experiment(root, experiment.experiment_id(root), iterations,
                      tuple(str(p) for p in pinned) if isinstance(pinned, list) else (), state,
                      clock.iso(as_of) if as_of is not None else None)


# --------------------------------------------------------------------------------------------
# The top line and the budgets
# --------------------------------------------------------------------------------------------


def _top_line(exp: Experiment) -> dict[str, Any] | None:
    """The experiment's blockers and the next action of its last iteration (None: no iteration yet)."""
    if not exp.iterations:
        return None
    latest = exp.iterations[-1]
    blockers = [b for b in get_list(latest.data, "blockers") if isinstance(b, Mapping)]
    # A budget spent since the last run's step 2 is the experiment's blocker too (said once: the
    # last ledger's own budget blocker, when it has one, already says it).
    if exp.state is not None and not any(b.get("class") == BlockerClass.BUDGET for b in blockers):
        blockers.extend({"step": "budget", "message": message} for _, message, _ in exp.state.blockers)
    return {"blockers": len(blockers), "said": "; ".join(f"{b.get('step')}: {b.get('message')}" for b in blockers),
            "deploy_id": latest.deploy_id, "next_action": iteration_report.next_action(latest.data)}


def _budgets(exp: Experiment) -> dict[str, Any]:
    if exp.state is None:
        return {"chart": None, "note": "not counted: no ledger with a time of writing"}
    s = exp.state
    bars = [Bar("failed deploys", s.failed_deploys.used, s.failed_deploys.limit, "failed deploy(s)"),
            Bar("GPU-hours", round(s.gpu_hours.used, 3), s.gpu_hours.limit, "GPU-h"),
            Bar("wall clock", round(s.wall_clock_hours.used, 2), s.wall_clock_hours.limit, "h")]
    since = f", wall clock since {s.session_started_at}" if s.session_started_at else ", no session start recorded"
    return {"chart": budget_chart(bars),
            "note": f"as of the last ledger write {s.at}{since}; grants from user_workload.yaml budgets "
                    "(ungated when null)"}


# --------------------------------------------------------------------------------------------
# One row per iteration
# --------------------------------------------------------------------------------------------


def _capacity(data: Mapping[str, Any]) -> Node:
    verdict = get_map(data, "capacity").get("capacity") or get_map(data, "preflight").get("capacity")
    return verdict if verdict else Muted("not judged")


def _time_to_ready(data: Mapping[str, Any]) -> Node:
    readiness = get_map(data, "readiness")
    if readiness.get("state") == "ready" and readiness.get("seconds") is not None:
        return seconds(readiness.get("seconds"))
    return Muted(str(readiness.get("state") or "not reached"))


def _smoke(data: Mapping[str, Any]) -> dict[str, Any] | None:
    smoke = get_map(data, "smoke")
    if not smoke:
        return None
    ok = smoke.get("success") == 1 or smoke.get("success") is True
    timings = get_map(smoke, "timings")
    return {"passed": ok, "gate": "" if ok else f" {smoke.get('gate') or ''}",
            "said": ", ".join(f"{str(k).removesuffix('_s')} {seconds(v)}" for k, v in timings.items() if seconds(v))}


def _attempts(data: Mapping[str, Any]) -> Node:
    """The failed attempts by category; a ledger of the older rule's failed runs without one, counted."""
    attempts = [a for a in get_list(data, "failed_attempts") if isinstance(a, Mapping)]
    older = experiment.failed_deploys_in(data) - len(attempts)
    said = f" + {older} failed run(s) without one (older ledger), counted" if older > 0 else ""
    if not attempts:
        return said.removeprefix(" + ") if said else Muted("none")
    kinds = Counter(str(a.get("category") or "?") for a in attempts)
    return f"{len(attempts)}: " + ", ".join(f"{k} x{n}" if n > 1 else k for k, n in kinds.most_common()) + said


def _when(value: object) -> Node:
    """A ledger timestamp in two short lines (date, time), so the table fits a page."""
    if not value:
        return Muted("\u2013")
    date, cut, time = str(value).partition("T")
    return Lines([date, time] if cut else [date])


def _torn_down(data: Mapping[str, Any]) -> Node:
    at = data.get("torn_down_at")
    if at:
        return _when(at)
    teardown = get_map(data, "teardown")
    if teardown:
        return f"{teardown.get('action')} ({teardown.get('policy')})"
    return Muted("live" if resume.intervals(data) else "\u2013")


def _links(it: Iteration, links: Links, root: Path) -> list[Link]:
    out = []
    page = iteration_page(it.path)
    if page.is_file():
        out.append(links.link(page.relative_to(root).as_posix(), "page"))
    out.append(links.link(it.path.relative_to(root).as_posix(), "ledger"))
    out.extend(links.link(m.get("path"), m.get("type") or "manifest")
               for m in get_list(it.data, "applied_manifests") if isinstance(m, Mapping) and m.get("path"))
    return out


def _row(it: Iteration, links: Links, root: Path) -> dict[str, Any]:
    d = it.data
    status = str(d.get("status"))
    colours: dict[str, str] = {RunStatus.READY: "#1a7f37", RunStatus.IN_PROGRESS: "#9a6700"}
    until = d.get("updated_at")
    hours = resume.gpu_hours(d, now=str(until) if until else None)
    return {"number": it.number, "links": _links(it, links, root), "status": status,
            "colour": colours.get(status, "#cf222e"), "provenance": d.get("provenance") or "?",
            "review": str(d.get("review_id")) if d.get("review_id") else None, "dgd": d.get("dgd_name") or "?",
            "gpus": d.get("gpus_requested") if d.get("gpus_requested") is not None else Muted("?"),
            "capacity": _capacity(d), "ready": _time_to_ready(d), "smoke": _smoke(d), "attempts": _attempts(d),
            "allocated": _when(d.get("allocated_at")), "torn_down": _torn_down(d), "hours": f"{hours:.3f}"}


# --------------------------------------------------------------------------------------------
# What changed
# --------------------------------------------------------------------------------------------


def _applied_dgd(it: Iteration, root: Path, cache: dict[Path, Dgd | str]) -> Dgd | str:
    """The iteration's applied DGD, or why it cannot be read (a run blocked before the copy)."""
    rel = next((m.get("path") for m in get_list(it.data, "applied_manifests")
                if isinstance(m, Mapping) and m.get("type") == "deploy"), None)
    path = _inside(root, rel)
    if path is None:
        return "no applied DGD recorded (the run stopped before step 1 copied it)"
    if path not in cache:
        try:
            cache[path] = load_dgd(path)
        except (InputError, OSError) as exc:
            cache[path] = f"{rel} cannot be read: {exc}"
    return cache[path]


def _diff(change: dgd_diff.DgdDiff) -> dict[str, Any]:
    # Per-component knobs (replicas, GPUs per worker, parallelism) are the component rows above;
    # the table adds the graph-wide ones, and every pinned knob that moved.
    shown = [k for k in change.knobs if k.pinned or not isinstance(k.before, dict | type(None))
             or not isinstance(k.after, dict | type(None))]
    return {"renamed": change.renamed, "components": change.components, "knobs": shown,
            "pinned_unchanged": ", ".join(change.pinned_unchanged),
            "moved": ", ".join(k.name for k in change.knobs if k.pinned)}


def _patches(it: Iteration, links: Links) -> list[dict[str, Any]]:
    return [{"file": links.path(p.get("file")), "change": p.get("change"), "reason": p.get("reason")}
            for p in get_list(it.data, "patches") if isinstance(p, Mapping)]


def _changes(exp: Experiment, links: Links) -> list[dict[str, Any]]:
    """Each iteration > 0 against the one before: the diff of the applied DGDs, or why there is none."""
    cache: dict[Path, Dgd | str] = {}
    by_number = {it.number: it for it in exp.iterations}
    sections = []
    for it in exp.iterations:
        if it.number <= 0:
            continue
        prev = by_number.get(it.number - 1)
        after = _applied_dgd(it, exp.root, cache)
        before = _applied_dgd(prev, exp.root, cache) if prev is not None else "no ledger of the previous iteration"
        note, diff = None, None
        if isinstance(before, str) or isinstance(after, str):
            note = "not compared: " + "; ".join(x for x in (before, after) if isinstance(x, str))
        else:
            change = dgd_diff.diff(before, after, exp.pinned)
            note, diff = ("no difference in the applied DGDs", None) if change.empty else (None, _diff(change))
        sections.append({"number": it.number, "deploy_id": it.deploy_id,
                         "against": prev.deploy_id if prev else "the previous iteration", "note": note,
                         "diff": diff, "patches": _patches(it, links)})
    return sections


# --------------------------------------------------------------------------------------------
# Timeline
# --------------------------------------------------------------------------------------------


def _lane(it: Iteration, retired_by: str | None, last: _dt.datetime | None) -> Lane:
    steps = []
    for s in get_list(it.data, "steps"):
        start = clock.parse_iso(s.get("started_at")) if isinstance(s, Mapping) else None
        if start is None:
            continue
        took = s.get("duration_s")
        end = (start + _dt.timedelta(seconds=float(took)) if isinstance(took, int | float)
               else clock.parse_iso(s.get("ended_at")) or start)
        steps.append(Span(start, end, f"{it.deploy_id} {s.get('name')} ({s.get('outcome')})",
                          STEP_COLOURS.get(str(s.get("name")), "#6e7781"), s.get("outcome") in (StepOutcome.FAILED,
                                                                                                StepOutcome.BLOCKED)))
    allocs = [Span(began, ended or last or began, f"{it.deploy_id} GPUs held"
                   + (" (still held at the last ledger write)" if ended is None else ""), ALLOCATION_COLOUR)
              for began, ended in resume.spans(it.data)]
    holds = (clock.parse_iso(h.get("at")) for h in get_list(it.data, "hold_decisions") if isinstance(h, Mapping))
    return Lane(it.deploy_id, tuple(steps), tuple(allocs), clock.parse_iso(it.data.get("torn_down_at")), retired_by,
                tuple(h for h in holds if h is not None))


def _timeline(exp: Experiment) -> dict[str, Any] | None:
    last = clock.parse_iso(exp.as_of)
    retirers: dict[str, str] = {}
    for it in exp.iterations:
        retired = get_map(it.data, "retired_previous")
        ledger = retired.get("ledger")
        if isinstance(ledger, str):
            retirers[Path(ledger).parent.name] = it.deploy_id
    chart = timeline_chart([_lane(it, retirers.get(it.deploy_id), last) for it in exp.iterations])
    return {"legend": legend(), "chart": chart} if chart is not None else None


# --------------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------------


def render(exp: Experiment, links: Links) -> str:
    """The standalone page (no script, no external resource): templates/experiment_page.html.j2."""
    return markup.page(
        "experiment_page.html.j2", title=f"experiment {exp.exp_id} - dynamo-deploy-suite", exp_id=exp.exp_id,
        count=f"{len(exp.iterations)} iteration(s); as of the last ledger write {exp.as_of or chr(8211)}",
        top=_top_line(exp), budgets=_budgets(exp), rows=[_row(it, links, exp.root) for it in exp.iterations],
        changes=_changes(exp, links), timeline=_timeline(exp))


def write(exp_root: Path, out: Path | None = None) -> Path:
    """Build the experiment page from the tree at ``exp_root`` and write it atomically."""
    exp = load(exp_root)
    target = (out or exp.root / "artifacts" / PAGE).absolute()
    rel = Path(os.path.relpath(exp.root, target.parent)).as_posix()
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, render(exp, Links("" if rel == "." else rel + "/")))
    return target


def main(argv: list[str] | None = None) -> int:
    """``deploy-suite report EXP_ROOT [-o OUT]``: write the experiment page."""
    parser = argparse.ArgumentParser(prog="deploy-suite report", description=main.__doc__)
    parser.add_argument("exp_root", type=Path, help="an experiment root runs/<EXP_ID>")
    parser.add_argument("-o", "--output", type=Path, default=None,
                        help=f"output file (default: <EXP_ROOT>/artifacts/{PAGE})")
    args = parser.parse_args(argv)
    if not (args.exp_root / "artifacts").is_dir():
        print(f"deploy-suite report: error: {args.exp_root}: no artifacts/ directory; fix: pass an experiment "
              "root (runs/<EXP_ID>) or a deployment_ledger.json", file=sys.stderr)
        return 2
    print(write(args.exp_root, args.output))
    return 0
