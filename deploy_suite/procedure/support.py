"""Step 4: the support manifests in the procedure's order (model-cache, model-download,
model-validate), or in the user's own sequence when the handoff gives one (``support_order``):
claims bound, Jobs complete, a failed Job's logs kept. The order followed, and whose it is, is
recorded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from deploy_suite import clock, yamlio
from deploy_suite.access.kube import Kube, Obj
from deploy_suite.constants import LABEL_JOB_NAME
from deploy_suite.errors import Forbidden, KubeError, StepFailure, WaitTimeout
from deploy_suite.judges import jobs
from deploy_suite.procedure import waits
from deploy_suite.procedure.context import StepContext
from deploy_suite.procedure.retire import Progress, quiet
from deploy_suite.record.ledger import Ledger, redact
from deploy_suite.vocab import FailureCategory, TriageCategory

SUPPORT_ORDER = ("model-cache", "model-download", "model-validate")


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
        return asdict(self)


@dataclass
class Support:
    """Step 4: the support manifests applied (EXP_ROOT-relative), their Jobs and claims; or the
    diagnostic of the Job that failed."""

    applied: list[str] = field(default_factory=list)
    jobs: list[JobResult] = field(default_factory=list)
    pvcs: dict[str, str | None] = field(default_factory=dict)
    failure: dict[str, Any] | None = None
    # The types in the order followed, and whose order it is (ORDER_PROCEDURE or ORDER_HANDOFF).
    order: dict[str, Any] = field(default_factory=dict)
    limitations: list[str] = field(default_factory=list)  # claims whose binding mode could not be read

    def record(self, ledger: Ledger) -> Mapping[str, Any]:
        for limitation in self.limitations:
            ledger.add_limitation(limitation)
        if self.failure is not None:
            ledger.add_diagnostic(self.failure)
            return {}
        if not self.applied:
            return {}
        return {"order": self.order, "applied": self.applied, "jobs": [j.as_dict() for j in self.jobs],
                "pvcs": self.pvcs}


ORDER_PROCEDURE = "procedure"  # model-cache, model-download, model-validate
ORDER_HANDOFF = "handoff support_order"  # the user's deployment instructions


def applied_support_order(paths: Mapping[str, Path], order: Sequence[str] = ()) -> list[tuple[str, Path]]:
    """The handed-off support manifests in the user's order when given (settings judged it names each
    handed-off type once), else the procedure's."""
    return [(k, paths[k]) for k in (order or SUPPORT_ORDER) if k in paths]


def names_of(docs: Sequence[Any], kind: str) -> list[str]:
    """Names come from each manifest's kind/metadata.name, never from its file name."""
    return [str(d["metadata"]["name"]) for d in docs if isinstance(d, dict) and d.get("kind") == kind]


def wait_pvcs_bound(kube: Kube, namespace: str, names: Sequence[str], timeout: float,
                    on_progress: Progress = quiet) -> None:
    """Each claim Bound; its provisioner's final word (a class that does not exist, an access mode
    refused) stops the wait at once, blocked with the claim's class (:class:`waits.ClaimBound`)."""
    for name in names:
        kube.wait(waits.ClaimBound(namespace, name), timeout=timeout, on_progress=on_progress)


def binding_modes(kube: Kube, namespace: str, names: Sequence[str]) -> dict[str, str | None]:
    """Each claim's volume binding mode, from its StorageClass (``Immediate`` without one, or when
    the class is gone); None when this identity may not read the class."""
    out: dict[str, str | None] = {}
    for name in names:
        pvc = kube.get_or_none("PersistentVolumeClaim", name, namespace) or {}
        cls = (pvc.get("spec") or {}).get("storageClassName")
        try:
            found = kube.get_or_none("StorageClass", cls) if cls else None
        except Forbidden:
            out[name] = None
            continue
        out[name] = str((found or {}).get("volumeBindingMode") or "Immediate")
    return out


def immediate_claims(kube: Kube, namespace: str, names: Sequence[str], unread: list[str] | None = None) -> list[str]:
    """Claims that bind on their own, before any pod uses them. A WaitForFirstConsumer claim stays
    Pending until a pod that uses it is scheduled (docs/procedure.md, step 4), so it is never
    awaited; nor is one whose class this identity may not read: its mode is unknown, the pods bind
    it, and a claim that never binds is judged where they wait. Those are added to ``unread``."""
    modes = binding_modes(kube, namespace, names)
    for name, mode in modes.items():
        if mode is None and unread is not None:
            unread.append(f"PVC {name}: its storage class may not be read by this identity (forbidden), so its "
                          "binding mode is unknown: not awaited as Immediate in step 4; the pods that use it bind it")
    return [name for name, mode in modes.items() if mode not in {None, "WaitForFirstConsumer"}]


class Bounds(NamedTuple):
    """A support Job's bounds: the Job's own, and a claim its pod waits on (still being bound)."""

    job_s: float
    claim_s: float = 600.0


def run_job(kube: Kube, namespace: str, job: str, kind: str, bounds: Bounds, logs_dir: Path,
            on_progress: Progress = quiet) -> JobResult:
    """Wait for a Job (:class:`waits.JobComplete`; a pod held on claims still being bound waits up
    to ``bounds.claim_s``); a failed one fails fast with its pod's last log lines kept under logs/
    and its cause named from them (:func:`named_failure`)."""
    started = clock.monotonic()
    try:
        kube.wait(waits.JobComplete(kube, namespace, job, kind, bounds.claim_s), timeout=bounds.job_s,
                  on_progress=on_progress)
    except StepFailure as exc:
        if exc.category != FailureCategory.JOB_FAILED:
            raise
        raise named_failure(kube, namespace, job, kind, exc, logs_dir) from exc
    except WaitTimeout as exc:
        raise StepFailure(f"{kind} job {job} timed out: {exc}", category=FailureCategory.JOB_TIMEOUT) from exc
    return JobResult(kind, job, "Complete", ["Complete"], round(clock.monotonic() - started, 3),
                     completed_at=clock.iso_now())


# The parties a failed Job's pods can name (a dependency, the platform): the step blocks with that
# class, not the Job's own (docs/procedure.md, step 4).
_PARTIES = frozenset({TriageCategory.DEPENDENCY, TriageCategory.PLATFORM})


def named_failure(kube: Kube, namespace: str, job: str, kind: str, exc: StepFailure, logs_dir: Path) -> StepFailure:
    """A failed Job's StepFailure with its cause named from its pods' words (:func:`jobs.triage_job`):
    a full disk is the platform's, a token or a cache the pod may not write a dependency (the step
    blocks with that class); anything else stays the Job's own failure (class ``job``)."""
    pods, excerpt = _job_logs(kube, namespace, job, logs_dir)
    cause = jobs.triage_job(job, kube.get_or_none("Job", job, namespace) or _failed(exc), pods,
                            {str(p["metadata"]["name"]): {"": excerpt.splitlines()} for p in pods[:1]})
    if cause is None or cause.category not in _PARTIES:
        return StepFailure(f"{exc}; last log lines: {excerpt[-600:] or 'none'}", exc.category, exc.evidence,
                           log_excerpt=excerpt)
    return StepFailure(f"{kind} job {job} failed: {cause.diagnosis}; last log lines: {excerpt[-600:] or 'none'}",
                       cause.category, [*exc.evidence, *cause.evidence[1:]], log_excerpt=excerpt)


def _failed(exc: StepFailure) -> Obj:
    """A Job seen Failed by its wait, when it can no longer be read (deleted since)."""
    return {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "Failed",
                                       "message": " ".join(exc.evidence)}]}}


def _job_logs(kube: Kube, namespace: str, job: str, logs_dir: Path, lines: int = 40) -> tuple[list[Obj], str]:
    """The Job's pods, newest first, and the newest one's last log lines (redacted, kept under logs/)."""
    try:
        found, _ = kube.list_items("Pod", namespace, label_selector=f"{LABEL_JOB_NAME}={job}")
    except KubeError:
        return [], ""
    if not found:
        return [], ""
    pods: list[Obj] = sorted(found, key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)
    pod = pods[0]
    try:
        text = kube.pod_log(pod["metadata"]["name"], namespace, tail=lines)
    except KubeError as exc:
        text = f"(logs unavailable: {exc})"
    # A download Job's log is where a token ends up when a script echoes its environment.
    text = redact(text)
    logs_dir.mkdir(parents=True, exist_ok=True)  # logs/ exists only when a failure log is kept
    (logs_dir / f"job-{job}.log").write_text(text)
    return pods, text.strip()


def support(run: StepContext, kube: Kube) -> Support:
    """Apply model-cache, model-download, model-validate in that order (those handed over), or in the
    handoff's ``support_order``; each manifest's claims that bind on their own are awaited and its
    Jobs complete before the next is applied (WaitForFirstConsumer claims, and claims whose class
    cannot be read, bind with their first pod)."""
    given = run.settings.support_order
    order = applied_support_order(run.manifests, given)
    out = Support(order={"types": [kind for kind, _ in order], "by": ORDER_HANDOFF if given else ORDER_PROCEDURE})
    t = run.settings.timeouts
    for kind, path in order:
        docs = yamlio.load_all(path, run.rel(path))
        kube.apply_documents(docs, run.namespace, run.rel(path))
        claims = names_of(docs, "PersistentVolumeClaim")
        out.pvcs.update(dict.fromkeys(claims))
        try:
            wait_pvcs_bound(kube, run.namespace, immediate_claims(kube, run.namespace, claims, out.limitations),
                            t.pvc_bound_s, on_progress=run.recorder.progress)
        except WaitTimeout as exc:
            raise StepFailure(f"model-cache PVC never bound: {exc}; fix the storage class or provisioner "
                              "(a dependency: waiting longer does not help)", TriageCategory.DEPENDENCY) from exc
        bound = t.job_download_s if kind != "model-validate" else t.job_validate_s
        for job in names_of(docs, "Job"):
            try:
                out.jobs.append(run_job(kube, run.namespace, job, kind, Bounds(bound, t.pvc_bound_s),
                                        run.deploy_root / "logs", on_progress=run.recorder.progress))
            except StepFailure as exc:
                out.failure = {"step": "step4_support_manifests", "job": job, "message": str(exc),
                               "log_excerpt": exc.log_excerpt[-2000:],
                               "log_file": run.rel(run.deploy_root / "logs" / f"job-{job}.log")}
                exc.result = out
                raise
    out.applied = [run.rel(p) for _, p in order]
    out.pvcs = {c: ((kube.get_or_none("PersistentVolumeClaim", c, run.namespace) or {}).get("status") or {})
                .get("phase") for c in out.pvcs}
    return out


