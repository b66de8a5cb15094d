"""The kubelet's words on a container's probes and on a pod's eviction, read by their structure.

The prober writes ``Unhealthy`` events as ``<Startup|Readiness|Liveness> probe failed: <output>``
or ``... probe errored: <error>``; the kubelet kills a container whose startup or liveness probe
failed with a ``Killing`` event ``Container <c> failed <startup|liveness> probe, will be
restarted`` (SIGTERM: exit 143). The eviction manager writes ``The node was low on resource: <r>.``
(node pressure), ``The node had condition: [<c>].`` (admission under pressure), or names the pod's
own limit. docs/triage.md lists the verdicts; the vectors in tests/unit/data/triage/ cite the
sources. Pure: reason and message in, :class:`Said` out (``words.judge_kubelet`` names the speaker).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from deploy_suite.vocab import TriageCategory


@dataclass(frozen=True)
class Said:
    category: TriageCategory
    why: str
    decisive: bool = False


_PROBE = re.compile(r"^(?P<probe>startup|readiness|liveness) probe (?P<how>failed|errored)[^:]*: (?P<out>.*)$",
                    re.IGNORECASE | re.DOTALL)
# The probe's exec command is absent from the image: the runtime's exec error, or a shell saying so
# (exit 127). A probe's own output ("stat: cannot stat '/ready': No such file or directory") is not this.
_COMMAND_MISSING = re.compile(r"executable file not found|exec: \"[^\"]*\": stat [^:]*: no such file or directory|"
                              r"(?:^|\s)(?:/bin/)?(?:ba)?sh(?:: \d+)?: [^:\n]+: not found|command not found|"
                              r"exit (?:status|code) 127\b", re.IGNORECASE)
_KILLED = re.compile(r"failed (?P<probe>startup|liveness) probe, will be restarted", re.IGNORECASE)
# The kubelet kills on a repeated failure; the first kill may be a slow start (the crash-loop rule's
# count, judges/triage.py CRASH_LOOP_RESTARTS).
KILLS_FINAL = 2


def judge_probe(reason: str, message: str, count: int = 1) -> Said | None:
    """A probe's words: a command missing from the image can never pass (failed attempt); a kill
    by a startup or liveness probe that repeats is the candidate's (it never answers in time);
    a plain failure says only that the container is not ready yet (no verdict: still loading)."""
    if reason == "Unhealthy":
        found = _PROBE.match(message.strip())
        if found is not None and _COMMAND_MISSING.search(found.group("out")):
            probe = found.group("probe").lower()
            return Said(TriageCategory.FAILED_DEPLOY, f"its {probe} probe's command does not exist in the image: the "
                        f"probe can never pass (fix the {probe}Probe's exec command, or use an httpGet probe)",
                        decisive=True)
        return None
    killed = _KILLED.search(message) if reason == "Killing" else None
    if killed is None or count < KILLS_FINAL:
        return None
    probe = killed.group("probe").lower()
    return Said(TriageCategory.CRASH, f"the kubelet kills it each time its {probe} probe fails (exit 143, SIGTERM): "
                f"it does not answer within the {probe}Probe's failureThreshold x periodSeconds; raise them if "
                "the model needs longer to load, or fix what keeps it from answering", decisive=True)


_NODE_LOW = re.compile(r"the node was low on resource: (?P<res>[\w./-]+)", re.IGNORECASE)
_NODE_CONDITION = re.compile(r"the node had condition: \[?(?P<cond>[\w, ]+)\]?", re.IGNORECASE)
# The eviction manager's note on the evicted pod's own use (pkg/kubelet/eviction/helpers.go, both wordings).
_OWN_USE = re.compile(r"container (?P<c>\S+) was using (?P<used>\S+), (?:which exceeds its request of|request is) "
                      r"(?P<req>[^,.]+)", re.IGNORECASE)
_PRESSURE = {"memory": "MemoryPressure", "ephemeral-storage": "DiskPressure", "nodefs": "DiskPressure",
             "imagefs": "DiskPressure", "pids": "PIDPressure"}


def judge_eviction(message: str) -> Said | None:
    """A node-pressure eviction (or a pod refused at admission for the node's condition): the node
    ran out of a resource for everyone, the platform's to fix; the pod's own use over its request,
    when the message names it, is in the diagnosis. None for words that are not node pressure."""
    low = _NODE_LOW.search(message)
    cond = _NODE_CONDITION.search(message)
    if low is None and cond is None:
        return None
    res = low.group("res").rstrip(".") if low is not None else ""
    condition = _PRESSURE.get(res.split(".")[0], "its pressure condition") if low is not None else \
        cond.group("cond").strip() if cond is not None else ""
    why = f"evicted under node pressure: the node was low on {res} ({condition})" if low is not None else \
        f"refused under node pressure: the node had condition {condition}"
    own = _OWN_USE.search(message)
    if own is not None:
        why += f"; its container {own.group('c')} used {own.group('used')} over its request of {own.group('req')}"
    return Said(TriageCategory.PLATFORM, why + ": free the node's resource or move to a healthy node")
