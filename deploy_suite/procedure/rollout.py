"""Steps 3 to 6: retire the previous iteration, support manifests and their Jobs, apply, readiness.

Each step is one function returning a typed result (``runstate.StepResult``): :func:`retire`,
:func:`support`, :func:`apply`, :func:`readiness`. Every wait is
the one list+watch loop with a named condition (:mod:`deploy_suite.judges.conditions`) under the
settings' bound; each reports a live one-line state through ``on_progress``, and a timeout names
what was awaited, for how long and the last state seen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deploy_suite import clock, yamlio
from deploy_suite.access.kube import DGD, Kube, Obj
from deploy_suite.constants import DGD_KIND, LABEL_JOB_NAME
from deploy_suite.errors import Forbidden, KubeError, PlatformFault, StepBlocked, StepFailure, WaitTimeout
from deploy_suite.judges import conditions, ownership
from deploy_suite.model.dgd import Dgd, from_documents, load_dgd
from deploy_suite.procedure import deployed, evidence
from deploy_suite.procedure.runstate import RunState
from deploy_suite.procedure.workspace import PreviousDeployment
from deploy_suite.record import experiment, resume
from deploy_suite.record.ledger import Ledger, redact, write_torn_down_at

Progress = Callable[[str], None]
SUPPORT_ORDER = ("model-cache", "model-download", "model-validate")


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
    # deleted | already-gone | own-dgd-live (deploy_suite/record/resume.py decides whose the live DGD is)
    action: str = "deleted"
    torn_down_at: str | None = None  # what the retired ledger says now (None: not written by us)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Retired:
    """Step 3: what was retired (None at iteration 0) and the manifest.yaml context change."""

    context_change: dict[str, Any] | None = None
    retired: RetireResult | None = None
    ledger_file: str | None = None  # the retired iteration's ledger, EXP_ROOT-relative

    def record(self, ledger: Ledger) -> Mapping[str, Any]:
        evidence: dict[str, Any] = {}
        if self.context_change is not None:
            evidence["manifest_context_update"] = self.context_change
        if self.retired is not None:
            section = {**self.retired.as_dict(), "ledger": self.ledger_file}
            earlier = ledger.data.get("retired_previous")
            if self.retired.action != "deleted" and isinstance(earlier, dict) and earlier.get("existed"):
                # A rerun keeps the record of the deletion an earlier run of this iteration did.
                section = {**earlier, "rerun": section}
            ledger.set_section("retired_previous", section)
            evidence.update(self.retired.as_dict())
        return evidence


def retire_previous(kube: Kube, namespace: str, dgd_name: str, timeout: float,
                    on_progress: Progress = _quiet, on_deleted: Callable[[RetireResult], None] | None = None
                    ) -> RetireResult:
    """Delete only the previous DGD, by exact name, then wait for it and its pods to be gone
    (``timeout`` bounds each wait). PVCs, Jobs, namespaces and secrets are kept. ``on_deleted``
    hears of the deletion before the waits (the run saves it: a rerun must know it deleted). The
    caller has decided the DGD is the previous iteration's and this experiment's (:func:`retire`)."""
    existed = kube.delete(DGD, dgd_name, namespace)
    result = RetireResult(dgd_name, namespace, kube.context, clock.iso_now(), existed)
    if on_deleted is not None:
        on_deleted(result)
    _wait_gone(kube, result, timeout, on_progress)
    return result


def _wait_gone(kube: Kube, result: RetireResult, timeout: float, on_progress: Progress) -> None:
    kube.wait(conditions.dgd_gone(result.namespace, result.dgd), timeout=timeout, on_progress=on_progress)
    kube.wait(conditions.dgd_pods_gone(result.namespace, result.dgd), timeout=timeout, on_progress=on_progress)
    result.pods_gone_at = clock.iso_now()


def retire(run: RunState, kube: Kube) -> Retired:
    """Record the effective context in manifest.yaml (before the first mutation of the run), then
    retire the previous iteration's DGD in its own context and write ``torn_down_at`` in its ledger
    once its pods are gone. Idempotent on a rerun: a DGD already gone is recorded, not deleted, and
    its ledger's ``torn_down_at`` left alone; a live DGD that is this iteration's own (its uid is
    the one step 5 recorded) is kept. A live DGD is deleted only when both guards agree: its uid is
    the previous iteration's (``deploy_suite.record.resume``) and it carries the experiment's field manager
    (``deploy_suite.judges.ownership``); anything else blocks, untouched."""
    out = Retired(experiment.update_manifest_context(run.exp_root, kube.context))
    if out.context_change is not None:
        run.add_evidence(manifest_context_update=out.context_change)  # kept even if the retire fails
    prev = run.previous
    if prev is None:
        return out
    out.ledger_file = run.rel(prev.ledger_path)
    owned = prev.kube_context != kube.context
    prev_kube = Kube(prev.kube_context, run.settings.kubeconfig, on_command=run.record_command,
                     field_manager=kube.field_manager) if owned else kube
    try:
        out.retired = _retire_checked(run, prev_kube, prev, out.ledger_file)
    finally:
        if owned:
            prev_kube.close()
    return out


def _retire_checked(run: RunState, kube: Kube, prev: PreviousDeployment, ledger_file: str) -> RetireResult:
    timeout = run.settings.timeouts.retire_s
    live = kube.get_or_none(DGD, prev.dgd_name, prev.namespace)
    owner = resume.whose(live, resume.recorded_uid(run.ledger.data), prev.applied_uid)
    _refuse_unless_ours(live, owner, ownership.judge(live, prev.dgd_name, prev.namespace, kube.field_manager),
                        prev, run.settings.iteration - 1)
    if owner == "previous":
        def deleted(result: RetireResult) -> None:
            run.ledger.set_section("retired_previous", {**result.as_dict(), "ledger": ledger_file})
            run.save()

        result = retire_previous(kube, prev.namespace, prev.dgd_name, timeout, run.progress, deleted)
    else:
        action = "own-dgd-live" if owner == "mine" else "already-gone"
        result = RetireResult(prev.dgd_name, prev.namespace, kube.context, "", False, action=action)
        if owner is None:
            _wait_gone(kube, result, timeout, run.progress)  # its pods may still be terminating
    earlier = run.ledger.data.get("retired_previous") or {}
    # torn_down_at when the pods are gone, written once: by this run's deletion, or by the rerun of
    # one that deleted and was killed before it could write it (its record was saved at the delete).
    ours = owner == "previous" or (owner is None and earlier.get("existed") and not earlier.get("pods_gone_at"))
    if ours and prev.torn_down_at is None and result.pods_gone_at:
        write_torn_down_at(prev.ledger_path, result.pods_gone_at)
        result.torn_down_at = result.pods_gone_at
    else:
        result.torn_down_at = prev.torn_down_at
        result.note = "torn_down_at left as the retired ledger records it"
    return result


def _refuse_unless_ours(live: Obj | None, owner: resume.Whose | None, found: ownership.Ownership,
                       prev: PreviousDeployment, previous_iteration: int) -> None:
    """Both guards of step 3, one message: the uid identity (README "Resume") and the field
    manager (README "Ownership"). A live DGD is deleted only when it passes both; this iteration's
    own is never deleted, so only the uid decides it is kept (step 5 re-checks its field manager)."""
    reasons = []
    if owner == "unknown":
        uid = ((live or {}).get("metadata") or {}).get("uid")
        reasons.append(f"it has uid {uid}, neither iteration {previous_iteration}'s ({prev.applied_uid}, its "
                       "ledger) nor this iteration's")
    if owner != "mine" and found.foreign:
        managers = ", ".join(found.managers) or "none"
        reasons.append(f"it was not created by this experiment (field managers: {managers})")
    if reasons:
        raise StepBlocked("ownership", f"DynamoGraphDeployment {prev.namespace}/{prev.dgd_name} is live and "
                          f"{'; '.join(reasons)}; step 3 refuses to delete it",
                          ownership.FIX if found.foreign else "if it is this experiment's to remove, delete it "
                          "yourself and rerun; otherwise choose another DGD name")


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
        return asdict(self)


@dataclass
class Support:
    """Step 4: the support manifests applied (EXP_ROOT-relative), their Jobs and claims; or the
    diagnostic of the Job that failed."""

    applied: list[str] = field(default_factory=list)
    jobs: list[JobResult] = field(default_factory=list)
    pvcs: dict[str, str | None] = field(default_factory=dict)
    failure: dict[str, Any] | None = None

    def record(self, ledger: Ledger) -> Mapping[str, Any]:
        if self.failure is not None:
            ledger.add_diagnostic(self.failure)
            return {}
        if not self.applied:
            return {}
        return {"applied": self.applied, "jobs": [j.as_dict() for j in self.jobs], "pvcs": self.pvcs}


def applied_support_order(paths: Mapping[str, Path]) -> list[tuple[str, Path]]:
    return [(k, paths[k]) for k in SUPPORT_ORDER if k in paths]


def names_of(docs: Sequence[Any], kind: str) -> list[str]:
    """Names come from each manifest's kind/metadata.name, never from its file name."""
    return [str(d["metadata"]["name"]) for d in docs if isinstance(d, dict) and d.get("kind") == kind]


def wait_pvcs_bound(kube: Kube, namespace: str, names: Sequence[str], timeout: float,
                    on_progress: Progress = _quiet) -> None:
    for name in names:
        kube.wait(conditions.pvc_bound(namespace, name), timeout=timeout, on_progress=on_progress)


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
    """Wait for a Job (:class:`conditions.JobComplete`); a failed one fails fast with its pod's
    last log lines kept under logs/."""
    started = clock.monotonic()
    try:
        kube.wait(conditions.JobComplete(kube, namespace, job, kind), timeout=timeout, on_progress=on_progress)
    except StepFailure as exc:
        if exc.category != "job-failed":
            raise
        excerpt = _job_logs(kube, namespace, job, logs_dir)
        raise StepFailure(f"{exc}; last log lines: {excerpt[-600:] or 'none'}", exc.category, exc.evidence,
                          log_excerpt=excerpt) from exc
    except WaitTimeout as exc:
        raise StepFailure(f"{kind} job {job} timed out: {exc}", category="job-timeout") from exc
    return JobResult(kind, job, "Complete", ["Complete"], round(clock.monotonic() - started, 3),
                     completed_at=clock.iso_now())


def _job_logs(kube: Kube, namespace: str, job: str, logs_dir: Path, lines: int = 40) -> str:
    try:
        pods, _ = kube.list_items("Pod", namespace, label_selector=f"{LABEL_JOB_NAME}={job}")
    except KubeError:
        return ""
    if not pods:
        return ""
    pod: Obj = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))[-1]
    try:
        text = kube.pod_log(pod["metadata"]["name"], namespace, tail=lines)
    except KubeError as exc:
        text = f"(logs unavailable: {exc})"
    # A download Job's log is where a token ends up when a script echoes its environment.
    text = redact(text)
    logs_dir.mkdir(parents=True, exist_ok=True)  # logs/ exists only when a failure log is kept
    (logs_dir / f"job-{job}.log").write_text(text)
    return text.strip()


def support(run: RunState, kube: Kube) -> Support:
    """Apply model-cache, model-download, model-validate in that order (those handed over); claims
    that bind on their own are awaited before any Job waits on them (WaitForFirstConsumer claims
    bind with their first pod); each Job must complete."""
    out = Support()
    order = applied_support_order(run.manifests)
    t = run.settings.timeouts
    for kind, path in order:
        docs = yamlio.load_all(path, run.rel(path))
        kube.apply_documents(docs, run.namespace, run.rel(path))
        claims = names_of(docs, "PersistentVolumeClaim")
        out.pvcs.update(dict.fromkeys(claims))
        try:
            wait_pvcs_bound(kube, run.namespace, immediate_claims(kube, run.namespace, claims), t.pvc_bound_s,
                            on_progress=run.progress)
        except WaitTimeout as exc:
            raise StepFailure(f"model-cache PVC never bound: {exc}; fix the storage class or provisioner "
                              "(a dependency: waiting longer does not help)", "dependency") from exc
        bound = t.job_download_s if kind != "model-validate" else t.job_validate_s
        for job in names_of(docs, "Job"):
            try:
                out.jobs.append(run_job(kube, run.namespace, job, kind, bound, run.deploy_root / "logs",
                                        on_progress=run.progress))
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


# ---------------------------------------------------------------------------- step 5
@dataclass
class Applied:
    """Step 5: the objects applied from deploy.yaml, the GPUs they request, how to clean up, and
    whose the DGD was just before the apply (``absent`` or ``ours``)."""

    applied: list[str]
    gpus_requested: int
    cleanup_command: str
    owner_before: str = "absent"

    def record(self, ledger: Ledger) -> Mapping[str, Any]:
        ledger.set_section("gpus_requested", self.gpus_requested)
        ledger.add_cleanup_command(self.cleanup_command)
        return {"applied": self.applied, "gpus_requested": self.gpus_requested, "dgd_before": self.owner_before}


def apply(run: RunState, kube: Kube) -> Applied:
    """Apply every document of applied_manifests/deploy.yaml (and nothing else). The budgets were
    judged in step 2; the DGD's ownership is read again right before the apply, so a same-named
    DGD someone created since step 2 is still never applied over."""
    path = run.manifests["deploy"]
    docs = yamlio.load_all(path, str(path))
    dgd = from_documents(docs, str(path))
    before = ownership.require_not_foreign(kube, run.namespace, dgd.name, "step 5 refuses to apply over it")
    try:
        applied = kube.apply_documents(docs, run.namespace, run.rel(path))
    except PlatformFault as exc:
        raise platform_blocked(exc, "the apply") from exc
    _record_own_apply(run, kube, dgd, applied)
    return Applied([f"{o.get('kind')}/{o.get('metadata', {}).get('name')}" for o in applied], dgd.total_gpus(),
                   f"kubectl --context {kube.context} delete dynamographdeployment {dgd.name} -n {run.namespace}",
                   before.state)


def _record_own_apply(run: RunState, kube: Kube, dgd: Dgd, applied: Sequence[Obj]) -> None:
    """Saved at once, before the step ends: a rerun after a kill must recognise this DGD as its own
    (deploy_suite/record/resume.py). A re-apply after a teardown resets ``torn_down_at`` and closes the
    allocation interval it ended; the next bound GPU pod opens a new one (step 6)."""
    obj = next((o for o in applied if o.get("kind") == DGD_KIND and (o.get("metadata") or {}).get("name") == dgd.name),
               None)
    data = run.ledger.data
    if obj is not None:
        run.ledger.set_section("applied_dgd", resume.applied_record(obj, kube.context, clock.iso_now(),
                                                                    kube.field_manager))
    reset = resume.reopen(data)
    if reset is not None:
        data["reapplies"].append({"at": clock.iso_now(), "dgd": dgd.name, "reason": "re-applied after a teardown",
                                  "torn_down_at": reset})
    run.save()


def platform_blocked(exc: PlatformFault, during: str, result: object | None = None) -> StepBlocked:
    """An unreachable webhook of the operator blocks the run: the platform's fault, not the
    candidate's, so no failed attempt is recorded (docs/operator-generations.md, "Platform faults")."""
    return StepBlocked("platform", f"{during} met a platform fault: {exc}",
                       "the Dynamo operator's webhook is unreachable: check the operator's pod and its webhook "
                       "Service, then rerun this iteration", result)


# ---------------------------------------------------------------------------- step 6
POLICY_TEARDOWN, POLICY_KEEP = "teardown-final-failures", "keep-on-failure"


@dataclass
class Readiness:
    """Step 6: what the readiness wait saw (the ledger's ``readiness`` section), the deployed pods'
    config engagement; on failure, whether it was a failed attempt, its evidence and the teardown."""

    state: str = "waiting"  # ready, or the failure's category (failed-deploy, dependency, crash, no-progress, ...)
    dgd_state: str | None = None
    ready_condition: str | None = None
    ready_reason: str | None = None
    components: dict[str, Any] = field(default_factory=dict)
    allocated_at: str | None = None
    contention: list[dict[str, Any]] = field(default_factory=list)
    diagnosis: str = ""
    evidence: list[str] = field(default_factory=list)
    seconds: float = 0.0
    last_progress: dict[str, Any] | None = None  # what advanced last, when
    generation_rule: str | None = None  # how the status was known to describe the current spec
    reconcile_errors: list[dict[str, Any]] = field(default_factory=list)  # `failed` states seen, and their outcome
    verdict_at: str | None = None  # when the wait gave its verdict, to the microsecond (time to verdict)
    # Not part of the ledger section:
    config_engagement: list[dict[str, Any]] = field(default_factory=list)
    failed: bool = False
    failed_attempt: bool = False
    torn_down_at: str | None = None
    failure_evidence: dict[str, Any] | None = None
    teardown: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The ledger's ``readiness`` section."""
        return {k: v for k, v in asdict(self).items()
                if k not in {"config_engagement", "failed", "failed_attempt", "torn_down_at", "failure_evidence",
                             "teardown"}}

    def record(self, ledger: Ledger) -> Mapping[str, Any]:
        # Every contention wait was a decision to hold rather than fail: the procedure asks for its
        # evidence line and next-check interval in the ledger.
        for seen in self.contention:
            ledger.add_hold_decision({"at": seen.get("at"), "step": "step6_readiness", "decision": "wait",
                                      "category": seen.get("category"), "reason": seen.get("diagnosis"),
                                      "evidence": seen.get("evidence"), "next_check_s": seen.get("next_check_s")})
        if self.failed:
            ledger.set_section("readiness", {"state": self.state, "diagnosis": self.diagnosis,
                                             "evidence": self.evidence, "last_progress": self.last_progress,
                                             "contention": self.contention, "reconcile_errors": self.reconcile_errors,
                                             "verdict_at": self.verdict_at, "failure_evidence": self.failure_evidence})
            if self.failed_attempt:
                ledger.add_failed_attempt("step6_readiness", self.state, self.evidence, self.diagnosis)
            if self.teardown is not None:
                ledger.set_section("teardown", self.teardown)
            if self.torn_down_at is not None:
                ledger.set_section("torn_down_at", self.torn_down_at)
            return {}
        ledger.set_section("readiness", self.as_dict())
        for engagement in self.config_engagement:
            ledger.add_config_engagement(engagement)
        return {"state": self.state, "seconds": self.seconds, "contention": len(self.contention)}


def wait_ready(kube: Kube, namespace: str, dgd: Dgd, timeout: float, *, frontend_expected: bool,
               on_progress: Progress = _quiet, on_allocated: Callable[[str], None] | None = None,
               contention_recheck_s: float = 30.0, no_progress_s: float | None = None,
               failed_grace_s: float = 30.0) -> Readiness:
    """DGD Ready with state successful and observedGeneration current; every component x replica
    Running and ready; pending pods and containers triaged as soon as they say why
    (:class:`conditions.DgdReady`); the frontend Service present when one is expected.

    Progress-aware: the wait goes on while pods advance and fails (``no-progress``) after
    ``no_progress_s`` without progress, naming the last progress seen; ``timeout`` is the hard cap.
    """
    started = clock.monotonic()
    no_progress_s = timeout if no_progress_s is None else min(no_progress_s, timeout)
    expected = {c.name: c.replicas * c.node_count for c in dgd.components}
    try:
        nodes: list[Obj] | None = kube.list_items("Node")[0]
    except Forbidden:
        nodes = None
    ready = conditions.DgdReady(conditions.PendingTriage(kube, namespace, nodes, contention_recheck_s), dgd.name,
                                sum(expected.values()), on_allocated, kube.field_manager, failed_grace_s,
                                tuple(c.name for c in dgd.components))
    ready.progressed("readiness wait started")
    while True:
        now = clock.monotonic()
        # One bounded wait per stretch without progress; a stretch that saw progress starts another.
        window = min(ready.progress_mono + no_progress_s, started + timeout) - now
        try:
            state = kube.wait(ready, timeout=max(window, 0.0), on_progress=on_progress)
            break
        except WaitTimeout as exc:
            now = clock.monotonic()
            if now - started >= timeout:
                raise StepFailure(f"{exc} (the hard cap timeouts.readiness_s, pods still progressing); "
                                  f"last progress: {_progress_line(ready, started)}", "timeout",
                                  [exc.last_state], result=_progress(ready, started)) from exc
            if now - ready.progress_mono >= no_progress_s:
                raise StepFailure(f"no progress for {now - ready.progress_mono:.0f}s (timeouts.readiness_no_progress_s "
                                  f"{no_progress_s:.0f}s); last progress: {_progress_line(ready, started)}; last seen: "
                                  f"{exc.last_state}", "no-progress", [exc.last_state],
                                  result=_progress(ready, started)) from exc
        except (StepFailure, StepBlocked) as exc:
            exc.result = _progress(ready, started)
            raise
        except PlatformFault as exc:
            raise platform_blocked(exc, "the readiness wait", _progress(ready, started)) from exc
        except KubeError as exc:  # a refusal (403, 404, ...) stops the wait at once: not the attempt's fault
            raise StepFailure(f"the readiness wait stopped: {exc}", "api-error") from exc
    out = Readiness("ready", ready.dgd_state, ready.ready_condition, ready.ready_reason,
                    allocated_at=ready.allocated_at, contention=ready.contention,
                    last_progress=_progress(ready, started), generation_rule=ready.generation_rule,
                    reconcile_errors=ready.reconcile_errors)
    out.components = deployed.components(list(state.collections["pods"].values()), dgd, expected)
    service = dgd.frontend_service
    if frontend_expected and service and kube.get_or_none("Service", service, namespace) is None:
        raise StepFailure(f"frontend Service {service} is missing", "missing-frontend-service")
    out.seconds = round(clock.monotonic() - started, 3)
    out.verdict_at = clock.iso_now_precise()
    return out


def _progress(ready: conditions.DgdReady, started: float) -> dict[str, Any]:
    return {"what": ready.last_progress, "at": ready.last_progress_at,
            "after_s": round(ready.progress_mono - started, 3), "milestones": len(ready.reached),
            "contention": ready.contention[-3:], "reconcile_errors": ready.reconcile_errors}


def _progress_line(ready: conditions.DgdReady, started: float) -> str:
    return f"{ready.last_progress} at {ready.last_progress_at} ({ready.progress_mono - started:.0f}s after the start)"


def readiness(run: RunState, kube: Kube) -> Readiness:
    """Wait for readiness; an allocation interval is opened (``allocated_at`` the first) and saved
    the moment the first GPU pod is bound, unless one is open. On failure the evidence is kept first
    (:mod:`deploy_suite.procedure.evidence`), then the teardown policy (:func:`teardown`) decides whether the
    DGD is deleted; the attempt is recorded (a failed attempt when the manifest can never run or
    crashes)."""
    dgd = load_dgd(run.manifests["deploy"])

    def allocated(at: str) -> None:
        # A rerun on the same live DGD keeps its open interval; allocated_at stays the first start.
        if resume.open_allocation(run.ledger.data, at):
            run.save()

    t = run.settings.timeouts
    try:
        out = wait_ready(kube, run.namespace, dgd, t.readiness_s,
                         frontend_expected=any(c.type == "frontend" for c in dgd.components),
                         on_progress=run.progress, on_allocated=allocated, no_progress_s=t.readiness_no_progress_s,
                         failed_grace_s=t.reconcile_error_grace_s)
    except (StepFailure, StepBlocked) as exc:
        verdict_at = clock.iso_now_precise()
        progress = exc.result if isinstance(exc.result, dict) else None
        # A platform fault (StepBlocked) is not the candidate's attempt: kept, never a failed attempt.
        failed = Readiness(exc.category if isinstance(exc, StepFailure) else exc.cls, diagnosis=str(exc),
                           evidence=exc.evidence if isinstance(exc, StepFailure) else [exc.message], failed=True,
                           failed_attempt=isinstance(exc, StepFailure) and exc.failed_attempt,
                           last_progress=progress, contention=list((progress or {}).get("contention") or []),
                           reconcile_errors=list((progress or {}).get("reconcile_errors") or []),
                           verdict_at=verdict_at)
        found, text = evidence.collect(kube, run.namespace, dgd.name)
        found.log_file = run.rel(evidence.write(run.deploy_root / "logs", dgd.name, text))
        failed.failure_evidence = found.as_dict()
        failed.teardown = teardown(kube, run.namespace, dgd.name, failed, keep=run.settings.keep_on_failure,
                                   pods_gone_s=t.retire_s, on_progress=run.progress)
        failed.teardown["evidence_file"] = found.log_file
        if failed.teardown.get("pods_gone_at"):
            failed.torn_down_at = failed.teardown["pods_gone_at"]
        exc.result = failed
        raise
    out.config_engagement = deployed.config_engagement(kube, run.namespace, dgd)
    return out


def teardown(kube: Kube, namespace: str, dgd_name: str, failed: Readiness, *, keep: bool,
             pods_gone_s: float = 600.0, on_progress: Progress = _quiet) -> dict[str, Any]:
    """The teardown policy, after the evidence is kept: an attempt that can never succeed (a failed
    attempt: taint, selector, a request no node can hold, a crash loop that persists, an image that
    does not exist) is deleted to free its GPUs; anything else (a dependency to fix, no progress, an
    API refusal, a missing Service) is kept, since fixing it or waiting may still make it ready.
    ``--keep-on-failure`` keeps everything. After a delete, ``pods_gone_at`` is when its pods were
    gone (the GPUs free: ``torn_down_at``); a bounded wait, left unset when they outlast it."""
    entry = {"policy": POLICY_KEEP if keep else POLICY_TEARDOWN, "dgd": dgd_name}
    if keep:
        return {**entry, "action": "kept", "reason": "--keep-on-failure: everything kept for debugging",
                "at": clock.iso_now()}
    if not failed.failed_attempt:
        return {**entry, "action": "kept", "at": clock.iso_now(),
                "reason": f"{failed.state}: not known to be final (fix the dependency or inspect, then rerun; "
                          "the cleanup command is in the ledger)"}
    try:
        kube.delete(DGD, dgd_name, namespace)
    except KubeError as exc:  # the failure and its evidence stay the story; the cleanup command is in the ledger
        return {**entry, "action": "delete-failed", "at": clock.iso_now(),
                "reason": f"{failed.state}: the attempt can never succeed as written, but the delete failed: {exc}"}
    deleted = {**entry, "action": "deleted", "at": clock.iso_now(),
               "reason": f"{failed.state}: the attempt can never succeed as written; deleted to free its GPUs"}
    try:
        kube.wait(conditions.dgd_pods_gone(namespace, dgd_name), timeout=pods_gone_s, on_progress=on_progress)
    except (WaitTimeout, KubeError) as exc:
        return {**deleted, "pods_gone_at": None, "reason": f"{deleted['reason']}; its pods were not seen gone: {exc}"}
    return {**deleted, "pods_gone_at": clock.iso_now()}
