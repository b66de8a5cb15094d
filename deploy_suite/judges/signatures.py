"""Failure signatures: what a failing container says about why it failed, in its own words.

A crash loop says only that a container keeps dying; its last log lines and termination message
say why (a gated model, a driver too old for the image, NATS unreachable, /dev/shm too small...),
and each cause has its own party to fix it (docs/triage.md). The table is data
(``data/signatures.yaml``, one public source per row), matched on the error's class and cause; the
first matching row wins. What no row recognises stays the crash loop it is. Pure: text in, match out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from deploy_suite import yamlio
from deploy_suite.vocab import TriageCategory

_CATEGORIES = frozenset({TriageCategory.CRASH, TriageCategory.DEPENDENCY, TriageCategory.PLATFORM})
# The kernel's OOM killer (the kubelet's termination reason), not a log line: the memory limit.
OOM_REASON = "OOMKilled"
SIGKILL_EXIT = 137
SIGTERM_EXIT = 143  # the kubelet's stop: a startup or liveness probe that failed (judges/probes.py)


@dataclass(frozen=True)
class Signature:
    id: str
    patterns: tuple[re.Pattern[str], ...]
    category: TriageCategory
    decisive: bool
    names: str
    fix: str
    source: str


@dataclass(frozen=True)
class Match:
    signature: Signature
    line: str        # the container's own line that matched
    detail: str = ""  # what the line names (an argument), when the pattern captures it


def _row(raw: Mapping[str, Any]) -> Signature:
    category = str(raw["category"])
    if category not in _CATEGORIES or not raw.get("source") or not raw.get("match"):
        raise ValueError(f"signature {raw.get('id')}: a category of {sorted(_CATEGORIES)}, match and source are needed")
    return Signature(str(raw["id"]), tuple(re.compile(p, re.IGNORECASE) for p in raw["match"]),
                     TriageCategory(category), bool(raw.get("decisive", True)), str(raw["names"]), str(raw["fix"]),
                     str(raw["source"]))


@cache
def table() -> tuple[Signature, ...]:
    text = resources.files("deploy_suite.judges").joinpath("data/signatures.yaml").read_text(encoding="utf-8")
    rows = yamlio.load_yaml_text(text, "deploy_suite/judges/data/signatures.yaml", "fix the package's data file")[0]
    return tuple(_row(r) for r in rows)


def find(lines: Sequence[str]) -> Match | None:
    """The first row that matches any line (newest lines last, as ``kubectl logs`` prints them)."""
    for sig in table():
        for line in lines:
            for pattern in sig.patterns:
                found = pattern.search(line)
                if found:
                    arg = (found.groupdict().get("arg") or "").strip()
                    return Match(sig, " ".join(line.split())[:300], arg)
    return None


def termination(cs: Mapping[str, Any]) -> Mapping[str, Any]:
    """The container's last termination (the previous run's, else the current state's)."""
    state = cs.get("state") or {}
    return (cs.get("lastState") or {}).get("terminated") or state.get("terminated") or {}


def judge(cs: Mapping[str, Any], lines: Sequence[str]) -> Match | None:
    """A container's termination judged from its words: the termination message and its last
    lines (``lines``). A kill by the OOM killer is a match of its own (the memory limit)."""
    ended = termination(cs)
    message = str(ended.get("message") or "")
    found = find([*message.splitlines(), *lines])
    if found is not None:
        return found
    if ended.get("reason") == OOM_REASON:
        return Match(_OOM, f"terminated: {OOM_REASON} (exit code {ended.get('exitCode')})")
    return None


_OOM = Signature("oom-killed", (), TriageCategory.CRASH, True, "memory (the component's resources.limits.memory)",
                 "raise the component's memory limit, or lower what the engine holds in host memory",
                 "https://github.com/kserve/kserve/pull/2290 (lastFailureInfo exitCode 137, OOMKilled)")


def exit_cause(cs: Mapping[str, Any]) -> str:
    """What a bare exit code says: 137 is SIGKILL (the OOM killer or a failed liveness probe)."""
    ended = termination(cs)
    # The kubelet writes 137 for a container it lost too (ContainerStatusUnknown): no kill of the candidate's.
    if ended.get("exitCode") == SIGKILL_EXIT and ended.get("reason") not in {OOM_REASON, "ContainerStatusUnknown"}:
        return "exit 137 is SIGKILL: memory (resources.limits.memory) or a liveness probe killed it"
    if ended.get("exitCode") == SIGTERM_EXIT:
        return "exit 143 is SIGTERM: the kubelet stopped it (a startup or liveness probe failed: its Killing events " \
            "say which)"
    return ""
