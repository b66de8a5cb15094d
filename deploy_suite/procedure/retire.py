"""Step 3: retire the experiment's last DGD (the ledger that applied it: the previous iteration's,
or an earlier one when those after it were blocked before applying), only if it is that
iteration's and the experiment's own; keep the model-cache claims it owns; wait for it and its pods
to go, and write ``torn_down_at`` into that ledger."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from deploy_suite import clock
from deploy_suite.access.kube import DGD, Kube, Obj
from deploy_suite.constants import LABEL_DGD_NAME
from deploy_suite.errors import Forbidden, KubeError, StepBlocked, WaitTimeout
from deploy_suite.judges import ownership
from deploy_suite.procedure import caches, waits
from deploy_suite.procedure.context import StepContext
from deploy_suite.procedure.workspace import PreviousDeployment
from deploy_suite.record import experiment, resume
from deploy_suite.record.ledger import Ledger, write_torn_down_at
from deploy_suite.vocab import BlockerClass, TeardownAction

Progress = Callable[[str], None]


def quiet(_m: str) -> None:
    return None


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
    kept_claims: list[str] = field(default_factory=list)  # claims it owned, orphaned before the delete
    claims_unlisted: str = ""  # why no claim needed keeping although the claims could not be listed
    ownership: str = ""  # ours (the experiment's field manager) | recorded (named exactly by its ledger)
    # How a torn_down_at this step wrote was established (the DGD found already gone): see _torn_down.
    torn_down_basis: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Retired:
    """Step 3: what was retired (None at iteration 0) and the manifest.yaml context change."""

    context_change: dict[str, Any] | None = None
    retired: RetireResult | None = None
    # Which ledger is retired (``ledger``, EXP_ROOT-relative) and the later iterations' directories
    # passed over because they applied nothing (``passed_over``); None at iteration 0.
    where: dict[str, Any] | None = None
    earlier: Mapping[str, Any] | None = None  # the retire an earlier run of this iteration recorded
    note: str = ""  # why nothing was retired at iteration > 0

    def record(self, ledger: Ledger) -> Mapping[str, Any]:
        evidence: dict[str, Any] = {"note": self.note} if self.note else {}
        if self.context_change is not None:
            evidence["manifest_context_update"] = self.context_change
        if self.retired is not None:
            section = {**self.retired.as_dict(), **(self.where or {})}
            earlier = self.earlier
            if self.retired.action != "deleted" and earlier is not None and earlier.get("existed"):
                # A rerun keeps the record of the deletion an earlier run of this iteration did.
                section = {**earlier, "rerun": section}
            ledger.set_section("retired_previous", section)
            evidence.update(self.retired.as_dict())
        return evidence


def retire_previous(kube: Kube, live: Obj, timeout: float, on_progress: Progress = quiet,
                    on_deleted: Callable[[RetireResult], None] | None = None) -> RetireResult:
    """Delete only the previous DGD (``live``, as read), by exact name, then wait for it and its pods
    to be gone (``timeout`` bounds each wait). PVCs, Jobs, namespaces and secrets are kept: first
    the claims the DGD owns lose that owner reference (:mod:`deploy_suite.procedure.caches`), or
    nothing is deleted. ``on_deleted`` hears of the deletion before the waits (the run saves it: a
    rerun must know it deleted). The caller has decided the DGD is the previous iteration's and
    this experiment's (:func:`retire`)."""
    meta = live["metadata"]
    namespace, dgd_name = str(meta["namespace"]), str(meta["name"])
    try:
        kept = caches.keep_claims(kube, live)
    except KubeError as exc:
        raise StepBlocked(BlockerClass.PVC, f"the model-cache claims DynamoGraphDeployment {namespace}/{dgd_name} "
                          f"owns could not be kept before deleting it ({exc}); step 3 refuses to delete it",
                          caches.fix(namespace, dgd_name)) from exc
    existed = kube.delete(DGD, dgd_name, namespace)
    result = RetireResult(dgd_name, namespace, kube.context, clock.iso_now(), existed, kept_claims=kept.names,
                          claims_unlisted=kept.unlisted)
    if on_deleted is not None:
        on_deleted(result)
    _wait_gone(kube, result, timeout, on_progress)
    return result


def _wait_gone(kube: Kube, result: RetireResult, timeout: float, on_progress: Progress) -> None:
    kube.wait(waits.dgd_gone(result.namespace, result.dgd), timeout=timeout, on_progress=on_progress)
    kube.wait(waits.dgd_pods_gone(result.namespace, result.dgd), timeout=timeout, on_progress=on_progress)
    result.pods_gone_at = clock.iso_now()


def retire(run: StepContext, kube: Kube) -> Retired:
    """Record the effective context in manifest.yaml (before the first mutation of the run), then
    retire the experiment's last DGD (``run.previous``: the ledger that applied it, passing over the
    iterations blocked before applying) in its own context and write ``torn_down_at`` in that
    ledger once its pods are gone; nothing is written in a passed-over ledger. Idempotent on a
    rerun: a DGD already gone is recorded, not deleted, and once its pods are gone its ledger gets
    ``torn_down_at`` unless it has one (someone deleted it: its GPUs are free); a live DGD that is
    this iteration's own (its uid is the one step 5 recorded) is kept. A live DGD is deleted only
    when its ledger names it exactly (name, namespace, context, and the uid when recorded:
    ``deploy_suite.record.resume``) and, unless that ledger names it, it carries the experiment's
    field manager (``deploy_suite.judges.ownership``); anything else blocks, untouched."""
    out = Retired(experiment.update_manifest_context(run.exp_root, kube.context), earlier=run.carried.retired_previous)
    if out.context_change is not None:
        run.recorder.add_evidence(manifest_context_update=out.context_change)  # kept even if the retire fails
    prev = run.previous
    if prev is None:
        if run.settings.iteration > 0:
            out.note = "no earlier iteration applied a DGD (none of their ledgers records step 5): nothing to retire"
        return out
    out.where = {"ledger": run.rel(prev.ledger_path), "passed_over": [run.rel(p) for p in prev.passed_over]}
    owned = prev.kube_context != kube.context
    prev_kube = Kube(prev.kube_context, run.settings.kubeconfig, on_command=run.recorder.command,
                     field_manager=kube.field_manager) if owned else kube
    try:
        out.retired = _retire_checked(run, prev_kube, prev, out.where)
    finally:
        if owned:
            prev_kube.close()
    return out


def _retire_checked(run: StepContext, kube: Kube, prev: PreviousDeployment, where: dict[str, Any]) -> RetireResult:
    timeout = run.settings.timeouts.retire_s
    live = kube.get_or_none(DGD, prev.dgd_name, prev.namespace)
    owner = resume.whose(live, run.carried.uid, prev.applied_uid)
    named = ownership.LedgerName(prev.dgd_name, prev.namespace, prev.kube_context, prev.applied_uid)
    found = ownership.judge(live, prev.dgd_name, prev.namespace, kube.field_manager, ledger=named,
                            kube_context=kube.context)
    _refuse_unless_ours(live, owner, found, prev)
    if owner == "previous" and live is not None:
        def deleted(result: RetireResult) -> None:
            run.recorder.section("retired_previous", {**result.as_dict(), **where})

        result = retire_previous(kube, live, timeout, run.recorder.progress, deleted)
        result.ownership = found.state
    else:
        action = "own-dgd-live" if owner == "mine" else "already-gone"
        result = RetireResult(prev.dgd_name, prev.namespace, kube.context, "", False, action=action)
        if owner is None:
            terminating = _terminating_pods(kube, prev.namespace, prev.dgd_name)
            _wait_gone(kube, result, timeout, run.recorder.progress)  # its pods may still be terminating
            earlier = run.carried.retired_previous or {}
            deleted_by = (f"this iteration's earlier step 3 (at {earlier.get('deleted_at')})"
                          if earlier.get("existed") and not earlier.get("pods_gone_at") else
                          "a passed-over iteration's step 3" if prev.deletion_unfinished else "")
            result.torn_down_basis = _torn_down(result.pods_gone_at, terminating, deleted_by)
    # torn_down_at when the pods are gone, written once (never over one the ledger has): by this
    # run's deletion; by the rerun of one that deleted and was killed before it could write it (its
    # record was saved at the delete), this iteration's or a passed-over one's
    # (deploy_suite/procedure/workspace.py); or when the DGD was found already gone (someone ran the
    # ledger's cleanup command, the namespace was recycled): its GPUs are free, they stop counting.
    if owner in ("previous", None) and prev.torn_down_at is None and result.pods_gone_at:
        write_torn_down_at(prev.ledger_path, result.pods_gone_at)
        result.torn_down_at = result.pods_gone_at
    else:
        result.torn_down_at = prev.torn_down_at
        result.torn_down_basis = None
        result.note = "torn_down_at left as the retired ledger records it"
    return result


def _terminating_pods(kube: Kube, namespace: str, dgd_name: str) -> list[Obj]:
    """The DGD's pods still there when it is found gone (terminating: the garbage collector deletes
    them after their owner)."""
    pods, _ = kube.list_items("Pod", namespace, label_selector=f"{LABEL_DGD_NAME}={dgd_name}", metadata_only=True)
    return pods


@dataclass
class OwnTeardown:
    """A rerun found this iteration's own DGD gone while its ledger still counts its GPUs as held
    (no ``torn_down_at``): its step 6 teardown was stopped in its pods-gone wait (a tool timeout,
    Ctrl-C), or someone ran the cleanup command. ``allocations`` carries the ``torn_down_at``
    written (step 5's re-apply closes the interval there), ``basis`` how it was known."""

    dgd: str
    namespace: str
    allocations: resume.Allocations
    basis: dict[str, Any]

    def record(self, ledger: Ledger) -> Mapping[str, Any]:
        self.allocations.record(ledger)
        found = {"dgd": self.dgd, "namespace": self.namespace, "torn_down_at": self.allocations.torn_down_at,
                 "torn_down_basis": self.basis}
        ledger.add_diagnostic({"own_dgd_found_gone": found})
        return {"own_dgd_found_gone": found}


def finish_own_teardown(run: StepContext, kube: Kube) -> OwnTeardown | None:
    """On a rerun, before step 2 counts anything (its budgets read this ledger's GPU-hours, its
    capacity gate the terminating pods): when the DGD an earlier run of this iteration applied (its
    recorded uid, this context) is gone and its ledger has no ``torn_down_at``, wait (bounded,
    ``timeouts.retire_s``) for its pods to go and write ``torn_down_at`` then, how it was known
    beside it (:func:`_torn_down`). Read-only on the cluster; idempotent (a ``torn_down_at`` is
    never rewritten); nothing when the DGD is live (step 2's guards judge it), when this identity
    may not read it, or when its pods outlast the wait (they still hold their GPUs)."""
    own, carried = run.carried.applied_dgd or {}, run.carried.allocations
    if run.carried.uid is None or carried.torn_down_at or own.get("kube_context") != kube.context:
        return None
    name, namespace = str(own.get("name")), str(own.get("namespace"))
    try:
        if kube.get_or_none(DGD, name, namespace) is not None:
            return None
        terminating = _terminating_pods(kube, namespace, name)
        kube.wait(waits.dgd_pods_gone(namespace, name), timeout=run.settings.timeouts.retire_s,
                  on_progress=run.recorder.progress)
    except (Forbidden, WaitTimeout):
        return None
    gone_at = clock.iso_now()
    allocations = carried.copy()
    allocations.released(gone_at)
    earlier = run.carried.teardown or {}
    by = (f"this iteration's step 6 teardown ({earlier.get('action')} at {earlier.get('at')}, stopped before its "
          "pods were seen gone)" if earlier.get("action") in (TeardownAction.DELETING, TeardownAction.DELETED) else "")
    return OwnTeardown(name, namespace, allocations, _torn_down(gone_at, terminating, by, "step 2"))


def _torn_down(pods_gone_at: str, terminating: list[Obj], deleted_by: str, looker: str = "step 3") -> dict[str, Any]:
    """How the ``torn_down_at`` of a DGD found gone is known. The apiserver keeps nothing of a
    deleted object, so the time it went is known only while its pods are still terminating: then
    step 3's watch sees the last one go (the GPUs freed, within the watch's latency) and their
    ``deletionTimestamp`` says when their deletion was asked for. Pods already gone leave only an
    upper bound, the time step 3 looked: GPU-hours may be over-, never under-counted. ``deleted_by``:
    which earlier step deleted it and was stopped before its pods were gone ("": someone else);
    ``looker``: the step that found it gone."""
    who = f"{deleted_by} deleted it" if deleted_by else "the DGD was already gone (deleted by someone else: the " \
        "ledger's cleanup command, a recycled namespace)"
    if terminating:
        asked = sorted(str(t) for p in terminating if (t := (p.get("metadata") or {}).get("deletionTimestamp")))
        return {"source": "pods-gone-watched", "exact": True, "pods_deletion_requested_at": asked[0] if asked else None,
                "explanation": f"{who}; {len(terminating)} of its pods were still terminating and {looker}'s watch "
                               "saw the last one go at torn_down_at"}
    return {"source": "observed-gone", "exact": False,
            "explanation": f"{who}; it and its pods were gone when {looker} looked and the apiserver keeps no "
                           f"deletion time, so torn_down_at is when {looker} observed them gone: an upper bound"}


def _refuse_unless_ours(live: Obj | None, owner: resume.Whose | None, found: ownership.Ownership,
                       prev: PreviousDeployment) -> None:
    """Both guards of step 3, one message: the uid identity (docs/procedure.md, "Resume") and the field
    manager (docs/procedure.md, "Ownership"), which a DGD its ledger names exactly passes whoever applied it
    (``recorded``). A live DGD is deleted only when it passes both; this iteration's own is never
    deleted, so only the uid decides it is kept (step 5 re-checks its field manager)."""
    reasons = []
    if owner == "unknown":
        uid = ((live or {}).get("metadata") or {}).get("uid")
        reasons.append(f"it has uid {uid}, neither iteration {prev.iteration}'s ({prev.applied_uid}, its "
                       "ledger) nor this iteration's")
    if owner != "mine" and found.foreign:
        managers = ", ".join(found.managers) or "none"
        reasons.append(f"it was not created by this experiment (field managers: {managers})")
    if reasons:
        raise StepBlocked(BlockerClass.OWNERSHIP, f"DynamoGraphDeployment {prev.namespace}/{prev.dgd_name} is live and "
                          f"{'; '.join(reasons)}; step 3 refuses to delete it",
                          ownership.FIX if found.foreign else "if it is this experiment's to remove, delete it "
                          "yourself and rerun; otherwise choose another DGD name")


