"""The chain of iterations and the model caches (docs/procedure.md): step 3 retires the experiment's
last DGD as the ledgers record it, whichever iteration applied it, and writes ``torn_down_at`` into
that ledger only; the claims a DGD owns survive step 3's and step 6's deletes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_suite.access.kube import DGD, KNOWN, CommandRecord, Kube
from deploy_suite.errors import InputError, StepBlocked
from deploy_suite.procedure import caches, readiness, retire
from deploy_suite.procedure.registry import STEPS
from deploy_suite.procedure.validate import ValidationInputs, Validator
from deploy_suite.procedure.workspace import read_previous
from deploy_suite.record import ledger, resume
from tests import fakekube
from tests.fakekube import forbidden, pod
from tests.unit.test_rollout import DGD_LABEL, NS, make_run

PVC, POD = KNOWN["PersistentVolumeClaim"], KNOWN["Pod"]
T0 = "2026-01-01T00:00:00Z"


@pytest.fixture
def fake() -> Iterator[tuple[fakekube.FakeApi, Kube, list[CommandRecord]]]:
    with fakekube.installed() as made:
        yield made


def steps(reached: int) -> list[dict[str, Any]]:
    """The seven steps of a ledger whose run stopped in step ``reached``: the later ones skipped,
    which the ledger stamps with times too (deploy_suite/plugins/lifecycle.py end_step)."""
    return [{"name": s.name, "outcome": "passed" if s.number < reached else "blocked" if s.number == reached
             else "skipped", "started_at": T0} for s in STEPS]


def write(exp: Path, iteration: int, reached: int, *, uid: str | None = None, **extra: Any) -> Path:
    """Iteration ``iteration``'s ledger: its run started steps 1..``reached`` (5 and more: it applied,
    ``uid`` the one step 5 recorded)."""
    root = exp / "artifacts" / f"deploy-iter-{iteration:03d}"
    root.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {"iteration": iteration, "status": "ready" if reached >= 7 else "blocked",
                            "dgd_name": "demo", "kube_context": "fake-ctx", "namespace": NS,
                            "torn_down_at": None, "steps": steps(reached), **extra}
    if uid is not None:
        data["applied_dgd"] = {"name": "demo", "namespace": NS, "kube_context": "fake-ctx", "uid": uid,
                               "applied_at": T0}
    (root / ledger.LEDGER_NAME).write_text(json.dumps(data, indent=2))
    return root


# ------------------------------------------------------------------ which ledger step 3 retires


def test_a_blocked_iteration_is_passed_over_to_the_ledger_that_applied(tmp_path: Path) -> None:
    root0 = write(tmp_path, 0, 7, uid="uid-0")
    root1 = write(tmp_path, 1, 2, dgd_name=None)  # blocked in step 2 (a ledger of step 1 may lack names)
    prev = read_previous(root1, tmp_path, 2)
    assert prev is not None
    assert (prev.root, prev.iteration, prev.applied_uid, prev.status) == (root0, 0, "uid-0", "ready")
    assert prev.passed_over == (root1,) and not prev.deletion_unfinished
    assert prev.record(tmp_path) == {
        "root": "artifacts/deploy-iter-000", "ledger": "artifacts/deploy-iter-000/deployment_ledger.json",
        "iteration": 0, "dgd_name": "demo", "kube_context": "fake-ctx", "namespace": NS, "status": "ready",
        "passed_over": ["artifacts/deploy-iter-001"]}


def test_the_walk_back_skips_missing_directories_and_stops_at_the_first_apply(tmp_path: Path) -> None:
    write(tmp_path, 0, 7, uid="uid-0")
    root1 = write(tmp_path, 1, 6, uid="uid-1")  # applied, then failed in step 6
    root3 = write(tmp_path, 3, 3)  # iteration 2 left no directory; 3 blocked in step 3
    prev = read_previous(root3, tmp_path, 4)
    assert prev is not None and (prev.root, prev.applied_uid, prev.passed_over) == (root1, "uid-1", (root3,))


def test_a_run_that_started_step_5_may_have_applied_and_an_older_ledger_is_trusted(tmp_path: Path) -> None:
    write(tmp_path, 0, 7, uid="uid-0")
    root1 = write(tmp_path, 1, 5)  # killed between its apply and the record: no uid, trusted by name
    data = json.loads((root1 / ledger.LEDGER_NAME).read_text())
    data["steps"][4]["outcome"] = "not_run"  # begun, never ended
    (root1 / ledger.LEDGER_NAME).write_text(json.dumps(data))
    prev = read_previous(root1, tmp_path, 2)
    assert prev is not None and (prev.root, prev.applied_uid, prev.passed_over) == (root1, None, ())
    older = {"iteration": 1, "dgd_name": "demo", "kube_context": "c", "namespace": NS}  # no steps recorded
    (root1 / ledger.LEDGER_NAME).write_text(json.dumps(older))
    prev = read_previous(root1, tmp_path, 2)
    assert prev is not None and prev.root == root1


def test_an_earlier_run_kept_in_resumes_counts(tmp_path: Path) -> None:
    write(tmp_path, 0, 7, uid="uid-0")
    root1 = write(tmp_path, 1, 2, resumes=[{"previous_steps": steps(6)}])  # applied once, rerun blocked in 2
    assert resume.may_have_applied(json.loads((root1 / ledger.LEDGER_NAME).read_text()))
    prev = read_previous(root1, tmp_path, 2)
    assert prev is not None and prev.root == root1
    assert STEPS[4].name == resume.APPLY_STEP


def test_nothing_to_retire_when_no_earlier_iteration_applied(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    write(tmp_path, 0, 2)
    root1 = write(tmp_path, 1, 1)
    assert read_previous(root1, tmp_path, 2) is None
    run = make_run(tmp_path, iteration=2, previous=None)
    done = run.record(retire.retire(run, kube))
    assert done.retired is None and "nothing to retire" in run.recorder.evidence["note"]
    assert run.recorder.ledger.data["retired_previous"] is None and [r for r in api.requests if r.method != "GET"] == []


def test_an_unreadable_or_nameless_ledger_on_the_way_is_refused(tmp_path: Path) -> None:
    root0 = write(tmp_path, 0, 7, uid="uid-0")
    root1 = write(tmp_path, 1, 2)
    (root0 / ledger.LEDGER_NAME).write_text("{not json")
    with pytest.raises(InputError) as caught:
        read_previous(root1, tmp_path, 2)
    assert "artifacts/deploy-iter-000/deployment_ledger.json" in caught.value.input_name
    assert "restore the ledger of iteration 0" in caught.value.fix
    write(tmp_path, 0, 7, uid="uid-0", namespace="")
    with pytest.raises(InputError, match=r"iteration 0 \(the last to apply a DGD\)"):
        read_previous(root1, tmp_path, 2)


def test_a_passed_over_step_3_that_deleted_it_unfinished_is_noticed(tmp_path: Path) -> None:
    write(tmp_path, 0, 7, uid="uid-0")
    record = {"ledger": "artifacts/deploy-iter-000/deployment_ledger.json", "existed": True, "pods_gone_at": ""}
    root1 = write(tmp_path, 1, 3, retired_previous=record)  # killed in step 3, after its delete
    prev = read_previous(root1, tmp_path, 2)
    assert prev is not None and prev.deletion_unfinished


# ------------------------------------------------------------------ step 3 over the chain


def live_dgd(api: fakekube.FakeApi, creates_claim: bool = False) -> str:
    """The DGD; ``creates_claim``: its spec asks the operator to create a claim (``pvcs[].create``)."""
    doc = fakekube.dgd("demo", NS)
    if creates_claim:
        doc["spec"] = {"pvcs": [{"name": "model-cache", "create": True, "size": "100Gi"}]}
    stored = api.put(DGD, doc)
    return str(stored["metadata"]["uid"])


def claim(name: str, *owners: str) -> dict[str, Any]:
    refs = [{"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment", "name": "demo", "uid": u,
             "controller": True, "blockOwnerDeletion": True} for u in owners]
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": NS, **({"ownerReferences": refs} if refs else {})},
            "spec": {"accessModes": ["ReadWriteOnce"]}}


def test_step3_retires_iteration_0_past_a_blocked_iteration_1_and_keeps_its_claims(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.garbage_collect = True
    uid = live_dgd(api)
    api.put(PVC, claim("owned-cache", "someone-else", uid))  # the DGD is its second owner
    api.put(PVC, claim("other-cache", "uid-of-another-dgd"))
    api.put(PVC, claim("shared-cache"))
    root0 = write(tmp_path, 0, 7, uid=uid)
    root1 = write(tmp_path, 1, 2)
    before0 = json.loads((root0 / ledger.LEDGER_NAME).read_text())
    before1 = (root1 / ledger.LEDGER_NAME).read_bytes()
    run = make_run(tmp_path, iteration=2, previous=read_previous(root1, tmp_path, 2))
    result = run.record(retire.retire(run, kube)).retired
    assert result is not None and result.action == "deleted" and result.kept_claims == ["owned-cache"]
    # The claim loses only the DGD's reference, before the DGD is deleted; the others are untouched.
    mutations = [(r.method, r.path.rsplit("/", 1)[-1]) for r in api.requests if r.method in ("PATCH", "DELETE")]
    assert mutations == [("PATCH", "owned-cache"), ("DELETE", "demo")]
    assert api.of("PATCH")[0].body == [{"op": "test", "path": "/metadata/ownerReferences/1/uid", "value": uid},
                                       {"op": "remove", "path": "/metadata/ownerReferences/1"}]
    claims = {k[1]: v["metadata"].get("ownerReferences") for k, v in api.objects[("/api/v1", PVC.plural)].items()}
    assert [r["uid"] for r in claims["owned-cache"]] == ["someone-else"]
    assert [r["uid"] for r in claims["other-cache"]] == ["uid-of-another-dgd"] and claims["shared-cache"] is None
    # torn_down_at into iteration 0's ledger (nothing else changed there); iteration 1's untouched.
    after0 = json.loads((root0 / ledger.LEDGER_NAME).read_text())
    assert after0 == {**before0, "torn_down_at": result.pods_gone_at} and result.torn_down_at == result.pods_gone_at
    assert (root1 / ledger.LEDGER_NAME).read_bytes() == before1
    section = run.recorder.ledger.data["retired_previous"]
    assert section["ledger"] == "artifacts/deploy-iter-000/deployment_ledger.json"
    assert section["passed_over"] == ["artifacts/deploy-iter-001"] and section["kept_claims"] == ["owned-cache"]


def test_step3_refuses_to_delete_when_the_claims_cannot_be_kept(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    uid = live_dgd(api, creates_claim=True)
    api.fail("GET", f"/api/v1/namespaces/{NS}/persistentvolumeclaims", forbidden("list", "persistentvolumeclaims"))
    root0 = write(tmp_path, 0, 7, uid=uid)
    run = make_run(tmp_path, iteration=1, previous=read_previous(root0, tmp_path, 1))
    with pytest.raises(StepBlocked) as caught:
        retire.retire(run, kube)
    assert caught.value.category == "pvc" and "could not be kept" in caught.value.message
    assert "grant list and patch on persistentvolumeclaims" in caught.value.fix
    assert api.of("DELETE") == [] and api.of("PATCH") == []
    assert json.loads((root0 / ledger.LEDGER_NAME).read_text())["torn_down_at"] is None


@pytest.mark.parametrize("spec", [{}, {"pvcs": [{"name": "model-cache"}]}, {"pvcs": [{"name": "c", "create": False}]}])
def test_step3_deletes_a_dgd_that_declares_no_claim_to_create_when_claims_cannot_be_listed(
        fake, tmp_path: Path, spec: dict[str, Any]) -> None:
    api, kube, _ = fake
    uid = str(api.put(DGD, {**fakekube.dgd("demo", NS), "spec": spec})["metadata"]["uid"])
    api.fail("GET", f"/api/v1/namespaces/{NS}/persistentvolumeclaims", forbidden("list", "persistentvolumeclaims"))
    root0 = write(tmp_path, 0, 7, uid=uid)
    run = make_run(tmp_path, iteration=1, previous=read_previous(root0, tmp_path, 1))
    result = run.record(retire.retire(run, kube)).retired
    assert result is not None and result.action == "deleted" and result.kept_claims == []
    assert "could not be listed" in result.claims_unlisted and "declares no spec.pvcs[] claim" in result.claims_unlisted
    assert len(api.of("DELETE")) == 1 and api.of("PATCH") == []
    assert run.recorder.ledger.data["retired_previous"]["claims_unlisted"] == result.claims_unlisted


@pytest.mark.parametrize(("listable", "inferred"), [("pods", True), ("dynamographdeployments", True), (None, False)])
def test_step2_infers_the_namespace_from_any_namespaced_list_not_only_claims(
        fake, tmp_path: Path, listable: str | None, inferred: bool) -> None:
    """An identity that may not read its Namespace nor list claims (step 3 copes without) is not
    blocked in step 2 when it may list pods or DGDs there."""
    api, kube, _ = fake
    api.fail("GET", f"/api/v1/namespaces/{NS}", forbidden("get", "namespaces"))
    for plural, prefix in (("pods", "/api/v1"), ("persistentvolumeclaims", "/api/v1"),
                           ("dynamographdeployments", "/apis/nvidia.com/v1alpha1")):
        if plural != listable:
            api.fail("GET", f"{prefix}/namespaces/{NS}/{plural}", forbidden("list", plural))
    checker = Validator(kube, ValidationInputs(NS, tmp_path / "deploy.yaml", {}, None, {}, tmp_path))
    assert checker.check_namespace() is inferred
    if inferred:
        assert checker.ev["namespace"] == "present (inferred)" and checker.report.blockers == []
    else:
        (blocker,) = checker.report.blockers
        assert blocker.category == "namespace" and "can neither read it nor list inside it" in blocker.message


@pytest.mark.parametrize(("dgd", "may"), [
    ({"spec": {}}, False),
    ({"spec": {"pvcs": [{"name": "c", "create": True}]}}, True),
    ({"spec": {"pvcs": [{"name": "c", "create": "yes"}]}}, True),  # anything but absent or false may be one
    ({"spec": {"pvcs": ["c"]}}, True),
    # A v1beta1 read of a DGD converted from v1alpha1: its pvcs kept in an annotation.
    ({"metadata": {"annotations": {"nvidia.com/other-version-spec": '{"pvcs":[{"create":true}]}'}}}, True),
    ({"metadata": {"annotations": {"team": "a"}}}, False),
])
def test_which_dgd_may_own_claims(dgd: dict[str, Any], may: bool) -> None:
    assert caches.may_own_claims(dgd) is may


def test_a_deletion_a_passed_over_step_3_left_unfinished_gets_its_torn_down_at(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    root0 = write(tmp_path, 0, 7, uid="uid-gone")  # its DGD is gone: iteration 1's step 3 deleted it
    record = {"ledger": "artifacts/deploy-iter-000/deployment_ledger.json", "existed": True, "pods_gone_at": ""}
    root1 = write(tmp_path, 1, 3, retired_previous=record)
    run = make_run(tmp_path, iteration=2, previous=read_previous(root1, tmp_path, 2))
    result = run.record(retire.retire(run, kube)).retired
    assert result is not None and result.action == "already-gone" and api.of("DELETE") == []
    assert json.loads((root0 / ledger.LEDGER_NAME).read_text())["torn_down_at"] == result.pods_gone_at != ""


# ------------------------------------------------------------------ step 6's teardown


def test_the_teardown_keeps_the_claims_the_dgd_owns(fake) -> None:
    api, kube, _ = fake
    api.garbage_collect = True
    uid = live_dgd(api)
    api.put(PVC, claim("owned-cache", uid))
    failed = readiness.Readiness("crash", failed=True, failed_attempt=True)
    done = readiness.teardown(kube, NS, "demo", failed, keep=False, pods_gone_s=5)
    assert done["action"] == "deleted" and done["kept_claims"] == ["owned-cache"]
    assert [r.method for r in api.requests if r.method in ("PATCH", "DELETE")] == ["PATCH", "DELETE"]
    assert api.objects[("/api/v1", PVC.plural)][(NS, "owned-cache")]["metadata"]["ownerReferences"] == []


def test_a_teardown_that_cannot_keep_the_claims_keeps_the_dgd(fake) -> None:
    api, kube, _ = fake
    live_dgd(api, creates_claim=True)
    api.put(POD, pod("demo-worker-0", NS, labels=DGD_LABEL))
    api.fail("GET", f"/api/v1/namespaces/{NS}/persistentvolumeclaims", forbidden("list", "persistentvolumeclaims"))
    failed = readiness.Readiness("crash", failed=True, failed_attempt=True)
    done = readiness.teardown(kube, NS, "demo", failed, keep=False)
    assert done["action"] == "kept" and "could not be kept" in done["reason"] and api.of("DELETE") == []
    assert caches.fix(NS, "demo") in done["reason"]

