"""Resume is idempotent at every step boundary (deploy_suite/record/resume.py and its callers): whose a live
DGD is, step 3 on a rerun, step 5's own-apply record and re-apply, allocation intervals and
GPU-hours, torn_down_at written once, and step 2's capacity excluding a rerun's own pods."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_suite.access.kube import DGD, KNOWN, Kube
from deploy_suite.errors import LedgerError, StepBlocked
from deploy_suite.model.dgd import load_dgd
from deploy_suite.procedure import apply, retire, validate
from deploy_suite.procedure.validate import ValidationInputs, Validator
from deploy_suite.record import ledger, resume
from tests import fakekube
from tests.fakekube import FakeApi, event, pod
from tests.unit.test_capacity import node
from tests.unit.test_rollout import DEPLOY, DGD_LABEL, NS, carry, make_run, previous_iteration

POD = KNOWN["Pod"]
T0, T1, T2, T3 = "2026-06-01T10:00:00Z", "2026-06-01T11:00:00Z", "2026-06-01T12:00:00Z", "2026-06-01T12:30:00Z"


@pytest.fixture
def fake() -> Iterator[tuple[FakeApi, Kube, list[Any]]]:
    with fakekube.installed() as made:
        yield made


def live(uid: str) -> dict[str, Any]:
    return {"metadata": {"name": "demo", "uid": uid}}


def with_uid(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    """``obj`` (managedFields and all) with the uid the apiserver gave it."""
    obj["metadata"]["uid"] = uid
    return obj


# ------------------------------------------------------------------ whose is the live DGD


@pytest.mark.parametrize(("found", "own", "previous", "expected"), [
    (None, "u1", "u0", None),                # gone
    (live("u1"), "u1", "u0", "mine"),        # a rerun after step 5: this iteration's own
    (live("u0"), "u1", "u0", "previous"),    # iteration N-1's, by its recorded uid
    (live("u0"), None, "u0", "previous"),    # step 5 has not run yet
    (live("u0"), None, None, "previous"),    # an older previous ledger: by name, as before
    (live("u9"), "u1", "u0", "unknown"),     # neither: someone re-created the name
    (live("u9"), None, "u0", "unknown"),
])
def test_whose_the_live_dgd_is(found: Any, own: str | None, previous: str | None, expected: str | None) -> None:
    assert resume.whose(found, own, previous) == expected


# ------------------------------------------------------------------ allocation intervals, GPU-hours


def test_allocation_intervals_add_up_and_a_rerun_on_the_live_dgd_keeps_the_open_one() -> None:
    data: dict[str, Any] = {"gpus_requested": 2, "allocated_at": None, "torn_down_at": None, "allocations": []}
    assert resume.open_allocation(data, T0)
    assert not resume.open_allocation(data, T1)  # same live DGD: the interval stays open
    data["torn_down_at"] = T1
    assert resume.reopen(data) == T1  # re-applied after a teardown
    assert data["torn_down_at"] is None and data["allocations"] == [{"allocated_at": T0, "released_at": T1}]
    assert resume.open_allocation(data, T2)
    assert data["allocated_at"] == T0  # the first start, for compatibility
    data["torn_down_at"] = T3
    # 2 GPUs x (1 h + 0.5 h), not 2 x 2.5 h from the first start.
    assert resume.gpu_hours(data) == 3.0
    assert resume.reopen({"torn_down_at": None}) is None


def test_gpu_hours_of_an_older_ledger_and_of_a_dgd_still_holding_its_gpus() -> None:
    assert resume.gpu_hours({"gpus_requested": 4, "allocated_at": T0, "torn_down_at": T2}) == 8.0
    assert resume.gpu_hours({"gpus_requested": 1, "allocated_at": T0, "torn_down_at": None}, now=T1) == 1.0
    assert resume.gpu_hours({"gpus_requested": 1, "allocated_at": None}) == 0.0
    # An older ledger resumed on its live DGD: its allocated_at becomes the open interval, not a second one.
    old: dict[str, Any] = {"allocated_at": T0, "torn_down_at": None}
    assert not resume.open_allocation(old, T1)
    assert old["allocations"] == [{"allocated_at": T0, "released_at": None}]


def test_write_torn_down_at_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / ledger.LEDGER_NAME
    path.write_text(json.dumps({"torn_down_at": T1}))
    with pytest.raises(LedgerError, match="written once and never overwritten"):
        ledger.write_torn_down_at(path, T2)
    assert json.loads(path.read_text()) == {"torn_down_at": T1}


# ------------------------------------------------------------------ step 3 on a rerun


def own_apply(run: Any, uid: str) -> None:
    carry(run, applied_dgd={"name": "demo", "namespace": NS, "kube_context": "fake-ctx", "uid": uid,
                            "applied_at": T1})


def prev_ledger(previous: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(previous.ledger_path.read_text())
    return data


def test_a_rerun_after_step_5_keeps_its_own_dgd_of_the_same_name(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    previous = previous_iteration(tmp_path, uid="uid-iter-0", torn_down_at=T0)
    run = make_run(tmp_path, iteration=1, previous=previous)
    own_apply(run, "uid-iter-1")
    carry(run, retired_previous={"dgd": "demo", "existed": True, "pods_gone_at": T0})
    api.put(DGD, {**fakekube.dgd("demo", NS), "metadata": {"name": "demo", "namespace": NS, "uid": "uid-iter-1"}})
    api.put(POD, pod("demo-worker-0", NS, labels=DGD_LABEL))  # iteration 1's own pod: not waited for
    retired = run.record(retire.retire(run, kube))
    assert api.of("DELETE") == [] and api.of("WATCH") == []
    result = retired.retired
    assert result is not None and (result.action, result.existed, result.torn_down_at) == ("own-dgd-live", False, T0)
    assert prev_ledger(previous)["torn_down_at"] == T0  # untouched
    section = run.recorder.ledger.data["retired_previous"]  # the earlier run's deletion is kept, the rerun beside it
    assert section["existed"] is True and section["rerun"]["action"] == "own-dgd-live"


def test_a_previous_dgd_already_gone_gets_torn_down_at_at_the_observation(fake, tmp_path: Path) -> None:
    """Someone deleted it (the ledger's cleanup command, a recycled namespace): its GPUs are free,
    so its ledger gets torn_down_at (an upper bound: when step 3 saw it gone) and stops counting."""
    api, kube, _ = fake
    previous = previous_iteration(tmp_path, uid="uid-iter-0")
    before = prev_ledger(previous)
    run = make_run(tmp_path, iteration=1, previous=previous)
    retired = run.record(retire.retire(run, kube))
    assert api.of("DELETE") == []
    result = retired.retired
    assert result is not None and result.action == "already-gone" and result.pods_gone_at
    assert prev_ledger(previous) == {**before, "torn_down_at": result.pods_gone_at}  # the only change there
    assert result.torn_down_at == result.pods_gone_at and result.note == ""
    basis = run.recorder.ledger.data["retired_previous"]["torn_down_basis"]
    assert basis["source"] == "observed-gone" and basis["exact"] is False and "upper bound" in basis["explanation"]
    # A rerun of iteration 1 leaves it as written.
    base = tmp_path / "again"
    again = make_run(base, iteration=1, previous=previous_iteration(base, uid="uid-iter-0",
                                                                    torn_down_at=result.pods_gone_at))
    second = again.record(retire.retire(again, kube)).retired
    assert second is not None and second.torn_down_basis is None
    assert second.note == "torn_down_at left as the retired ledger records it"


def test_a_gone_dgd_whose_pods_still_terminate_is_torn_down_when_they_are_gone(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    previous = previous_iteration(tmp_path, uid="uid-iter-0")
    run = make_run(tmp_path, iteration=1, previous=previous)
    held = pod("demo-worker-0", NS, labels=DGD_LABEL)
    held["metadata"]["deletionTimestamp"] = T2
    api.put(POD, held)
    api.script_watch(POD, NS, [event("DELETED", held)])
    result = run.record(retire.retire(run, kube)).retired
    assert result is not None and result.action == "already-gone"
    assert prev_ledger(previous)["torn_down_at"] == result.pods_gone_at
    basis = result.torn_down_basis
    assert basis is not None and basis["source"] == "pods-gone-watched" and basis["exact"] is True
    assert basis["pods_deletion_requested_at"] == T2


def test_a_rerun_of_a_retire_killed_before_torn_down_at_writes_it_once(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    previous = previous_iteration(tmp_path, uid="uid-iter-0")
    run = make_run(tmp_path, iteration=1, previous=previous)
    # What the killed run saved at its delete, before the waits: existed, no pods_gone_at yet.
    carry(run, retired_previous={"dgd": "demo", "existed": True, "deleted_at": T0, "pods_gone_at": ""})
    retired = run.record(retire.retire(run, kube))
    assert api.of("DELETE") == []
    result = retired.retired
    assert result is not None and result.pods_gone_at and result.torn_down_at == result.pods_gone_at
    assert prev_ledger(previous)["torn_down_at"] == result.pods_gone_at


def test_a_live_dgd_that_is_neither_iterations_blocks_and_is_not_deleted(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    previous = previous_iteration(tmp_path, uid="uid-iter-0")
    run = make_run(tmp_path, iteration=1, previous=previous)
    own_apply(run, "uid-iter-1")
    api.put(DGD, {**fakekube.dgd("demo", NS), "metadata": {"name": "demo", "namespace": NS, "uid": "uid-other"}})
    with pytest.raises(StepBlocked, match="has uid uid-other, neither iteration 0's") as caught:
        retire.retire(run, kube)
    assert caught.value.category == "ownership" and api.of("DELETE") == []
    assert prev_ledger(previous)["torn_down_at"] is None


@pytest.mark.parametrize(("uid", "manager", "says"), [
    # The experiment's field manager, but neither iteration's uid (re-created under the name): kept too.
    ("uid-other", "ours", ["it has uid uid-other, neither iteration 0's (uid-iter-0, its ledger) nor this "
                           "iteration's"]),
    ("uid-other", None, ["it has uid uid-other, neither iteration 0's (uid-iter-0, its ledger) nor this "
                         "iteration's", "it was not created by this experiment (field managers: none)"]),
])
def test_step_3_deletes_only_what_its_ledger_names_by_uid(
        fake, tmp_path: Path, uid: str, manager: str | None, says: list[str]) -> None:
    api, kube, _ = fake
    previous = previous_iteration(tmp_path, uid="uid-iter-0")
    run = make_run(tmp_path, iteration=1, previous=previous)
    api.put(DGD, with_uid(fakekube.dgd("demo", NS, manager=kube.field_manager if manager == "ours" else manager), uid))
    with pytest.raises(StepBlocked) as caught:
        retire.retire(run, kube)
    assert caught.value.category == "ownership"
    assert caught.value.message == f"DynamoGraphDeployment {NS}/demo is live and {'; '.join(says)}; step 3 refuses " \
                                   "to delete it"
    assert api.of("DELETE") == [] and prev_ledger(previous)["torn_down_at"] is None


def test_the_previous_dgd_another_tool_applied_is_retired_by_its_recorded_uid(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    previous = previous_iteration(tmp_path, uid="uid-iter-0")
    run = make_run(tmp_path, iteration=1, previous=previous)
    api.put(DGD, with_uid(fakekube.dgd("demo", NS, manager="kubectl-client-side-apply"), "uid-iter-0"))
    result = run.record(retire.retire(run, kube)).retired
    assert result is not None and (result.action, result.ownership) == ("deleted", "recorded")
    assert len(api.of("DELETE")) == 1 and prev_ledger(previous)["torn_down_at"] == result.pods_gone_at


def test_the_previous_dgd_by_its_recorded_uid_is_deleted_and_the_deletion_saved_before_the_waits(
        fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    previous = previous_iteration(tmp_path, uid="uid-iter-0")
    run = make_run(tmp_path, iteration=1, previous=previous)
    run.recorder.ledger.path = run.deploy_root / ledger.LEDGER_NAME
    api.put(DGD, with_uid(fakekube.dgd("demo", NS, manager=kube.field_manager), "uid-iter-0"))
    saved: list[dict[str, Any]] = []
    original = retire._wait_gone

    def spy(*args: Any) -> None:
        saved.append(json.loads(run.recorder.ledger.path.read_text())["retired_previous"])  # type: ignore[union-attr]
        original(*args)

    retire._wait_gone = spy  # type: ignore[assignment]
    try:
        retired = run.record(retire.retire(run, kube))
    finally:
        retire._wait_gone = original  # type: ignore[assignment]
    assert len(api.of("DELETE")) == 1 and saved[0]["existed"] is True and saved[0]["pods_gone_at"] == ""
    assert retired.retired is not None and prev_ledger(previous)["torn_down_at"] == retired.retired.pods_gone_at


# ------------------------------------------------------------------ step 5: its own apply, re-apply


def test_apply_records_its_uid_and_a_reapply_after_a_teardown_opens_a_new_interval(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    run = make_run(tmp_path, step="step5_apply")
    run.record(apply.apply(run, kube))
    first = run.recorder.ledger.data["applied_dgd"]
    assert first["uid"] and (first["name"], first["namespace"], first["kube_context"]) == ("demo", NS, "fake-ctx")
    apply.apply(run, kube)  # the same live DGD: server-side apply keeps it
    data = run.recorder.ledger.data
    assert data["applied_dgd"]["uid"] == first["uid"] and data["reapplies"] == []
    # Torn down (step 6 failed), then a rerun re-applies: a new DGD, torn_down_at reset.
    api.objects[("/apis/nvidia.com/v1alpha1", "dynamographdeployments")].clear()
    carry(run, allocated_at=T0, allocations=[{"allocated_at": T0, "released_at": None}], torn_down_at=T1)
    apply.apply(run, kube)
    data = run.recorder.ledger.data
    assert data["applied_dgd"]["uid"] != first["uid"] and data["torn_down_at"] is None
    assert data["allocations"] == [{"allocated_at": T0, "released_at": T1}]
    assert [(r["reason"], r["torn_down_at"]) for r in data["reapplies"]] == [("re-applied after a teardown", T1)]
    ledger.validate(data)


# ------------------------------------------------------------------ step 2: a rerun's own pods


def test_a_reruns_own_live_dgd_is_found_by_its_uid(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    run = make_run(tmp_path, step="step2_validate")
    assert validate.own_live_dgd(run, kube) is None  # step 5 never ran
    own_apply(run, "uid-iter-0")
    assert validate.own_live_dgd(run, kube) is None  # recorded, but not live
    api.put(DGD, {**fakekube.dgd("demo", NS), "metadata": {"name": "demo", "namespace": NS, "uid": "uid-iter-0"}})
    assert validate.own_live_dgd(run, kube) == (NS, "demo")
    api.put(DGD, {**fakekube.dgd("demo", NS), "metadata": {"name": "demo", "namespace": NS, "uid": "uid-new"}})
    assert validate.own_live_dgd(run, kube) is None  # the same name, another DGD


def test_capacity_excludes_the_reruns_own_pods(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    deploy = tmp_path / "deploy.yaml"
    deploy.write_text(DEPLOY)
    api.put(POD, pod("demo-worker-0", NS, phase="Running", labels=DGD_LABEL, gpus=1, node="n1"))
    outcomes = {}
    for own in (None, (NS, "demo")):
        checker = Validator(kube, ValidationInputs(NS, deploy, {}, None, {}, tmp_path, own=own))
        checker.nodes = [node("n1", gpus=1)]
        checker.check_capacity(load_dgd(deploy))
        outcomes[own] = (checker.report.capacity or {}).get("capacity"), [b.category for b in checker.report.blockers]
    # One GPU on the cluster, held by the rerun's own worker: blocked by itself before, sufficient now.
    assert outcomes[None] == ("insufficient", ["gpu-capacity"])
    assert outcomes[(NS, "demo")] == ("sufficient", [])


# ------------------------------------------------------------------ a rerun finds its own DGD gone


# Before the fake clock's now (2026-01-01): allocated two hours, the delete begun one hour ago.
START, ASKED = "2025-12-31T22:00:00Z", "2025-12-31T23:00:00Z"
OWN = {"name": "demo", "namespace": NS, "kube_context": "fake-ctx", "uid": "uid-own", "applied_at": START}
DELETING = {"policy": "teardown-final-failures", "action": "deleting", "at": ASKED, "dgd": "demo",
            "reason": "crash: the attempt can never succeed as written; deleting it"}


def interrupted(tmp_path: Path, **more: Any) -> Any:
    """Iteration 0 rerun after its step 6 teardown was stopped in the pods-gone wait: applied, GPUs
    allocated since START, the delete begun at ASKED, no torn_down_at."""
    run = make_run(tmp_path, step="step2_validate")
    sections = {"applied_dgd": OWN, "allocations": [{"allocated_at": START, "released_at": None}],
                "allocated_at": START, "gpus_requested": 1, "teardown": DELETING, **more}
    carry(run, **sections)
    return run


def test_a_rerun_finds_its_own_dgd_gone_writes_torn_down_at_and_the_reapply_closes_the_interval(
        fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    run = interrupted(tmp_path)
    finished = retire.finish_own_teardown(run, kube)
    assert finished is not None and api.of("DELETE") == []
    run.record(finished)
    data = run.recorder.ledger.data
    gone = data["torn_down_at"]
    assert gone and gone == finished.allocations.torn_down_at
    assert data["allocations"] == [{"allocated_at": START, "released_at": None}]  # ended by torn_down_at
    assert resume.gpu_hours(data, "2099-01-01T00:00:00Z") == resume.gpu_hours(data) == 2.0  # stopped growing
    (found,) = [d["own_dgd_found_gone"] for d in data["diagnostics"]]
    assert found["torn_down_at"] == gone and run.recorder.evidence["own_dgd_found_gone"] == found
    basis = found["torn_down_basis"]
    assert basis["source"] == "observed-gone" and basis["exact"] is False
    assert f"this iteration's step 6 teardown (deleting at {ASKED}" in basis["explanation"]
    assert "when step 2 observed them gone: an upper bound" in basis["explanation"]
    ledger.validate(data)
    # Step 5 re-applies from the record step 2 left: the interval closes at torn_down_at, a new one opens later.
    applied = run.record(apply.apply(run, kube))
    assert applied.own.reapply is not None and applied.own.reapply["torn_down_at"] == gone
    assert data["allocations"] == [{"allocated_at": START, "released_at": gone}] and data["torn_down_at"] is None
    assert data["reapplies"] == [applied.own.reapply]


def test_finding_its_own_dgd_gone_is_idempotent_and_needs_a_recorded_apply(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    assert retire.finish_own_teardown(interrupted(tmp_path / "a", torn_down_at=T2), kube) is None
    never = make_run(tmp_path / "b", step="step2_validate")  # no earlier apply: nothing of its own to find
    assert retire.finish_own_teardown(never, kube) is None
    elsewhere = interrupted(tmp_path / "c", applied_dgd={**OWN, "kube_context": "other-ctx"})
    assert retire.finish_own_teardown(elsewhere, kube) is None
    assert api.requests == []


def test_a_rerun_whose_own_dgd_is_live_writes_nothing(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.put(DGD, with_uid(fakekube.dgd("demo", NS, manager=kube.field_manager), "uid-own"))
    run = interrupted(tmp_path)  # killed before the delete: the DGD still holds its GPUs
    assert retire.finish_own_teardown(run, kube) is None
    assert [r.method for r in api.requests] == ["GET"] and run.recorder.ledger.data["torn_down_at"] is None


def test_own_pods_still_terminating_are_awaited_and_the_basis_is_exact(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    held = pod("demo-worker-0", NS, labels=DGD_LABEL)
    held["metadata"]["deletionTimestamp"] = T1
    api.put(POD, held)
    api.script_watch(POD, NS, [event("DELETED", held)])
    finished = retire.finish_own_teardown(interrupted(tmp_path), kube)
    assert finished is not None
    assert finished.basis["source"] == "pods-gone-watched" and finished.basis["exact"] is True
    assert finished.basis["pods_deletion_requested_at"] == T1


def test_own_pods_that_outlast_the_wait_leave_the_gpus_counted(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.put(POD, pod("demo-worker-0", NS, labels=DGD_LABEL))  # the fake's garbage collector is off
    run = make_run(tmp_path, step="step2_validate", retire_s=1)
    carry(run, applied_dgd=OWN, allocations=[{"allocated_at": START, "released_at": None}], teardown=DELETING)
    assert retire.finish_own_teardown(run, kube) is None and run.recorder.ledger.data.get("torn_down_at") is None


def test_a_failed_attempt_is_the_last_word_only_until_a_run_ends_ready() -> None:
    attempt = {"at": T1, "diagnosis": "crash", "manifests": {"deploy": "a" * 64}}
    assert resume.Carried.of({"status": "blocked", "failed_attempts": [attempt]}).last_failure == attempt
    assert resume.Carried.of({"status": "ready", "failed_attempts": [attempt]}).last_failure is None
    # Ready after the attempt, then a rerun blocked (a smoke gate): the attempt is history still.
    later = {"status": "blocked", "failed_attempts": [attempt], "resumes": [{"at": T2, "previous_status": "ready"}]}
    assert resume.Carried.of(later).last_failure is None
    earlier = {**later, "resumes": [{"at": T0, "previous_status": "ready"}]}  # ready before the attempt
    assert resume.Carried.of(earlier).last_failure == attempt
