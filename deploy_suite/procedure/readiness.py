"""Step 6: wait, progress-aware and bounded, for the DGD and every component's pods to be ready;
on a verdict keep the evidence first, then apply the teardown policy."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from deploy_suite import clock
from deploy_suite.access.kube import DGD, Kube, Obj
from deploy_suite.constants import LABEL_COMPONENT, LABEL_DGD_NAME
from deploy_suite.errors import Forbidden, KubeError, PlatformFault, StepBlocked, StepFailure, WaitTimeout
from deploy_suite.judges import conditions, shape
from deploy_suite.judges.membership import components
from deploy_suite.model import discovery
from deploy_suite.model.dgd import Dgd, load_dgd
from deploy_suite.procedure import caches, evidence, holds, waits
from deploy_suite.procedure.apply import Applied, platform_blocked
from deploy_suite.procedure.context import StepContext
from deploy_suite.procedure.retire import Progress, quiet
from deploy_suite.procedure.settings import Timeouts
from deploy_suite.record.ledger import Ledger
from deploy_suite.vocab import FailureCategory, TeardownAction, TeardownPolicy

POLICY_TEARDOWN, POLICY_KEEP = TeardownPolicy.TEARDOWN_FINAL_FAILURES, TeardownPolicy.KEEP_ON_FAILURE


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
    # On failure: the diagnosis in the troubleshooting shape (docs/triage.md), also on the failed attempt.
    troubleshooting: dict[str, Any] | None = None
    # Not part of the ledger section:
    config_engagement: list[dict[str, Any]] = field(default_factory=list)
    failed: bool = False
    failed_attempt: bool = False
    attempt_recorded: bool = False  # the failed attempt is already in the ledger (saved before the teardown)
    torn_down_at: str | None = None
    failure_evidence: dict[str, Any] | None = None
    teardown: dict[str, Any] | None = None
    stopped: holds.Stopped | None = None  # the verdict that ended the wait, on which object

    def as_dict(self) -> dict[str, Any]:
        """The ledger's ``readiness`` section."""
        return {k: v for k, v in asdict(self).items()
                if k not in {"config_engagement", "failed", "failed_attempt", "attempt_recorded", "torn_down_at",
                             "failure_evidence", "teardown", "stopped", "troubleshooting"}}

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
                                             "verdict_at": self.verdict_at, "failure_evidence": self.failure_evidence,
                                             "troubleshooting": self.troubleshooting})
            if self.failed_attempt and not self.attempt_recorded:
                ledger.add_failed_attempt("step6_readiness", self.state, self.evidence, self.diagnosis,
                                          self.troubleshooting)
                self.attempt_recorded = True
            if self.teardown is not None:
                ledger.set_section("teardown", self.teardown)
            if self.torn_down_at is not None:
                ledger.set_section("torn_down_at", self.torn_down_at)
            return {}
        ledger.set_section("readiness", self.as_dict())
        for engagement in self.config_engagement:
            ledger.add_config_engagement(engagement)
        return {"state": self.state, "seconds": self.seconds, "contention": len(self.contention)}


@dataclass(frozen=True)
class Reporting:
    """Whom a readiness wait tells what it sees, and how often it rechecks GPUs held by others."""

    on_progress: Progress = quiet
    on_allocated: Callable[[str], None] | None = None  # the first GPU pod bound, at this time
    contention_recheck_s: float = 30.0


def wait_ready(kube: Kube, namespace: str, dgd: Dgd, bounds: Timeouts, *, frontend_expected: bool,
               reporting: Reporting = Reporting()) -> Readiness:
    """DGD Ready with state successful and observedGeneration current; every component x replica
    Running and ready; pending pods and containers triaged as soon as they say why
    (:class:`waits.DgdReady`); the frontend Service present when one is expected.

    Progress-aware: the wait goes on while pods advance or wait with a sign of a legitimate wait
    (held for GPUs, an image pulling, a model loading: :mod:`deploy_suite.judges.wait_signs`) and fails
    (``no-progress``) after ``bounds.readiness_no_progress_s`` while something is stuck with none of
    these signs, naming the last progress seen and what is stuck; a container loading longer than
    ``bounds.readiness_loading_s`` ends it (``timeout``); ``bounds.readiness_s`` is the hard cap;
    ``bounds.reconcile_error_grace_s`` times a `failed` state.
    """
    started = clock.monotonic()
    timeout = bounds.readiness_s
    no_progress_s = min(bounds.readiness_no_progress_s, timeout)
    expected = {c.name: c.replicas * c.node_count for c in dgd.components}
    try:
        nodes: list[Obj] | None = kube.list_items("Node")[0]
    except Forbidden:
        nodes = None
    # A claim still being bound is a wait within timeouts.pvc_bound_s wherever a pod meets it,
    # whatever this identity could read in step 4 (holds.ClaimHolds).
    ready = waits.DgdReady(waits.PendingTriage(
        kube, namespace, nodes, reporting.contention_recheck_s, lambda pod: evidence.last_lines(kube, namespace, pod),
        claims=holds.ClaimHolds(kube, namespace, bounds.pvc_bound_s)),
        dgd.name, expected, reporting.on_allocated, kube.field_manager, bounds.reconcile_error_grace_s,
        reads=waits.SignReads(kube, namespace, lambda pod, container: evidence.last_line(kube, namespace, pod,
                                                                                         container)),
        loading_s=bounds.readiness_loading_s, read_node=lambda name: kube.get_or_none("Node", name),
        kubelet=holds.KubeletWords(kube, namespace),
        read_registrations=lambda: kube.list_items(discovery.KIND, namespace)[0],
        statuses=holds.WorkloadStatuses(kube, namespace, dgd.name, [c.name for c in dgd.components]))
    ready.progressed("readiness wait started")
    while True:
        now = clock.monotonic()
        # One bounded wait per stretch without progress; a stretch that saw progress (or nothing
        # stuck) starts another.
        window = min(ready.counts_from + no_progress_s, started + timeout) - now
        try:
            state = kube.wait(ready, timeout=max(window, 0.0), on_progress=reporting.on_progress)
            break
        except WaitTimeout as exc:
            now = clock.monotonic()
            if now - started >= timeout:
                raise StepFailure(f"{exc} (the hard cap timeouts.readiness_s, pods still progressing); "
                                  f"last progress: {_progress_line(ready, started)}", FailureCategory.TIMEOUT,
                                  [exc.last_state], result=_partial(ready, started)) from exc
            if now - ready.counts_from >= no_progress_s:
                raise StepFailure(f"no progress for {now - ready.counts_from:.0f}s (timeouts.readiness_no_progress_s "
                                  f"{no_progress_s:.0f}s); last progress: {_progress_line(ready, started)}; stuck "
                                  f"with no sign of a legitimate wait: {'; '.join(ready.signs.stuck[:4])}; last "
                                  f"seen: {exc.last_state}", FailureCategory.NO_PROGRESS,
                                  [exc.last_state, *ready.signs.stuck[:4]], result=_partial(ready, started)) from exc
        except (StepFailure, StepBlocked) as exc:
            exc.result = _partial(ready, started)
            raise
        except PlatformFault as exc:
            raise platform_blocked(exc, "the readiness wait", _partial(ready, started)) from exc
        except KubeError as exc:  # a refusal (403, 404, ...) stops the wait at once: not the attempt's fault
            raise StepFailure(f"the readiness wait stopped: {exc}", FailureCategory.API_ERROR) from exc
    out = Readiness("ready", ready.dgd_state, ready.ready_condition, ready.ready_reason,
                    allocated_at=ready.allocated_at, contention=ready.contention,
                    last_progress=_progress(ready, started), generation_rule=ready.generation_rule,
                    reconcile_errors=ready.reconcile_errors)
    out.components = components(list(state.collections["pods"].values()), dgd, expected)
    service, front = dgd.frontend_service, dgd.frontend
    if frontend_expected and service and front and kube.get_or_none("Service", service, namespace) is None:
        # Named as the operator names it, whatever the component's type (docs/operator-generations.md).
        typed = "" if front.raw_type == "frontend" else (
            f" (component {front.name} is typed {front.raw_type or 'nothing'}: operators create this Service for "
            "the component typed frontend, and the oldest ones for main; type it frontend)")
        raise StepFailure(f"frontend Service {service} is missing{typed}", FailureCategory.MISSING_FRONTEND_SERVICE)
    out.seconds = round(clock.monotonic() - started, 3)
    out.verdict_at = clock.iso_now_precise()
    return out


def _progress(ready: waits.DgdReady, started: float) -> dict[str, Any]:
    now = clock.now()
    return {"what": ready.last_progress, "at": ready.last_progress_at,
            "after_s": round(ready.progress_mono - started, 3), "milestones": len(ready.reached),
            "contention": ready.contention[-3:], "reconcile_errors": ready.reconcile_errors,
            "waiting": [s.as_dict(now) for s in ready.signs.signs[:6]], "stuck": list(ready.signs.stuck[:6])}


def _partial(ready: waits.DgdReady, started: float) -> Readiness:
    """What a stopped wait saw: its last progress, the last contention, the reconcile errors and
    the verdict that stopped it (a claim's final word is its pods' triage's)."""
    progress = _progress(ready, started)
    claims = ready.triage.claims
    return Readiness(last_progress=progress, contention=list(progress["contention"]),
                     reconcile_errors=list(progress["reconcile_errors"]),
                     stopped=ready.stopped or (claims.stopped if claims is not None else None))


def troubleshooting(exc: StepFailure | StepBlocked, seen: Readiness, namespace: str, dgd: str) -> dict[str, Any]:
    """The failure's diagnosis in the troubleshooting shape: from the verdict that stopped the wait
    and the object it is on when one did, else from the stop itself (no progress, a bound, the DGD's
    status) on the DGD."""
    failed_attempt = isinstance(exc, StepFailure) and exc.failed_attempt
    if seen.stopped is not None:
        found = seen.stopped
        return {"object": f"{found.kind}/{found.name}",
                **shape.troubleshooting(found.kind, found.name, namespace, found.verdict, found.checked)}
    evidence = exc.evidence if isinstance(exc, StepFailure) else [exc.message]
    checked = ["the DGD's status", "its pods' status", "the Warning events of the namespace"]
    return {"object": f"DynamoGraphDeployment/{dgd}",
            **shape.stopped("DynamoGraphDeployment", dgd, namespace, (str(exc.category), str(exc), evidence),
                            failed_attempt=failed_attempt, checked=checked)}


def _progress_line(ready: waits.DgdReady, started: float) -> str:
    return f"{ready.last_progress} at {ready.last_progress_at} ({ready.progress_mono - started:.0f}s after the start)"


def readiness(run: StepContext, kube: Kube) -> Readiness:
    """Wait for readiness; an allocation interval is opened (``allocated_at`` the first) and saved
    the moment the first GPU pod is bound, unless one is open. On failure the evidence is kept first
    (:mod:`deploy_suite.procedure.evidence`), then the teardown policy (:func:`teardown`) decides whether the
    DGD is deleted; the attempt is recorded (a failed attempt when the manifest can never run or
    crashes)."""
    dgd = load_dgd(run.manifests["deploy"])
    applied = run.result(Applied)
    allocations = (applied.allocations if applied is not None else run.carried.allocations).copy()

    def allocated(at: str) -> None:
        # A rerun on the same live DGD keeps its open interval; allocated_at stays the first start.
        allocations.opened(at)
        run.record(allocations)  # saved at once: the GPUs are held from now on

    t = run.settings.timeouts
    try:
        out = wait_ready(kube, run.namespace, dgd, t,
                         frontend_expected=dgd.frontend_service is not None,
                         reporting=Reporting(on_progress=run.recorder.progress, on_allocated=allocated))
    except (StepFailure, StepBlocked) as exc:
        verdict_at = clock.iso_now_precise()
        seen = exc.result if isinstance(exc.result, Readiness) else Readiness()
        # A platform fault (StepBlocked) is not the candidate's attempt: kept, never a failed attempt.
        failed = Readiness(exc.category, diagnosis=str(exc),
                           evidence=exc.evidence if isinstance(exc, StepFailure) else [exc.message], failed=True,
                           failed_attempt=isinstance(exc, StepFailure) and exc.failed_attempt,
                           last_progress=seen.last_progress, contention=seen.contention,
                           reconcile_errors=seen.reconcile_errors, verdict_at=verdict_at,
                           troubleshooting=troubleshooting(exc, seen, run.namespace, dgd.name))
        found, text = evidence.collect(kube, run.namespace, dgd.name)
        found.log_file = run.rel(evidence.write(run.deploy_root / "logs", dgd.name, text))
        failed.failure_evidence = found.as_dict()
        # Counted before anything is torn down: a run stopped during the teardown (a tool timeout,
        # Ctrl-C in the pods-gone wait) leaves the attempt, its evidence and diagnosis in the ledger.
        run.record(failed)

        def deleting(entry: dict[str, Any]) -> None:
            run.recorder.section("teardown", entry)

        failed.teardown = teardown(kube, run.namespace, dgd.name, failed, keep=run.settings.keep_on_failure,
                                   pods_gone_s=t.retire_s, hooks=TeardownHooks(run.recorder.progress, deleting))
        failed.teardown["evidence_file"] = found.log_file
        if failed.teardown.get("pods_gone_at"):
            failed.torn_down_at = failed.teardown["pods_gone_at"]
        exc.result = failed
        raise
    out.config_engagement = config_engagement(kube, run.namespace, dgd)
    return out


@dataclass(frozen=True)
class TeardownHooks:
    """Whom a teardown tells: its wait's progress, and the delete about to be asked for (the run
    saves it: a run stopped during the teardown still says it began)."""

    on_progress: Progress = quiet
    on_deleting: Callable[[dict[str, Any]], None] | None = None


def teardown(kube: Kube, namespace: str, dgd_name: str, failed: Readiness, *, keep: bool,
             pods_gone_s: float = 600.0, hooks: TeardownHooks = TeardownHooks()) -> dict[str, Any]:
    """The teardown policy, after the evidence is kept: an attempt that can never succeed (a failed
    attempt: taint, selector, a request no node can hold, a crash loop that persists, an image that
    does not exist) is deleted to free its GPUs; anything else (a dependency to fix, no progress, an
    API refusal, a missing Service) is kept, since fixing it or waiting may still make it ready.
    ``--keep-on-failure`` keeps everything. After a delete, ``pods_gone_at`` is when its pods were
    gone (the GPUs free: ``torn_down_at``); a bounded wait, left unset when they outlast it.
    ``hooks.on_deleting`` hears of the delete (action ``deleting``) before it is asked for."""
    entry = {"policy": POLICY_KEEP if keep else POLICY_TEARDOWN, "dgd": dgd_name}
    if keep:
        return {**entry, "action": TeardownAction.KEPT, "reason": "--keep-on-failure: everything kept for debugging",
                "at": clock.iso_now()}
    if not failed.failed_attempt:
        return {**entry, "action": TeardownAction.KEPT, "at": clock.iso_now(),
                "reason": f"{failed.state}: not known to be final (fix the dependency or inspect, then rerun; "
                          "the cleanup command is in the ledger)"}
    try:  # model caches survive the delete: the claims the DGD owns are orphaned first
        kept = caches.keep_claims_of(kube, namespace, dgd_name).names
    except KubeError as exc:
        return {**entry, "action": TeardownAction.KEPT, "at": clock.iso_now(),
                "reason": f"{failed.state}: the model-cache claims it owns could not be kept ({exc}), so it is not "
                          f"deleted; {caches.fix(namespace, dgd_name)}"}
    if hooks.on_deleting is not None:
        hooks.on_deleting({**entry, "action": TeardownAction.DELETING, "at": clock.iso_now(), "kept_claims": kept,
                     "reason": f"{failed.state}: the attempt can never succeed as written; deleting it"})
    try:
        kube.delete(DGD, dgd_name, namespace)
    except KubeError as exc:  # the failure and its evidence stay the story; the cleanup command is in the ledger
        return {**entry, "action": TeardownAction.DELETE_FAILED, "at": clock.iso_now(),
                "reason": f"{failed.state}: the attempt can never succeed as written, but the delete failed: {exc}"}
    deleted = {**entry, "action": TeardownAction.DELETED, "at": clock.iso_now(), "kept_claims": kept,
               "reason": f"{failed.state}: the attempt can never succeed as written; deleted to free its GPUs"}
    try:
        kube.wait(waits.dgd_pods_gone(namespace, dgd_name), timeout=pods_gone_s, on_progress=hooks.on_progress)
    except (WaitTimeout, KubeError) as exc:
        return {**deleted, "pods_gone_at": None, "reason": f"{deleted['reason']}; its pods were not seen gone: {exc}"}
    return {**deleted, "pods_gone_at": clock.iso_now()}


def config_engagement(kube: Kube, namespace: str, dgd: Dgd) -> list[dict[str, Any]]:
    """The deployed pods' spec fields that carry the candidate's knobs (image, args, GPUs, selector)."""
    pods, _ = kube.list_items("Pod", namespace, label_selector=f"{LABEL_DGD_NAME}={dgd.name}")
    evidence = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        containers = pod["spec"]["containers"]
        main = next((c for c in containers if c.get("name") == "main"), containers[0])
        evidence.append({
            "pod": pod["metadata"]["name"],
            "component": (pod["metadata"].get("labels") or {}).get(LABEL_COMPONENT),
            "node": pod["spec"].get("nodeName"),
            "image": main.get("image"),
            "command": main.get("command"),
            "args": main.get("args"),
            "gpus": conditions.gpus_of(pod),
            "nodeSelector": pod["spec"].get("nodeSelector"),
        })
    return evidence
