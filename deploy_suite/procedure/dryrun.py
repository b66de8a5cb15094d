"""Step 2's server-side dry-run, judged as the request step 5 will really make.

Step 5 applies the candidate after step 3 has deleted the previous iteration's DGD. When the
candidate keeps that DGD's name, a dry-run under the name is judged by the operator's webhook as an
**update** of the live DGD, and update-only rules (component topology, multinode, backend framework
immutable) refuse a candidate the real create admits. So such a DGD is dry-run as a create under a
derived name (mode ``create-as``): same length, same namespace, a valid DNS label, deterministic,
absent from the cluster; every create rule still applies. The in-place update's verdict is kept as
information. Only a live DGD that step 3 will delete gets this; any other live DGD (this iteration's
own on a rerun, the experiment's older one) is what step 5 will update, and a foreign one blocks in
the ownership check. docs/procedure.md, "Step 2: the platform and the dry-run".

A refusal whose text says a webhook could not be called is a platform fault (:func:`webhook_fault`),
not a verdict on the manifest.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from deploy_suite.access.kube import DGD, Kube, Obj
from deploy_suite.constants import DGD_KIND, WEBHOOK_UNREACHABLE
from deploy_suite.errors import Forbidden, KubeError
from deploy_suite.judges import ownership
from deploy_suite.procedure.platform import Verdicts
from deploy_suite.record import resume
from deploy_suite.vocab import BlockerClass

# How an apiserver says it could not reach a webhook (admission or conversion), as opposed to a
# webhook's own refusal ("admission webhook ... denied the request").
_UNREACHABLE = re.compile(WEBHOOK_UNREACHABLE + r"|connection refused|no endpoints available"
                          r"|context deadline exceeded|no route to host|i/o timeout|x509: certificate", re.IGNORECASE)
_HOOK_NAME = re.compile(r'(?:calling|call) webhook "([^"]+)"|conversion webhook for ([^:]+?) failed'
                        r'|service "([^"]+)"', re.IGNORECASE)
WEBHOOK_FIX = ("the Dynamo operator's webhook is unreachable: check the operator pod and its webhook Service's "
               "endpoints (kubectl get pods,endpoints -A -l app.kubernetes.io/part-of=dynamo-operator); "
               "the candidate was not judged")
MANIFEST_FIX = "fix the manifest so that the API server accepts it"
# Tries at a derived name before giving up on create-as: each a different deterministic salt.
_TRIES = 3


def webhook_fault(text: str) -> str | None:
    """The webhook (or its Service) a refusal says could not be called ("" when unnamed); None when
    the refusal is a verdict on the object itself."""
    if "denied the request" in text or not _UNREACHABLE.search(text):
        return None  # a webhook that answered: its verdict, whatever its message quotes
    named = _HOOK_NAME.search(text)
    return next((g for g in named.groups() if g), "") if named else ""


def derived_name(name: str, attempt: int = 0) -> str:
    """A name as long as ``name`` (the operator's child names, ``<dgd>-<component>-<hash>``, have
    length limits that are create rules too), a valid DNS label, deterministic, never ``name``."""
    digest = hashlib.sha256(f"deploy-suite-dry-run/{attempt}/{name}".encode()).hexdigest()
    size = len(name)
    out = digest[:size] if size <= 6 else f"{name[:size - 6]}-{digest[:5]}"
    return out if out != name else derived_name(name, attempt + 1)


@dataclass(frozen=True)
class Plan:
    """How the DGD is dry-run: ``create`` (no live DGD of the name), ``create-as`` (under ``name``,
    derived: the live one is deleted by step 3 first), ``update`` (step 5 will update the live one)
    or ``as-written`` (whether one is live is unknown)."""

    mode: str
    name: str
    reason: str


def plan(kube: Kube, namespace: str, name: str, retiring: tuple[str, str] | None,
         own_uid: str | None, retiring_uid: str | None) -> Plan:
    """The mode, from the live DGD of the candidate's name and whose it is (the rules of step 3:
    ``resume.whose`` and the experiment's field manager)."""
    try:
        live = kube.get_or_none(DGD, name, namespace)
    except Forbidden:
        return Plan("as-written", name, "get of the live DGD forbidden: dry-run under its own name")
    if live is None:
        return Plan("create", name, "no DGD of this name is live: step 5 creates it")
    owner = resume.whose(live, own_uid, retiring_uid)
    named = ownership.LedgerName(name, namespace, kube.context, retiring_uid) if retiring == (namespace, name) else None
    ours = not ownership.judge(live, name, namespace, kube.field_manager, ledger=named,
                               kube_context=kube.context).foreign
    if retiring != (namespace, name) or owner != "previous" or not ours:
        why = ("this iteration's own DGD (a rerun): step 5 updates it" if owner == "mine" else
               "a live DGD step 3 does not delete: step 5 would update it")
        return Plan("update", name, why)
    for attempt in range(_TRIES):
        other = derived_name(name, attempt)
        try:
            if kube.get_or_none(DGD, other, namespace) is None:
                return Plan("create-as", other, f"the live {name} is the previous iteration's, deleted by step 3 "
                            "before step 5 creates the candidate: judged as that create")
        except Forbidden:
            break
    return Plan("update", name, "no free derived name could be verified: dry-run as an update of the live DGD")


def _renamed(doc: Obj, name: str) -> Obj:
    out = copy.deepcopy(doc)
    out.setdefault("metadata", {})["name"] = name
    out["metadata"].pop("resourceVersion", None)
    out["metadata"].pop("uid", None)
    return out


def _verdict(kube: Kube, doc: Obj, namespace: str, display: str) -> str:
    try:
        kube.apply(doc, namespace, dry_run=True, source=display)
    except KubeError as exc:
        return f"rejected: {exc}"
    return "accepted"


def dry_run_all(kube: Kube, docs: Mapping[str, list[Obj]], displays: Mapping[str, str], namespace: str,
                retiring: tuple[str, str] | None = None, own_uid: str | None = None,
                retiring_uid: str | None = None) -> Verdicts:
    """Server dry-run of every document (the DGD as :func:`plan` says); evidence ``dry_run`` (one
    entry per document) and ``dgd_dry_run`` (mode, name used, why, the in-place update's verdict)."""
    out = Verdicts()
    results = []
    for kind, kind_docs in docs.items():
        display = displays[kind]
        for doc in kind_docs:
            name = str((doc.get("metadata") or {}).get("name"))
            label = f"{doc.get('kind')}/{name}"
            entry = {"file": display, "object": label}
            if doc.get("kind") == DGD_KIND and kind == "deploy":
                how = plan(kube, namespace, name, retiring, own_uid, retiring_uid)
                verdict = _verdict(kube, _renamed(doc, how.name) if how.mode == "create-as" else doc,
                                   namespace, display)
                record = {"mode": how.mode, "dgd": name, "name": how.name, "reason": how.reason, "result": verdict}
                if how.mode == "create-as":  # information only: what an in-place update would have met
                    record["update_verdict"] = _verdict(kube, doc, namespace, display)
                    entry["as"] = how.name
                out.evidence["dgd_dry_run"] = record
            else:
                verdict = _verdict(kube, doc, namespace, display)
            results.append({**entry, "result": verdict})
            if verdict != "accepted":
                _judge(out, label, display, verdict.removeprefix("rejected: "))
    out.evidence["dry_run"] = results
    return out


def _judge(out: Verdicts, label: str, display: str, text: str) -> None:
    hook = webhook_fault(text)
    if hook is None:
        out.block(f"server dry-run rejected {label} from {display}: {text}", MANIFEST_FIX,
                  category=BlockerClass.DRY_RUN)
    else:
        out.block(f"the Dynamo operator's webhook{f' {hook}' if hook else ''} could not be called for the dry-run of "
                  f"{label} from {display}: a platform fault, not the candidate's ({text})", WEBHOOK_FIX,
                  category=BlockerClass.PLATFORM)
