"""Render a deployment ledger as HTML, so any ledger (also an old one) can be re-rendered.

The pytest-html report of a run puts ``summary_html(ledger)`` at its top (``plugins/report.py``);
``deploy-suite report LEDGER`` calls ``main`` to write a standalone page from a ledger alone. Like
pytest-html, the data model (the ledger dict) is kept apart from the renderer: nothing here reads
anything but the ledger.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from deploy_suite import ledger as ledger_mod

_STATUS_COLOUR = {"ready": "#1a7f37", "in_progress": "#9a6700", "blocked": "#cf222e", "failed": "#cf222e"}


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


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


def _rows(pairs: Sequence[tuple[str, Any]]) -> str:
    return "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in pairs)


def _endpoint(ledger: Mapping[str, Any]) -> str:
    endpoint = ledger.get("endpoint")
    if not endpoint:
        return "<i>not known yet</i>"
    port = f":{endpoint['port']}" if endpoint.get("port") else ""
    return _e(f"{endpoint.get('kind', '?')} {endpoint.get('target', '?')}{port}{endpoint.get('path', '')}")


def summary_html(ledger: Mapping[str, Any], ledger_path: str | None = None) -> str:
    """The block at the top of a report: status, DGD, endpoint, blockers, next action, steps."""
    status = str(ledger.get("status"))
    colour = _STATUS_COLOUR.get(status, "#57606a")
    source = ledger.get("source_dgd") or {}
    pairs: list[tuple[str, Any]] = [
        ("status", f'<b style="color:{colour}">{_e(status)}</b>'
                   f" &mdash; current step {_e(ledger.get('current_step'))}"),
        ("deployment", _e(f"{ledger.get('deploy_id')} (iteration {ledger.get('iteration')}, "
                          f"{ledger.get('provenance')})")),
        ("DGD", _e(f"{ledger.get('dgd_name') or '?'} from {source['path']} (sha256 {source['sha256'][:12]})"
                   if source else "not known: step1_inputs did not pass")),
        ("cluster", _e(f"context {ledger.get('kube_context')}, namespace {ledger.get('namespace')}")),
        ("endpoint", _endpoint(ledger)),
        ("served model", _e(ledger.get("served_model") or "not known yet")),
        ("GPUs requested", _e(ledger.get("gpus_requested"))),
    ]
    if ledger_path:
        pairs.append(("ledger", _e(ledger_path)))
    blockers = ledger.get("blockers") or []
    if blockers:
        items = "".join(
            f"<li><b>{_e(b.get('step'))}</b> [{_e(b.get('class'))}] {_e(b.get('message'))}"
            f"<br><i>fix:</i> {_e(b.get('fix'))}</li>" for b in blockers
        )
        pairs.append(("blockers", f"<ul>{items}</ul>"))
    pairs.append(("next action", f"<b>{_e(next_action(ledger))}</b>"))
    steps = "".join(
        f"<tr><td>{_e(s.get('name'))}</td><td>{_e(s.get('outcome'))}</td>"
        f"<td>{_e(s.get('duration_s'))}</td><td>{_e(s.get('reason'))}</td></tr>"
        for s in ledger.get("steps") or []
    )
    return (
        '<div class="deploy-suite-summary">'
        f'<table class="deploy-suite-kv">{_rows(pairs)}</table>'
        '<table class="deploy-suite-steps"><tr><th>step</th><th>outcome</th><th>seconds</th><th>reason</th></tr>'
        f"{steps}</table></div>"
    )


def _json_block(title: str, value: Any) -> str:
    if value in (None, [], {}):
        return ""
    return f"<h3>{_e(title)}</h3><pre>{_e(json.dumps(value, indent=2))}</pre>"


def render(ledger: Mapping[str, Any], ledger_path: str | None = None) -> str:
    """A standalone HTML page for one ledger (no external resources)."""
    sections = [
        _json_block(f"{s.get('name')} evidence", s.get("evidence")) for s in ledger.get("steps") or []
    ]
    for key in ("applied_manifests", "patches", "reapplies", "commands", "limitations", "diagnostics",
                "failed_attempts", "retired_previous", "preflight", "capacity", "readiness", "smoke",
                "config_engagement", "hold_decisions", "cleanup_commands", "resumes"):
        sections.append(_json_block(key, ledger.get(key)))
    title = f"{ledger.get('deploy_id')} - dynamo-deploy-suite"
    style = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
             "th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}"
             "pre{background:#f6f8fa;padding:8px;overflow:auto}")
    return (
        f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{_e(title)}</title>"
        f"<style>{style}</style></head><body><h1>{_e(title)}</h1>"
        f"{summary_html(ledger, ledger_path)}{''.join(sections)}</body></html>\n"
    )


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
    except (OSError, ledger_mod.LedgerError) as exc:
        print(f"deploy-suite report: error: {exc}", file=sys.stderr)
        return 2
    try:
        ledger_mod.validate(data)
    except ledger_mod.LedgerError as exc:
        # Still render: an old or hand-edited ledger is exactly what one wants to look at.
        print(f"deploy-suite report: warning: {exc}", file=sys.stderr)
    page = render(data, str(args.ledger))
    if args.output == "-":
        sys.stdout.write(page)
        return 0
    out = Path(args.output) if args.output else Path("reports") / f"{data.get('deploy_id', 'ledger')}.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    ledger_mod.atomic_write_text(out, page)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
