"""``deploy-suite triage EVENTS [--pods FILE]... [--nodes FILE] [--logs FILE]... [--json]``: step 6's triage, offline.

Reads what ``kubectl get events -o json`` prints (a file, or ``-`` for stdin) and, optionally, what
``kubectl get pods -o json`` prints (``--pods``, or its alias ``--objects``, repeatable: any kinds,
pods, DCDs, ReplicaSets, PodGroups, Grove's PodCliqueSets/PodCliques/PodCliqueScalingGroups/PodGangs,
LeaderWorkerSets, Kueue Workloads, PersistentVolumeClaims, Jobs, Nodes), ``kubectl get nodes -o json``
and saved container logs (``--logs``: a crash loop's, a failed Job's pods'), and prints one line per
object with a verdict: the object, the action, the category and the evidence; ``--json`` adds the
troubleshooting shape (docs/triage.md, schema docs/triage.schema.json). The verdicts are
:func:`triage_objects.triage_all`'s, the same classifier steps 4 and 6 use. Exit codes
(docs/triage.md): 0 nothing needs action (every verdict is ``wait``, or none), 1 some verdict needs
action (``failed-attempt``, ``fix-dependency`` or ``unknown``), 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deploy_suite.errors import InputError
from deploy_suite.judges import objects as triage_objects
from deploy_suite.vocab import Action

# As many lines as step 6's evidence keeps of each container (procedure/evidence.py LOG_LINES).
LOG_LINES = 40
# A day of events of a busy namespace is a few MB; a file far larger is not what was meant.
MAX_INPUT_BYTES = 64 * 1024 * 1024
_FIX_EVENTS = "pass what `kubectl get events -o json` prints (a file path, or - for stdin)"


def read_json(source: str, what: str, fix: str) -> Any:
    """The JSON document at ``source`` (``-``: stdin), or InputError naming it and the fix."""
    name = f"{what} {'<stdin>' if source == '-' else source}"
    try:
        if source == "-":
            text = sys.stdin.read(MAX_INPUT_BYTES + 1)
        else:
            with Path(source).open(encoding="utf-8") as handle:
                text = handle.read(MAX_INPUT_BYTES + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(name, f"cannot be read ({exc.__class__.__name__}: {exc})", fix) from exc
    if len(text) > MAX_INPUT_BYTES:
        raise InputError(name, f"is larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB", fix)
    if not text.strip():
        raise InputError(name, "is empty", fix)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(name, f"is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})", fix) from exc


def items_of(document: Any, source: str, what: str, fix: str, single_kinds: Sequence[str] = (),
             default_kind: str = "") -> list[dict[str, Any]]:
    """The objects of a ``kubectl get -o json`` answer: a ``List`` (``items``), a bare JSON list,
    or one object of ``single_kinds`` (any kind when empty)."""
    name = f"{what} {'<stdin>' if source == '-' else source}"
    items: list[Any]
    if isinstance(document, dict) and isinstance(document.get("items"), list):
        items = document["items"]
    elif isinstance(document, list):
        items = document
    elif isinstance(document, dict) and document.get("kind") and (
            not single_kinds or document.get("kind") in single_kinds):
        items = [document]
    else:
        found = f"a JSON object of kind {document.get('kind')!r}" if isinstance(document, dict) else \
            f"a JSON {type(document).__name__}"
        single = " or ".join(single_kinds) or "object with a kind"
        raise InputError(name, f"is {found}, not a Kubernetes List (with items) or a single {single}", fix)
    bad = next((i for i, item in enumerate(items) if not isinstance(item, dict)), None)
    if bad is not None:
        raise InputError(name, f"item {bad} is a JSON {type(items[bad]).__name__}, not an object", fix)
    return [item if item.get("kind") or not default_kind else {**item, "kind": default_kind} for item in items]


def _events(items: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    stray = next((i for i, e in enumerate(items)
                  if not isinstance(e.get("involvedObject") or e.get("regarding"), dict)), None)
    if stray is not None:
        kind = items[stray].get("kind") or "an object"
        raise InputError(f"events {'<stdin>' if source == '-' else source}",
                         f"item {stray} ({kind}) is not an Event (no involvedObject/regarding)", _FIX_EVENTS)
    return items


def read_logs(paths: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    """Saved container logs by pod, then container: ``<pod>_<container>.log`` names both,
    ``<pod>.log`` the pod (its lines serve each of its containers); the last lines are kept."""
    out: dict[str, dict[str, list[str]]] = {}
    fix = "pass a container log saved as <pod>.log or <pod>_<container>.log (kubectl logs POD -c C --previous)"
    for source in paths:
        name = Path(source).name.removesuffix(".log")
        pod, _, container = name.partition("_")
        try:
            with Path(source).open(encoding="utf-8", errors="replace") as handle:
                text = handle.read(MAX_INPUT_BYTES + 1)
        except OSError as exc:
            raise InputError(f"--logs {source}", f"cannot be read ({exc.__class__.__name__}: {exc})", fix) from exc
        if not pod or len(text) > MAX_INPUT_BYTES:
            raise InputError(f"--logs {source}", "names no pod" if not pod else "is larger than 64 MiB", fix)
        out.setdefault(pod, {})[container] = text.splitlines()[-LOG_LINES:]
    return out


def line(finding: triage_objects.Finding) -> str:
    """The text form: object, action, category, diagnosis and evidence, tab-separated, one line."""
    v = finding.verdict
    flat = [" ".join(e.split()) for e in v.evidence]
    return "\t".join([finding.object, v.action, v.category, " ".join(v.diagnosis.split()),
                      "evidence: " + " | ".join(flat)])


def exit_code(findings: Sequence[triage_objects.Finding]) -> int:
    """0 when nothing needs action (all ``wait``, or nothing found), 1 otherwise."""
    return 0 if all(f.verdict.action == Action.WAIT for f in findings) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy-suite triage", description=__doc__.splitlines()[0].split(": ", 1)[1])
    parser.add_argument("events", help="kubectl get events -o json output: a file, or - for stdin")
    parser.add_argument("--pods", "--objects", metavar="FILE", action="append", default=[],
                        help="kubectl get -o json output of pods and any other kinds (pvc, jobs, dcd, rs, podgroups, "
                             "workloads, podcliquesets, podcliques, podcliquescalinggroups, podgangs, "
                             "leaderworkersets, nodes); repeatable; - for stdin")
    parser.add_argument("--nodes", metavar="FILE", help="kubectl get nodes -o json output: oversized requests, "
                                                        "taint names, a missing GPU device plugin, node conditions")
    parser.add_argument("--logs", metavar="FILE", action="append", default=[],
                        help="a container's saved log (repeatable): <pod>.log or <pod>_<container>.log; a failed "
                             "Job's pod (<job>-...) names the Job's cause")
    parser.add_argument("--json", action="store_true", help="print a JSON list of findings with the troubleshooting "
                                                            "shape (docs/triage.md, docs/triage.schema.json)")
    parser.add_argument("--recheck", type=float, default=30.0, metavar="S",
                        help="next-check interval a wait verdict names (default 30)")
    args = parser.parse_args(argv)
    try:
        if [args.events, *args.pods, args.nodes].count("-") > 1:
            raise InputError("stdin", "is named by more than one input", "pass at most one input as -")
        events = _events(items_of(read_json(args.events, "events", _FIX_EVENTS), args.events, "events",
                                  _FIX_EVENTS, ("Event",)), args.events)
        objects: list[dict[str, Any]] = []
        fix = "pass what `kubectl get pods -o json` (or any other kind) prints"
        for source in args.pods:
            objects += items_of(read_json(source, "--pods", fix), source, "--pods", fix, default_kind="Pod")
        nodes = None
        if args.nodes:
            fix = "pass what `kubectl get nodes -o json` prints"
            nodes = items_of(read_json(args.nodes, "--nodes", fix), args.nodes, "--nodes", fix, ("Node",), "Node")
        logs = read_logs(args.logs)
    except InputError as exc:
        print(f"deploy-suite triage: error: {exc}", file=sys.stderr)
        return 2
    try:
        findings = triage_objects.triage_all(events, objects, nodes, args.recheck, logs)
    except (AttributeError, TypeError, ValueError) as exc:
        # A field of another type than Kubernetes writes (metadata a list, a status a string).
        print(f"deploy-suite triage: error: the inputs: an object has a field of an unexpected type ({exc}); "
              "fix: pass kubectl's own -o json output, unedited", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([f.as_dict() for f in findings], indent=2))
    elif findings:
        print("\n".join(line(f) for f in findings))
    else:
        print("no object needs triage: no event or status says why anything is not ready")
    return exit_code(findings)


if __name__ == "__main__":
    sys.exit(main())
