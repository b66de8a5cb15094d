"""What a run asked of the cluster, read from the offline apiserver's audit log.

The log is Metadata level (verb, objectRef, requestURI, user agent, response code; never a body).
A run started with a user agent of its own (:func:`new_user_agent`, passed to
:class:`~tests.support.runs.SuiteRun`) is picked out of it by that agent; :func:`audit_events`
first makes a sentinel request with the same agent, so that once the sentinel is in the log every
earlier request of the agent is too.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from deploy_suite.access.kube import Kube, Obj
from deploy_suite.errors import Forbidden

MUTATING_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def new_user_agent(prefix: str = "security-test") -> str:
    return f"{prefix}/{uuid.uuid4().hex[:12]}"


def new_canary() -> str:
    """A secret value to search for; shaped like a Hugging Face token, so the ledger's secret guard
    would also recognise it."""
    return "hf_" + uuid.uuid4().hex + uuid.uuid4().hex[:8]


def sentinel_kube(context: str, kubeconfig: str | Path, user_agent: str) -> Kube:
    """A client that makes its requests with ``user_agent`` (for :func:`audit_events`)."""
    return Kube(context, kubeconfig, user_agent=user_agent)


def audit_events(audit_log: str | Path, kube: Kube, user_agent: str, timeout: float = 15.0) -> list[Obj]:
    """Every audited request made with ``user_agent``; ``kube`` must carry the same user agent (it
    makes the sentinel request, which is left out of the answer)."""
    sentinel = f"audit-sentinel-{uuid.uuid4().hex[:8]}"
    with contextlib.suppress(Forbidden):  # a namespaced identity may not read namespaces: still audited
        kube.get_or_none("Namespace", sentinel)
    log = Path(audit_log)
    deadline = time.monotonic() + timeout
    while True:
        events = []
        with log.open(encoding="utf-8") as handle:
            for line in handle:
                if user_agent in line:
                    event = json.loads(line)
                    if event.get("userAgent") == user_agent:
                        events.append(event)
        if any((e.get("objectRef") or {}).get("name") == sentinel for e in events):
            return [e for e in events if (e.get("objectRef") or {}).get("name") != sentinel]
        if time.monotonic() > deadline:
            raise AssertionError(f"the audit log {log} never showed the sentinel request of {user_agent}")
        # A file, not an API object: nothing to watch. Bounded, short re-reads only.
        threading.Event().wait(0.05)


def is_dry_run(event: Obj) -> bool:
    return "dryRun=All" in str(event.get("requestURI", ""))


def mutations(events: Iterable[Obj]) -> list[Obj]:
    """Requests that change cluster state: create/update/patch/delete without ``dryRun``."""
    return [e for e in events if e.get("verb") in MUTATING_VERBS and not is_dry_run(e)]


def describe(event: Obj) -> str:
    """One line per audited request, for assertion messages."""
    ref = event.get("objectRef") or {}
    code = (event.get("responseStatus") or {}).get("code")
    return (f"{event.get('verb')} {ref.get('resource')}{'/' + ref['subresource'] if ref.get('subresource') else ''} "
            f"{ref.get('namespace', '')}/{ref.get('name', '')} -> {code} ({event.get('requestURI')})")
