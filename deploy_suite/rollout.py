"""Steps 3 to 6: retire the previous iteration, support jobs, apply the DGD, readiness.

All waits are watch-based (:meth:`Kube.wait_for`, :meth:`Kube.wait_multi`) under configurable
deadlines; each reports a live one-line state through ``on_progress`` and a timeout names what was
awaited, for how long and the last state seen. Pending pods are triaged from their scheduler
events (:mod:`deploy_suite.triage`) the moment the scheduler gives a verdict: a manifest that can
never schedule stops at once as a failed attempt, contention waits, a missing dependency stops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from deploy_suite import clock, triage
from deploy_suite.dgd import Dgd, pod_gpus
from deploy_suite.errors import Forbidden, KubeError, StepFailure, WaitTimeout
from deploy_suite.kube import DGD, Kube, Obj, WatchSpec

Progress = Callable[[str], None]
DGD_LABEL = "nvidia.com/dynamo-graph-deployment-name"


def _quiet(_m: str) -> None:
    return None


# ---------------------------------------------------------------------------- step 3
@dataclass
class RetireResult:
    dgd: str
    namespace: str
    kube_context: str
    deleted_at: str
    existed: bool
    pods_gone_at: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def retire_previous(kube: Kube, namespace: str, dgd_name: str, timeout: float,
                    on_progress: Progress = _quiet) -> RetireResult:
    """Delete only the previous DGD, by exact name, then wait for it and its pods to be gone
    (``timeout`` bounds each wait, as the spec's two 10-minute waits). PVCs, Jobs, namespaces and
    secrets are kept."""
    existed = kube.delete(DGD, dgd_name, namespace)
    result = RetireResult(dgd_name, namespace, kube.context, clock.iso_now(), existed)

    def dgd_gone(objs: dict[str, Obj]) -> tuple[bool, str]:
        obj = objs.get(f"{namespace}/{dgd_name}")
        return obj is None, "deleted" if obj is None else \
            f"dgd/{dgd_name} still present (deletionTimestamp {obj['metadata'].get('deletionTimestamp')})"

    kube.wait_for(DGD, dgd_gone, awaited=f"dgd/{dgd_name} to disappear", timeout=timeout,
                  namespace=namespace, name=dgd_name, on_progress=on_progress)

    def pods_gone(objs: dict[str, Obj]) -> tuple[bool, str]:
        names = sorted(o["metadata"]["name"] for o in objs.values())
        return not names, f"{len(names)} pods left: {', '.join(names[:4])}" if names else "no pods left"

    kube.wait_for("Pod", pods_gone, awaited=f"pods labelled {DGD_LABEL}={dgd_name} to be deleted",
                  timeout=timeout, namespace=namespace, label_selector=f"{DGD_LABEL}={dgd_name}",
                  on_progress=on_progress)
    result.pods_gone_at = clock.iso_now()
    return result


# ---------------------------------------------------------------------------- step 4
@dataclass
class JobResult:
    type: str
    job: str
    outcome: str  # Complete | Failed
    conditions: list[str] = field(default_factory=list)
    seconds: float = 0.0
    log_file: str | None = None
    log_excerpt: str = ""
    completed_at: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def jobs_in(path: Path) -> list[str]:
    """Job names come from each manifest's kind/metadata.name, never from its file name."""
    return [str(d["metadata"]["name"]) for d in yaml.safe_load_all(path.read_text())
            if isinstance(d, dict) and d.get("kind") == "Job"]


def claims_in(path: Path) -> list[str]:
    return [str(d["metadata"]["name"]) for d in yaml.safe_load_all(path.read_text())
            if isinstance(d, dict) and d.get("kind") == "PersistentVolumeClaim"]


def wait_pvcs_bound(kube: Kube, namespace: str, names: Sequence[str], timeout: float,
                    on_progress: Progress = _quiet) -> None:
    for name in names:
        def bound(objs: dict[str, Obj], name: str = name) -> tuple[bool, str]:
            phase = (objs.get(f"{namespace}/{name}") or {}).get("status", {}).get("phase")
            return phase == "Bound", f"pvc/{name} phase={phase}"

        kube.wait_for("PersistentVolumeClaim", bound, awaited=f"pvc/{name} Bound", timeout=timeout,
                      namespace=namespace, name=name, on_progress=on_progress)


def immediate_claims(kube: Kube, namespace: str, names: Sequence[str]) -> list[str]:
    """Claims that should bind on their own (their class is not WaitForFirstConsumer); a claim
    whose class cannot be read is treated as immediate, so the bounded wait still guards it."""
    out = []
    for name in names:
        pvc = kube.get_or_none("PersistentVolumeClaim", name, namespace) or {}
        cls = (pvc.get("spec") or {}).get("storageClassName")
        mode = "Immediate"
        if cls:
            try:
                mode = (kube.get_or_none("StorageClass", cls) or {}).get("volumeBindingMode", "Immediate")
            except Forbidden:
                mode = "Immediate"
        if mode != "WaitForFirstConsumer":
            out.append(name)
    return out


def run_job(kube: Kube, namespace: str, job: str, kind: str, timeout: float, logs_dir: Path,
            on_progress: Progress = _quiet) -> JobResult:
    """Wait for a Job: a condition containing Failed fails fast (with its pod's last log lines
    kept under logs/); Complete (alone or beside SuccessCriteriaMet) continues. The Job's pods are
    watched too: one the scheduler can never place (unbound claim, taint, selector) stops at once
    with the scheduler's words instead of running into the long download bound."""
    started = clock.monotonic()
    triaged: dict[str, str] = {}

    def state(objs: dict[str, dict[str, Obj]]) -> tuple[bool, str]:
        obj = objs["job"].get(f"{namespace}/{job}") or {}
        conds = (obj.get("status") or {}).get("conditions") or []
        true = [str(c["type"]) for c in conds if c.get("status") == "True"]
        joined = " ".join(true)
        if "Failed" in joined:
            raise _JobFailed(joined)
        for pod in objs["pods"].values():
            if not _unschedulable(pod):
                continue
            name = pod["metadata"]["name"]
            sched = next(c for c in pod["status"]["conditions"] if c.get("type") == "PodScheduled")
            stamp = f"{sched.get('lastTransitionTime')}{sched.get('message')}"
            if triaged.get(name) == stamp:
                continue
            triaged[name] = stamp
            verdict = triage.triage_pending(pod, kube.events_for(name, namespace))
            if verdict is not None and not verdict.can_wait:
                raise StepFailure(f"{kind} job {job} cannot run: {verdict.diagnosis}", verdict.category,
                                  verdict.evidence)
        st = obj.get("status") or {}
        return "Complete" in joined, (f"job/{job} conditions: {joined}" if true else
                                      f"job/{job} active={st.get('active', 0)} failed={st.get('failed', 0)}")

    watches = {"job": WatchSpec("Job", namespace, field_selector=f"metadata.name={job}"),
               "pods": WatchSpec("Pod", namespace, label_selector=f"job-name={job}")}
    try:
        kube.wait_multi(watches, state, awaited=f"job/{job} Complete", timeout=timeout, on_progress=on_progress)
    except _JobFailed as exc:
        excerpt, _log_file = _job_logs(kube, namespace, job, logs_dir)
        raise StepFailure(f"{kind} job {job} failed (conditions: {exc}); last log lines: {excerpt[-600:] or 'none'}",
                          category="job-failed", evidence=[f"job/{job}: {exc}"], log_excerpt=excerpt) from exc
    except WaitTimeout as exc:
        raise StepFailure(f"{kind} job {job} timed out: {exc}", category="job-timeout") from exc
    return JobResult(kind, job, "Complete", ["Complete"], round(clock.monotonic() - started, 3),
                     completed_at=clock.iso_now())


class _JobFailed(StepFailure):
    pass


def _job_logs(kube: Kube, namespace: str, job: str, logs_dir: Path, lines: int = 40) -> tuple[str, str | None]:
    try:
        pods, _ = kube.list_items("Pod", namespace, label_selector=f"job-name={job}")
    except KubeError:
        return "", None
    if not pods:
        return "", None
    pod = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))[-1]
    try:
        text = kube.pod_log(pod["metadata"]["name"], namespace, tail=lines)
    except KubeError as exc:
        text = f"(logs unavailable: {exc})"
    logs_dir.mkdir(parents=True, exist_ok=True)  # logs/ exists only when a failure log is kept
    path = logs_dir / f"job-{job}.log"
    path.write_text(text)
    return text.strip(), str(path)


# ---------------------------------------------------------------------------- step 5
def apply_deploy(kube: Kube, namespace: str, deploy_path: Path, display: str) -> list[str]:
    """Apply every document of applied_manifests/deploy.yaml (and nothing else)."""
    applied = kube.apply_file(deploy_path, namespace, display=display)
    return [f"{o.get('kind')}/{o.get('metadata', {}).get('name')}" for o in applied]


# ---------------------------------------------------------------------------- step 6
@dataclass
class Readiness:
    state: str = "waiting"  # ready | failed-deploy | dependency | crash | failed | timeout
    dgd_state: str | None = None
    ready_condition: str | None = None
    ready_reason: str | None = None
    components: dict[str, Any] = field(default_factory=dict)
    allocated_at: str | None = None
    contention: list[dict[str, Any]] = field(default_factory=list)
    diagnosis: str = ""
    evidence: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _unschedulable(pod: Obj) -> bool:
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _gpus(pod: Obj) -> int:
    return pod_gpus(pod.get("spec") or {}, "nvidia.com/gpu") or 0


def wait_ready(kube: Kube, namespace: str, dgd: Dgd, timeout: float, *, frontend_expected: bool,
               on_progress: Progress = _quiet, on_allocated: Callable[[str], None] | None = None,
               contention_recheck_s: float = 30.0) -> Readiness:
    """DGD Ready with state successful and observedGeneration current; every component x replica
    Running and ready; pending pods triaged as soon as the scheduler says why."""
    started = clock.monotonic()
    out = Readiness()
    expected = {c.name: c.replicas * c.node_count for c in dgd.components}
    total_expected = sum(expected.values())
    try:
        nodes: list[Obj] | None = kube.list_items("Node")[0]
    except Forbidden:
        nodes = None
    triaged: dict[str, str] = {}

    def judge(state: dict[str, dict[str, Obj]]) -> tuple[bool, str]:
        pods = list(state["pods"].values())
        obj = state["dgd"].get(f"{namespace}/{dgd.name}")
        for p in pods:
            if out.allocated_at is None and p["spec"].get("nodeName") and _gpus(p) > 0:
                out.allocated_at = clock.iso_now()
                if on_allocated is not None:
                    on_allocated(out.allocated_at)
            crash = triage.triage_containers(p)
            if crash is not None:
                out.state, out.diagnosis, out.evidence = "crash", crash.diagnosis, crash.evidence
                raise StepFailure(crash.diagnosis, "crash", crash.evidence, failed_attempt=True)
            if _unschedulable(p):
                name = p["metadata"]["name"]
                sched = next(c for c in p["status"]["conditions"] if c.get("type") == "PodScheduled")
                stamp = f"{sched.get('lastTransitionTime')}{sched.get('message')}"
                if triaged.get(name) == stamp:
                    continue
                triaged[name] = stamp
                verdict = triage.triage_pending(p, kube.events_for(name, namespace), nodes, contention_recheck_s)
                if verdict is None:
                    continue
                if verdict.category in {triage.CONTENTION, triage.UNKNOWN}:
                    out.contention.append({**verdict.as_dict(), "at": clock.iso_now(),
                                           "next_check_at_s": verdict.next_check_s})
                    continue
                out.state, out.diagnosis, out.evidence = verdict.category, verdict.diagnosis, verdict.evidence
                raise StepFailure(verdict.diagnosis, verdict.category, verdict.evidence,
                                  failed_attempt=verdict.category == triage.FAILED_DEPLOY)
        ready_pods = [p for p in pods if _ready(p)]
        st = (obj or {}).get("status") or {}
        cond: dict[str, Any] = next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), {})
        out.dgd_state, out.ready_condition, out.ready_reason = st.get("state"), cond.get("status"), cond.get("reason")
        if st.get("state") == "failed":
            why = cond.get("message") or cond.get("reason")
            out.state, out.diagnosis = "failed", f"DGD reconciliation error: {why}"
            raise StepFailure(out.diagnosis, "reconcile-error", [f"dgd/{dgd.name} status: {st.get('state')} "
                                                                 f"{cond.get('reason')}: {cond.get('message')}"])
        gen_ok = obj is not None and st.get("observedGeneration") == obj["metadata"].get("generation")
        done = (obj is not None and st.get("state") == "successful" and cond.get("status") == "True" and gen_ok
                and len(ready_pods) >= total_expected)
        desc = (f"dgd/{dgd.name} state={st.get('state')} Ready={cond.get('status')} "
                f"({cond.get('reason') or '-'}), pods ready {len(ready_pods)}/{total_expected}")
        if out.contention:
            desc += f"; contention: {out.contention[-1]['diagnosis'][:120]}"
        return done, desc

    watches = {"dgd": WatchSpec(DGD, namespace, field_selector=f"metadata.name={dgd.name}"),
               "pods": WatchSpec("Pod", namespace, label_selector=f"{DGD_LABEL}={dgd.name}")}
    try:
        state = kube.wait_multi(watches, judge, awaited=f"dgd/{dgd.name} Ready with all pods ready", timeout=timeout,
                                on_progress=on_progress)
    except WaitTimeout as exc:
        out.state, out.diagnosis = "timeout", str(exc)
        raise StepFailure(str(exc), "timeout") from exc
    pods = list(state["pods"].values())
    for comp in dgd.components:
        sel = f"{dgd.name}-{comp.name.lower()}"
        mine = [p for p in pods if (p["metadata"].get("labels") or {}).get("nvidia.com/dynamo-component") == comp.name
                or (p["metadata"].get("labels") or {}).get("nvidia.com/selector") == sel]
        out.components[comp.name] = {"expected": expected[comp.name], "ready": sum(_ready(p) for p in mine),
                                     "pods": sorted(p["metadata"]["name"] for p in mine),
                                     "nodes": sorted({p["spec"].get("nodeName", "") for p in mine})}
    if frontend_expected and kube.get_or_none("Service", f"{dgd.name}-frontend", namespace) is None:
        out.state, out.diagnosis = "failed", f"frontend Service {dgd.name}-frontend is missing"
        raise StepFailure(out.diagnosis, "missing-frontend-service")
    out.state = "ready"
    out.seconds = round(clock.monotonic() - started, 3)
    return out


def config_engagement(kube: Kube, namespace: str, dgd: Dgd) -> list[dict[str, Any]]:
    """The deployed pods' spec fields that carry the candidate's knobs (image, args, GPUs, selector)."""
    pods, _ = kube.list_items("Pod", namespace, label_selector=f"{DGD_LABEL}={dgd.name}")
    evidence = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        main = pod["spec"]["containers"][0]
        with contextlib.suppress(StopIteration):
            main = next(c for c in pod["spec"]["containers"] if c.get("name") == "main")
        evidence.append({
            "pod": pod["metadata"]["name"],
            "component": (pod["metadata"].get("labels") or {}).get("nvidia.com/dynamo-component"),
            "node": pod["spec"].get("nodeName"),
            "image": main.get("image"),
            "command": main.get("command"),
            "args": main.get("args"),
            "gpus": _gpus(pod),
            "nodeSelector": pod["spec"].get("nodeSelector"),
        })
    return evidence


def applied_support_order(paths: Mapping[str, Path]) -> list[tuple[str, Path]]:
    return [(k, paths[k]) for k in ("model-cache", "model-download", "model-validate") if k in paths]
