"""A verdict in the troubleshooting shape NVIDIA's ``troubleshoot-dynamo`` skill answers in:
problem class, evidence checked, strongest signal, likely cause, the exact next command or patch,
what was ruled out, whether it is safe to continue (docs/triage.md, "The troubleshooting shape";
schema docs/triage.schema.json). Pure: a verdict and what was read in, a mapping out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deploy_suite.judges.triage import Verdict
from deploy_suite.vocab import Action, TriageCategory

# What each category's rule rules out by itself (besides the verdicts it outranked).
_EXCLUDES = {
    TriageCategory.FAILED_DEPLOY: "waiting: it can never run as written",
    TriageCategory.CRASH: "waiting: it can never run as written",
    TriageCategory.DEPENDENCY: "a failed attempt: the candidate's manifest is not at fault",
    TriageCategory.PLATFORM: "a failed attempt: the cluster is at fault, not the candidate",
}
_WAITING = "a failed attempt: waiting can help"
# Safe to go on: keep waiting, or try the next candidate; a dependency or a platform fault meets
# every rerun, and an unknown verdict needs a person first.
SAFE = frozenset({Action.WAIT, Action.FAILED_ATTEMPT})


def next_command(kind: str, name: str, namespace: str, verdict: Verdict) -> str:
    """The one ``kubectl`` command that shows the next thing to read for this verdict."""
    ns = f"-n {namespace} " if namespace else ""
    if verdict.action == Action.WAIT:
        return f"kubectl {ns}get {kind.lower()} {name} -w"
    if kind == "Node":
        return f"kubectl describe node {name}"
    if kind == "Job":
        return f"kubectl {ns}logs job/{name} --all-containers --tail=40"
    if kind == "Pod" and verdict.category == TriageCategory.CRASH:
        return f"kubectl {ns}logs {name} --all-containers --previous --tail=40"
    if kind == "PersistentVolumeClaim" and "StorageClass" in verdict.diagnosis and "does not exist" in \
            verdict.diagnosis:
        return "kubectl get storageclass"
    return f"kubectl {ns}describe {kind.lower()} {name}"


def troubleshooting(kind: str, name: str, namespace: str, verdict: Verdict,
                    checked: Sequence[str] = ()) -> dict[str, Any]:
    """The troubleshooting fields of one finding (added beside its verdict in ``--json``)."""
    excluded = _EXCLUDES.get(verdict.category, _WAITING if verdict.action == Action.WAIT else "")
    return {
        "problem_class": verdict.category,
        "evidence_checked": list(checked),
        "strongest_signal": verdict.evidence[0] if verdict.evidence else verdict.diagnosis,
        "likely_cause": " ".join(verdict.diagnosis.split()),
        "next_step": {"command": next_command(kind, name, namespace, verdict), "patch": verdict.fix or None},
        "ruled_out": [*verdict.ruled_out, *([excluded] if excluded else [])],
        "safe_to_continue": verdict.action in SAFE,
    }


def stopped(kind: str, name: str, namespace: str, stop: tuple[str, str, Sequence[str]], *, failed_attempt: bool,
            checked: Sequence[str] = ()) -> dict[str, Any]:
    """The troubleshooting fields of a wait that ended on its own bound or a status, not on one
    object's verdict (no progress, a loading or checkpoint timeout, a reconcile error); ``stop`` is
    its category, its diagnosis and its evidence. Safe to continue only when it is a failed attempt
    (the next candidate may run); anything else needs the cause fixed or read first."""
    category, diagnosis, evidence = stop
    ns = f"-n {namespace} " if namespace else ""
    return {
        "problem_class": category,
        "evidence_checked": list(checked),
        "strongest_signal": evidence[0] if evidence else diagnosis,
        "likely_cause": " ".join(diagnosis.split()),
        "next_step": {"command": f"kubectl {ns}describe {kind.lower()} {name}", "patch": None},
        "ruled_out": [],
        "safe_to_continue": failed_attempt,
    }
