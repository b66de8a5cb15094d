"""End to end: the harness's iteration 0 against the procedure's reference sequence, on one offline cluster.

    python bench/bench_e2e.py [--pairs 5] [--name benche2e] [--keep-cluster] [--json FILE]

On one offline fake-GPU cluster (``deploy-suite cluster up --name NAME``; the admin creates the
namespace ``dynamo-bench`` and ``hf-token-secret`` as on a real cluster) it runs, alternately
(A B A B ..., ``--pairs`` pairs, after one unmeasured warm-up pair):

A  the harness: a fresh ``make_experiment`` copy aimed at the cluster, then
   ``python -m pytest --iter=0 --handoff=... --kubeconfig=...`` from the checkout root, exactly as
   ``offline/deploy_suite_offline/fixtures/demo.py`` runs it; then, outside the timed run,
   ``--iter=1`` of the staged candidate, which retires iteration 0 (the retire wait is measured there);
B  ``bench/reference_procedure.sh`` (the procedure's kubectl/curl/jq sequence with its 30 s / 10 s /
   2 s sleeps) on the same manifests (a fresh copy, the storage-class placeholder resolved the
   way step 2 patches it).

Between runs the DGD, the Job and the PVC are deleted and their pods, PV and Dynamo serving
processes awaited, so every run starts from the same cluster state.

Measured:
* wall time of each run (process start to exit) and the ratio B/A pair by pair;
* the harness's reaction latency for each wait, from the apiserver's audit log (microsecond
  ``requestReceivedTimestamp``/``stageTimestamp``): the event is the request that made the awaited
  condition true (the job controller's ``jobs/status`` write that set Complete, the operator
  simulator's ``dynamographdeployments/status`` patch that set Ready, the last pod DELETE of the
  retired DGD), the action is the harness's (user agent ``deploy-suite``) first request after it
  that is not part of the wait itself; for the model-listed wait the event is the mocker's
  registration in the serving's log (``<cluster_dir>/dynamo/<ns>/<dgd>/mocker.log``) and the action
  the frontend's answer to the harness's successful ``/v1/models`` (``frontend.log``), cross-checked
  with the ledger's smoke timings;
* requests per iteration by verb (harness user agent; the harness's own ``kubectl port-forward``
  separately) against the reference script's (user agents starting with ``kubectl``);
* the harness's peak RSS over a full iteration: the pytest process sampled with psutil, and the
  kernel's ``ru_maxrss`` of the process tree (``os.wait4``).

Prints one JSON line and a table; goals: A at least 10x faster than B, median reaction < 0.5 s
for every wait, peak RSS < 200 MB. The child pytest runs with bytecode caching allowed (this
sandbox exports PYTHONDONTWRITEBYTECODE=1; a user's machine does not): ``--keep-env`` keeps it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

CHECKOUT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(CHECKOUT))

from deploy_suite.access.kube import DGD, Kube, Obj  # noqa: E402
from deploy_suite.access.watch import Watch  # noqa: E402
from deploy_suite.errors import Conflict  # noqa: E402
from deploy_suite.fixtures.experiments.make_experiment import Experiment, make_experiment, refresh, stage_candidate  # noqa: E402
from deploy_suite_offline.binaries import ensure_binaries  # noqa: E402
from deploy_suite_offline.cluster import OfflineCluster  # noqa: E402

NAMESPACE = "dynamo-bench"
HARNESS_UA = "deploy-suite"
REFERENCE = CHECKOUT / "bench" / "reference_procedure.sh"
STORAGE_PLACEHOLDER = "your-storage-class-name"
GOAL_RATIO = 10.0
GOAL_REACTION_S = 0.5
GOAL_RSS_MB = 200.0
WRITE_VERBS = frozenset({"create", "update", "patch", "delete"})
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LOG_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z")


# ---------------------------------------------------------------------------- parsers
def parse_ts(value: str) -> dt.datetime:
    """An RFC 3339 UTC timestamp with microseconds (audit log, Dynamo logs)."""
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass(frozen=True)
class AuditEntry:
    received: dt.datetime
    stage: dt.datetime
    ua: str
    verb: str
    resource: str
    subresource: str
    name: str
    namespace: str
    uri: str

    def describe(self) -> str:
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        return f"{self.ua.split(' ')[0]} {self.verb} {what} {self.name}".strip()


def parse_audit_line(line: str) -> AuditEntry | None:
    try:
        e = json.loads(line)
    except ValueError:
        return None
    if not isinstance(e, dict) or "requestReceivedTimestamp" not in e:
        return None
    if e.get("stage") == "ResponseStarted":
        return None  # long-running requests (watch, port-forward) are logged again at ResponseComplete
    ref = e.get("objectRef") or {}
    return AuditEntry(parse_ts(e["requestReceivedTimestamp"]), parse_ts(e.get("stageTimestamp")
                      or e["requestReceivedTimestamp"]), str(e.get("userAgent", "")), str(e.get("verb", "")),
                      str(ref.get("resource", "")), str(ref.get("subresource", "")), str(ref.get("name", "")),
                      str(ref.get("namespace", "")), str(e.get("requestURI", "")))


def read_audit(path: Path, since: dt.datetime, until: dt.datetime) -> list[AuditEntry]:
    """Entries whose request arrived in [since, until], ordered by arrival (watches are logged
    when they end but carry the time they started)."""
    out = []
    with path.open() as fh:
        for line in fh:
            entry = parse_audit_line(line)
            if entry is not None and since <= entry.received <= until:
                out.append(entry)
    return sorted(out, key=lambda e: e.received)


def is_harness(e: AuditEntry) -> bool:
    return e.ua == HARNESS_UA


def is_kubectl(e: AuditEntry) -> bool:
    return e.ua.startswith("kubectl")


def count_verbs(entries: Iterable[AuditEntry], who: Callable[[AuditEntry], bool]) -> dict[str, int]:
    return dict(sorted(Counter(e.verb for e in entries if who(e)).items()))


@dataclass(frozen=True)
class Reaction:
    wait: str
    latency_s: float
    event: str
    action: str
    event_at: dt.datetime
    action_at: dt.datetime


def _reaction(wait: str, event: AuditEntry | None, action: AuditEntry | None) -> Reaction | None:
    if event is None or action is None:
        return None
    return Reaction(wait, (action.received - event.stage).total_seconds(), event.describe(), action.describe(),
                    event.stage, action.received)


def last_harness_write(entries: Sequence[AuditEntry], resource: str, name: str, before: dt.datetime) \
        -> AuditEntry | None:
    """The harness's last (real, not dry-run) write of an object before ``before``: when it applied it."""
    found = [e for e in entries if is_harness(e) and e.verb in WRITE_VERBS and e.resource == resource
             and e.name == name and "dryRun" not in e.uri and e.received <= before]
    return found[-1] if found else None


def _after_wait(entries: Sequence[AuditEntry], start: AuditEntry, part_of_wait: Callable[[AuditEntry], bool]) \
        -> AuditEntry | None:
    """The harness's first request after ``start`` that is not the wait's own list/watch."""
    return next((e for e in entries if is_harness(e) and e.received > start.received and not part_of_wait(e)), None)


def _last_write_before(entries: Sequence[AuditEntry], limit: dt.datetime, match: Callable[[AuditEntry], bool]) \
        -> AuditEntry | None:
    """The last write by anyone but the harness that matched and had completed by ``limit``."""
    found = [e for e in entries if not is_harness(e) and e.verb in WRITE_VERBS and match(e) and e.stage <= limit]
    return max(found, key=lambda e: e.stage, default=None)


def _wait_start(entries: Sequence[AuditEntry], resource: str, name: str) -> AuditEntry | None:
    """The harness's first list (or watch) of the awaited object: where the wait begins."""
    return next((e for e in entries if is_harness(e) and e.verb in {"list", "watch"} and e.resource == resource
                 and e.name == name), None)


def job_reaction(entries: Sequence[AuditEntry], job: str) -> Reaction | None:
    watch = _wait_start(entries, "jobs", job)
    if watch is None:
        return None
    # The wait lists/watches the Job (and, to triage its pods, the Job's pods and their events).
    action = _after_wait(entries, watch, lambda e: e.resource == "jobs" or (
        e.verb in {"list", "watch"} and e.resource in {"pods", "events"}))
    event = None if action is None else _last_write_before(
        entries, action.received, lambda e: e.resource == "jobs" and e.subresource == "status" and e.name == job)
    return _reaction("job complete", event, action)


def dgd_ready_reaction(entries: Sequence[AuditEntry], dgd: str) -> Reaction | None:
    """Event: the later of the DGD status write that set Ready and the last pod status write of
    its pods (readiness needs both); action: the harness's next request (the frontend Service)."""
    watch = _wait_start(entries, "dynamographdeployments", dgd)
    if watch is None:
        return None
    waits = {"dynamographdeployments", "pods", "events", "nodes"}
    action = _after_wait(entries, watch, lambda e: e.verb in {"list", "watch"} and e.resource in waits)
    if action is None:
        return None
    event = _last_write_before(entries, action.received, lambda e: (
        e.resource == "dynamographdeployments" and e.subresource == "status" and e.name == dgd) or (
        e.resource == "pods" and e.subresource == "status" and e.name.startswith(f"{dgd}-")))
    return _reaction("DGD ready", event, action)


def retire_reaction(entries: Sequence[AuditEntry], dgd: str) -> Reaction | None:
    """Iteration 1: after deleting the DGD the harness watches its pods; the event is the last
    pod DELETE (kwok's final one), the action the harness's next request (step 4's apply)."""
    delete = next((e for e in entries if is_harness(e) and e.verb == "delete"
                   and e.resource == "dynamographdeployments" and e.name == dgd), None)
    if delete is None:
        return None
    watch = next((e for e in entries if is_harness(e) and e.verb in {"list", "watch"} and e.resource == "pods"
                  and e.received > delete.received), None)
    if watch is None:
        return None
    action = _after_wait(entries, watch, lambda e: e.verb in {"list", "watch"} and e.resource in
                         {"pods", "dynamographdeployments"})
    event = None if action is None else _last_write_before(
        entries, action.received, lambda e: e.resource == "pods" and e.verb == "delete"
        and e.name.startswith(f"{dgd}-") and not e.subresource)
    return _reaction("pods deleted", event, action)


def log_lines(path: Path) -> list[tuple[dt.datetime, str]]:
    """(timestamp, text without ANSI colours) of each timestamped line of a Dynamo log."""
    out = []
    with contextlib.suppress(OSError):
        for raw in path.read_text(errors="replace").splitlines():
            line = _ANSI.sub("", raw)
            m = _LOG_TS.match(line)
            if m:
                out.append((parse_ts(m.group(1) + "Z"), line))
    return out


@dataclass(frozen=True)
class ListedTimes:
    registered: dt.datetime  # the mocker's last endpoint registration before the frontend listed it
    frontend_listed: dt.datetime  # the frontend added the worker set to the model
    harness_listed: dt.datetime  # the frontend answered the harness's successful /v1/models
    chat_done: dt.datetime  # the frontend answered the smoke's chat request


def model_listed_times(mocker_log: Path, frontend_log: Path, served_model: str) -> ListedTimes | None:
    """From the serving's logs. The harness's successful /v1/models is the last 200 the frontend
    sent before the chat request arrived (the smoke's gates run in that order; the simulator's
    own probes come before the DGD is Ready)."""
    front = log_lines(frontend_log)
    listed = next((t for t, line in front if "Adding worker set to model" in line
                   and f"model={served_model}" in line), None)
    chat = next((t for t, line in front if "request received" in line and "chat_completions" in line), None)
    if listed is None or chat is None:
        return None
    answered = [t for t, line in front if "http response sent status=200" in line and "uri=" not in line
                and listed <= t <= chat]
    regs = [t for t, line in log_lines(mocker_log) if "Registered endpoint" in line and t <= listed]
    done = next((t for t, line in front if "http response sent" in line and "uri=/v1/chat/completions" in line
                 and t >= chat), None)
    if not answered or not regs or done is None:
        return None
    return ListedTimes(max(regs), listed, answered[-1], done)


# ---------------------------------------------------------------------------- runs
@dataclass
class RunResult:
    kind: str  # harness | reference | harness-iter1
    wall_s: float
    rc: int
    since: dt.datetime
    until: dt.datetime
    peak_rss_mb: float = 0.0  # the main process, sampled
    tree_maxrss_mb: float = 0.0  # ru_maxrss over the process and its reaped children
    extra: dict[str, Any] = field(default_factory=dict)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def run_measured(argv: list[str], env: dict[str, str], cwd: Path, log: Path, kind: str) -> RunResult:
    """Run a child to completion: wall time, peak RSS (psutil every 20 ms), ru_maxrss (wait4)."""
    since = _now()
    t0 = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        peak = 0
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            with contextlib.suppress(psutil.Error):
                me = psutil.Process(proc.pid)
                while not done.is_set():
                    peak = max(peak, me.memory_info().rss)
                    done.wait(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
    return RunResult(kind, wall, proc.returncode, since, _now(), peak / 2**20, usage.ru_maxrss / 1024)


class Bench:
    def __init__(self, name: str, scratch: Path, keep_env: bool, harness_args: Sequence[str] = ()) -> None:
        self.cluster = OfflineCluster(name, "default", log=lambda _m: None)
        self.scratch = scratch
        self.keep_env = keep_env
        self.harness_args = list(harness_args)
        self.counter = 0

    def up(self) -> None:
        info = self.cluster.up()
        self.info = info
        self.audit = Path(info.audit_log)
        self.dynamo = Path(info.cluster_dir) / "dynamo" / NAMESPACE
        self.admin: Kube = self.cluster.kube()
        for doc in ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token-secret",
                     "namespace": NAMESPACE}, "type": "Opaque", "stringData": {"HF_TOKEN": "bench-placeholder"}}):
            with contextlib.suppress(Conflict):
                self.admin.create(doc, NAMESPACE if doc["kind"] == "Secret" else None)
        venv_bin = Path(sys.executable).parent
        self.env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
                    "KUBECONFIG": info.kubeconfig}
        if not self.keep_env:
            self.env.pop("PYTHONDONTWRITEBYTECODE", None)

    # -------------------------------------------------------------- state between runs
    def reset(self, dgd: str, job: str, pvc: str) -> None:
        """Delete the DGD, Job and PVC; wait until their pods, the PV and the serving are gone."""
        self.admin.delete(DGD, dgd, NAMESPACE)
        self.admin.delete("Job", job, NAMESPACE)
        self.admin.delete("PersistentVolumeClaim", pvc, NAMESPACE)

        def none_left(objs: dict[str, Obj]) -> tuple[bool, str]:
            return not objs, f"{len(objs)} left"

        self.admin.wait_for(Watch(DGD, NAMESPACE, name=dgd), none_left, awaited="DGD gone", timeout=120)
        self.admin.wait_for(Watch("Pod", NAMESPACE), none_left, awaited="pods gone", timeout=120)
        self.admin.wait_for(Watch("PersistentVolumeClaim", NAMESPACE), none_left, awaited="PVC gone", timeout=120)

        def no_pv(objs: dict[str, Obj]) -> tuple[bool, str]:
            mine = [o for o in objs.values() if ((o.get("spec") or {}).get("claimRef") or {}).get(
                "namespace") == NAMESPACE]
            return not mine, f"{len(mine)} PVs of {NAMESPACE} left"

        self.admin.wait_for(Watch("PersistentVolume"), no_pv, awaited="PV gone", timeout=120)
        deadline = time.monotonic() + 60
        while (self.dynamo / dgd / "pids").exists() and time.monotonic() < deadline:
            time.sleep(0.1)  # the simulator stops the DGD's Dynamo processes after the DELETED event

    def experiment(self) -> Experiment:
        self.counter += 1
        dest = self.scratch / f"exp-{self.counter:02d}"
        exp = make_experiment(dest)
        workload = exp.exp_root / "user_workload.yaml"
        text = workload.read_text()
        text = re.sub(r"(?m)^(\s*kube_context:).*$", rf"\1 {self.cluster.context}", text)
        text = re.sub(r"(?m)^(\s*namespace:).*$", rf"\1 {NAMESPACE}", text)
        workload.write_text(text)
        return refresh(exp.exp_root)

    # -------------------------------------------------------------- A and B
    def harness(self, exp: Experiment, iteration: int, handoff: Path) -> RunResult:
        argv = [sys.executable, "-m", "pytest", f"--iter={iteration}", f"--handoff={handoff}",
                f"--kubeconfig={self.info.kubeconfig}", "-p", "no:cacheprovider",
                f"--reports-dir={exp.exp_root.parent.parent / 'reports'}", *self.harness_args]
        log = exp.exp_root.parent.parent / f"pytest-iter-{iteration}.log"
        result = run_measured(argv, self.env, CHECKOUT, log, "harness" if iteration == 0 else "harness-iter1")
        ledger_path = exp.exp_root / "artifacts" / f"deploy-iter-{iteration:03d}" / "deployment_ledger.json"
        with contextlib.suppress(OSError, ValueError):
            ledger = json.loads(ledger_path.read_text())
            result.extra["status"] = ledger.get("status")
            result.extra["smoke_timings"] = (ledger.get("smoke") or {}).get("timings")
            result.extra["steps"] = {s["name"]: s.get("duration_s") for s in ledger.get("steps") or []}
        if result.rc != 0:
            raise SystemExit(f"harness iteration {iteration} failed (rc {result.rc}); see {log}")
        return result

    def reference(self, names: dict[str, str]) -> RunResult:
        exp = self.experiment()
        inputs = exp.exp_root / "inputs"
        deploy_root = exp.exp_root / "artifacts" / "deploy-iter-000"
        applied = deploy_root / "applied_manifests"
        applied.mkdir(parents=True)
        # Step 1 as the procedure writes it (stable names), plus step 2's compatibility patch.
        shutil.copyfile(inputs / "user_provided_dgd.yaml", applied / "deploy.yaml")
        for kind in ("model-cache", "model-download"):
            text = (inputs / f"{kind}.yaml").read_text().replace(STORAGE_PLACEHOLDER, "standard")
            (applied / f"{kind}.yaml").write_text(text)
        env = {**self.env, "KUBE_CONTEXT": self.cluster.context, "NAMESPACE": NAMESPACE,
               "DEPLOY_ROOT": str(deploy_root), "DGD_NAME": names["dgd"], "SERVED_MODEL": names["model"],
               "FRONTEND_SERVICE": f"{names['dgd']}-frontend", "DOWNLOAD_JOB": names["job"],
               "LOCAL_PORT": str(_free_port())}
        log = exp.exp_root.parent.parent / "reference.log"
        result = run_measured(["bash", str(REFERENCE)], env, CHECKOUT, log, "reference")
        if result.rc != 0:
            raise SystemExit(f"reference procedure failed (rc {result.rc}); see {log}")
        return result


def _free_port() -> int:
    import socket  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def manifest_names(exp: Experiment) -> dict[str, str]:
    """Names from kind/metadata.name, never from file names."""
    inputs = exp.exp_root / "inputs"
    dgd = yaml.safe_load((inputs / "user_provided_dgd.yaml").read_text())
    job = next(d for d in yaml.safe_load_all((inputs / "model-download.yaml").read_text()) if d["kind"] == "Job")
    pvc = next(d for d in yaml.safe_load_all((inputs / "model-cache.yaml").read_text())
               if d["kind"] == "PersistentVolumeClaim")
    served = re.search(r"--served-model-name\s+([^\s\"']+)", json.dumps(dgd))
    return {"dgd": dgd["metadata"]["name"], "job": job["metadata"]["name"], "pvc": pvc["metadata"]["name"],
            "model": served.group(1) if served else ""}


def decompose(run: RunResult, entries: Sequence[AuditEntry], job: Reaction | None, ready: Reaction | None,
              listed: ListedTimes | None, names: dict[str, str]) -> dict[str, float]:
    """Split the harness's wall time: process start to its first request (interpreter, pytest,
    plugins, step 1), the two cluster-bound stretches (Job applied -> Complete written by the job
    controller; DGD applied -> Ready written by the operator), the chat answer to process exit
    (reports, teardown), and the rest (the harness's own requests, processing and reactions)."""
    first = next((e for e in entries if is_harness(e)), None)
    if first is None or job is None or ready is None or listed is None:
        return {}
    job_apply = last_harness_write(entries, "jobs", names["job"], job.event_at)
    dgd_apply = last_harness_write(entries, "dynamographdeployments", names["dgd"], ready.event_at)
    if job_apply is None or dgd_apply is None:
        return {}
    parts = {
        "start-up to first request": (first.received - run.since).total_seconds(),
        "cluster: job applied -> Complete": (job.event_at - job_apply.received).total_seconds(),
        "cluster: DGD applied -> Ready": (ready.event_at - dgd_apply.received).total_seconds(),
        "chat answered -> exit": (run.until - listed.chat_done).total_seconds(),
    }
    parts["harness's own work"] = run.wall_s - sum(parts.values())
    # The model-listed latency in two parts: the operator marks the DGD Ready only once the model is
    # listed, so the harness cannot ask before; after Ready it reacts, ends step 6, starts kubectl
    # port-forward (step 7) and asks /v1/models.
    parts["model listed: registration -> DGD Ready (cluster)"] = (ready.event_at - listed.registered).total_seconds()
    parts["model listed: DGD Ready -> harness /v1/models"] = (listed.harness_listed - ready.event_at).total_seconds()
    return {k: round(v, 3) for k, v in parts.items()}


# ---------------------------------------------------------------------------- report
def _med(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def summarise(pairs: list[tuple[RunResult, RunResult]], reactions: dict[str, list[float]],
              requests: dict[str, list[dict[str, int]]], rss: list[tuple[float, float]],
              evidence: list[str]) -> dict[str, Any]:
    a = [p[0].wall_s for p in pairs]
    b = [p[1].wall_s for p in pairs]
    ratios = [round(y / x, 2) for x, y in pairs_walls(pairs)]

    def per_verb(rows: list[dict[str, int]]) -> dict[str, float]:
        verbs = sorted({v for r in rows for v in r})
        return {v: statistics.median(r.get(v, 0) for r in rows) for v in verbs}

    ratio_median = _med(ratios)
    reaction_median = {k: _med(v) for k, v in reactions.items()}
    peak = round(max(r[0] for r in rss), 1) if rss else None
    result: dict[str, Any] = {
        "bench": "e2e", "pairs": len(pairs),
        "harness_median_s": _med(a), "reference_median_s": _med(b),
        "harness_walls_s": [round(x, 2) for x in a], "reference_walls_s": [round(x, 2) for x in b],
        "ratio_by_pair": ratios, "ratio_median": ratio_median,
        "reaction_median_s": reaction_median,
        "reaction_max_s": {k: round(max(v), 3) if v else None for k, v in reactions.items()},
        "reaction_samples": {k: len(v) for k, v in reactions.items()},
        "requests_median": {k: per_verb(v) for k, v in requests.items()},
        "peak_rss_mb": peak,
        "tree_maxrss_mb": round(max(r[1] for r in rss), 1) if rss else None,
        "evidence": evidence[:12],
    }
    ratio_ok = (ratio_median or 0.0) >= GOAL_RATIO
    react_ok = all(v is not None and v < GOAL_REACTION_S for v in reaction_median.values())
    rss_ok = (peak or 1e9) < GOAL_RSS_MB
    result["goals"] = {"ratio>=10": ratio_ok, "reaction<0.5s": react_ok, "rss<200MB": rss_ok}
    return result


def pairs_walls(pairs: list[tuple[RunResult, RunResult]]) -> list[tuple[float, float]]:
    return [(p[0].wall_s, p[1].wall_s) for p in pairs]


def print_table(r: dict[str, Any]) -> None:
    print(json.dumps(r))
    print(f"\nend to end over {r['pairs']} A/B pairs: harness median {r['harness_median_s']} s, reference median "
          f"{r['reference_median_s']} s, ratio by pair {r['ratio_by_pair']} (median {r['ratio_median']}x)")
    print("reaction latency (median / max, samples):")
    for k, v in r["reaction_median_s"].items():
        print(f"  {k:28s} {v} s / {r['reaction_max_s'][k]} s  (n={r['reaction_samples'][k]})")
    print("requests per iteration by verb (median):")
    for k, v in r["requests_median"].items():
        print(f"  {k:28s} {json.dumps(v)}  total {sum(v.values())}")
    print("where the harness's wall time goes (median s): " + json.dumps(r.get("harness_breakdown_median_s")))
    print(f"peak RSS of the pytest process {r['peak_rss_mb']} MB (ru_maxrss of its tree {r['tree_maxrss_mb']} MB)")
    print(f"load average (1 min) at start / end: {r.get('load_average_1m')}; bytecode cache {r.get('bytecode_cache')}")
    print(f"goals: {r['goals']}")


# ---------------------------------------------------------------------------- main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--name", default="benche2e", help="offline cluster name (context offline-NAME)")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the cluster up afterwards")
    parser.add_argument("--no-retire", action="store_true", help="skip the iteration-1 runs (retire wait)")
    parser.add_argument("--keep-env", action="store_true", help="keep PYTHONDONTWRITEBYTECODE for the harness")
    parser.add_argument("--harness-arg", action="append", default=[], metavar="ARG",
                        help="extra pytest argument for the harness runs (repeatable), e.g. "
                             "--harness-arg=--timeout-readiness=600")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    ensure_binaries(lambda _m: None)
    load_before = os.getloadavg()  # the figures depend on the machine's load: recorded with them
    scratch = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    bench = Bench(args.name, scratch, args.keep_env, args.harness_arg)
    bench.up()
    pairs: list[tuple[RunResult, RunResult]] = []
    reactions: dict[str, list[float]] = {"job complete": [], "DGD ready": [], "pods deleted": [],
                                         "model listed (mocker registration)": [],
                                         "model listed (frontend listing)": []}
    requests: dict[str, list[dict[str, int]]] = {"harness (deploy-suite)": [], "harness kubectl port-forward": [],
                                                 "reference (kubectl)": []}
    rss: list[tuple[float, float]] = []
    evidence: list[str] = []
    breakdown: dict[str, list[float]] = {}
    try:
        names: dict[str, str] = {}
        for index in range(args.pairs + 1):  # pair 0 is the warm-up (caches, .pyc), not counted
            exp = bench.experiment()
            names = names or manifest_names(exp)
            bench.reset(names["dgd"], names["job"], names["pvc"])
            a = bench.harness(exp, 0, exp.handoff0)
            entries = read_audit(bench.audit, a.since, a.until)
            listed = model_listed_times(bench.dynamo / names["dgd"] / "mocker.log",
                                        bench.dynamo / names["dgd"] / "frontend.log", names["model"])
            if not args.no_retire:
                handoff1 = stage_candidate(exp.exp_root, 1)
                a1 = bench.harness(exp, 1, handoff1)
                entries1 = read_audit(bench.audit, a1.since, a1.until)
            bench.reset(names["dgd"], names["job"], names["pvc"])
            b = bench.reference(names)
            ref_entries = read_audit(bench.audit, b.since, b.until)
            if index == 0:
                print(f"warm-up: harness {a.wall_s:.2f} s, reference {b.wall_s:.2f} s", flush=True)
                continue
            pairs.append((a, b))
            rss.append((a.peak_rss_mb, a.tree_maxrss_mb))
            job_r, dgd_r = job_reaction(entries, names["job"]), dgd_ready_reaction(entries, names["dgd"])
            parts = decompose(a, entries, job_r, dgd_r, listed, names)
            for key, value in parts.items():
                breakdown.setdefault(key, []).append(value)
            for reaction in (job_r, dgd_r, None if args.no_retire else retire_reaction(entries1, names["dgd"])):
                if reaction is not None:
                    reactions[reaction.wait].append(reaction.latency_s)
                    evidence.append(f"pair {index} {reaction.wait}: {reaction.latency_s:.3f} s "
                                    f"({reaction.event} -> {reaction.action})")
            if listed is not None:
                reactions["model listed (mocker registration)"].append(
                    (listed.harness_listed - listed.registered).total_seconds())
                reactions["model listed (frontend listing)"].append(
                    (listed.harness_listed - listed.frontend_listed).total_seconds())
            requests["harness (deploy-suite)"].append(count_verbs(entries, is_harness))
            requests["harness kubectl port-forward"].append(count_verbs(entries, is_kubectl))
            requests["reference (kubectl)"].append(count_verbs(ref_entries, is_kubectl))
            print(f"pair {index}: harness {a.wall_s:.2f} s (steps {a.extra.get('steps')}, smoke "
                  f"{a.extra.get('smoke_timings')}), reference {b.wall_s:.2f} s, ratio {b.wall_s / a.wall_s:.1f}x, "
                  f"peak RSS {a.peak_rss_mb:.0f} MB", flush=True)
        bench.reset(names["dgd"], names["job"], names["pvc"])
    finally:
        if not args.keep_cluster:
            bench.cluster.down()
    result = summarise(pairs, reactions, requests, rss, evidence)
    result["harness_breakdown_median_s"] = {k: _med(v) for k, v in breakdown.items()}
    result["command"] = "python bench/bench_e2e.py " + " ".join(sys.argv[1:])
    result["load_average_1m"] = {"start": round(load_before[0], 2), "end": round(os.getloadavg()[0], 2)}
    result["bytecode_cache"] = "off (PYTHONDONTWRITEBYTECODE kept)" if args.keep_env and os.environ.get(
        "PYTHONDONTWRITEBYTECODE") else "on"
    print_table(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
