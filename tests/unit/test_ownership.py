"""Ownership of a DGD (deploy_suite.judges.ownership): the experiment's field manager, read back from
managedFields; step 2's gate over the candidate's DGD and the one step 3 retires."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from deploy_suite.access.kube import DGD, Kube
from deploy_suite.judges import ownership
from deploy_suite.procedure import apply
from deploy_suite.procedure.validate import ValidationInputs, Validator
from tests import fakekube
from tests.fakekube import FakeApi

NS = "demo"
MINE = ownership.field_manager("20260601T120000Z-demo")


@pytest.fixture
def fake() -> Iterator[tuple[FakeApi, Kube]]:
    with fakekube.installed(field_manager=MINE) as (api, kube, _records):
        yield api, kube


def test_the_field_manager_is_stable_per_experiment_and_names_no_path() -> None:
    assert ownership.field_manager("20260601T120000Z-demo") == MINE
    assert MINE.startswith("deploy-suite/") and len(MINE) == len("deploy-suite/") + 12
    assert ownership.field_manager("20260601T120000Z-other") != MINE


@pytest.mark.parametrize(("fields", "state"), [
    (None, "absent"),
    ([{"manager": MINE, "operation": "Apply"}], "ours"),
    # The operator's status writes and a person's later edit do not change who created it.
    ([{"manager": MINE, "operation": "Apply"}, {"manager": "dynamo-operator", "operation": "Update"},
      {"manager": "kubectl-edit", "operation": "Update"}], "ours"),
    ([], "foreign"),
    ([{"manager": "kubectl-client-side-apply", "operation": "Update"}], "foreign"),
    ([{"manager": "deploy-suite/0123456789ab", "operation": "Apply"}], "foreign"),  # another experiment
    ([{"manager": "deploy-suite", "operation": "Apply"}], "foreign"),  # a tool's default, no experiment
])
def test_the_ownership_decision(fields: list[dict[str, Any]] | None, state: str) -> None:
    obj = None if fields is None else {"metadata": {"name": "d", "uid": "u-1", "managedFields": fields}}
    found = ownership.judge(obj, "d", NS, MINE)
    assert found.state == state and found.foreign == (state == "foreign")
    assert found.uid == (None if obj is None else "u-1")


def test_a_dgd_named_by_its_ledger_is_recorded_whoever_applied_it() -> None:
    obj = {"metadata": {"name": "d", "uid": "u-1", "managedFields": [{"manager": "kubectl-client-side-apply"}]}}
    named = ownership.LedgerName("d", NS, "ctx", "u-1")
    assert ownership.judge(obj, "d", NS, MINE, ledger=named, kube_context="ctx").state == "recorded"
    assert ownership.judge(obj, "d", NS, MINE, ledger=ownership.LedgerName("d", NS, "ctx"),
                           kube_context="ctx").state == "recorded"  # a ledger that recorded no uid: by name
    for other in (ownership.LedgerName("d", NS, "ctx", "u-2"), ownership.LedgerName("d", "other-ns", "ctx", "u-1"),
                  ownership.LedgerName("e", NS, "ctx", "u-1"), ownership.LedgerName("d", NS, "other-ctx", "u-1")):
        assert ownership.judge(obj, "d", NS, MINE, ledger=other, kube_context="ctx").foreign, other
    assert ownership.judge(obj, "d", NS, MINE).foreign  # no ledger names it: the guard stays


def test_an_applied_dgd_reads_back_as_ours(fake: tuple[FakeApi, Kube]) -> None:
    api, kube = fake
    kube.apply(fakekube.dgd("d", NS, manager=None), NS)
    assert apply.require_not_foreign(kube, NS, "d", "x").state == "ours"
    assert api.of("PATCH")[0].query == {"fieldManager": MINE, "force": "true"}


def test_a_foreign_dgd_stops_with_one_line_naming_its_managers(fake: tuple[FakeApi, Kube]) -> None:
    api, kube = fake
    api.put(DGD, fakekube.dgd("d", NS, manager="alice"))
    with pytest.raises(Exception) as caught:
        apply.require_not_foreign(kube, NS, "d", "step 5 refuses to apply over it")
    assert str(caught.value).splitlines()[0].startswith(
        f"DynamoGraphDeployment {NS}/d exists and was not created by this experiment (field managers: alice); "
        "step 5 refuses to apply over it")
    assert apply.require_not_foreign(kube, NS, "absent", "x").state == "absent"


def validator(kube: Kube, tmp_path: Path, retiring: tuple[str, str] | None,
              retiring_uid: str | None = None) -> Validator:
    return Validator(kube, ValidationInputs(namespace=NS, deploy_path=tmp_path / "deploy.yaml", support_paths={},
                                            baseline_dgd_path=None, workload={}, display_root=tmp_path,
                                            retiring=retiring, retiring_uid=retiring_uid))


@pytest.mark.parametrize(("candidate", "retired", "recorded_uid", "blocked"), [
    ("alice", None, None, ["step 5 would apply over it"]),
    (MINE, None, None, []),  # a rerun of this iteration, or the previous iteration's DGD of the same name
    # Another tool applied it: its ledger names it exactly (its uid, or no uid recorded): retired.
    (None, "alice", "uid-old", []),
    (None, "alice", None, []),
    # Its ledger recorded another uid: the same name re-created by someone else, never deleted.
    (None, "alice", "uid-of-another", ["step 3 would delete it as the previous iteration's"]),
    (None, MINE, "uid-old", []),
])
def test_step2_gates_the_candidates_dgd_and_the_retired_one(fake: tuple[FakeApi, Kube], tmp_path: Path,
                                                            candidate: str | None, retired: str | None,
                                                            recorded_uid: str | None, blocked: list[str]) -> None:
    api, kube = fake
    if candidate is not None:
        api.put(DGD, fakekube.dgd("demo", NS, manager=candidate))
    if retired is not None:
        api.put(DGD, fakekube.dgd("old", "old-ns", manager=retired))  # stored with uid uid-old
    check = validator(kube, tmp_path, ("old-ns", "old"), recorded_uid)
    check.check_ownership(SimpleNamespace(name="demo"))  # type: ignore[arg-type]
    assert [b.message.split("; ")[1].removesuffix(": refused before any change") for b in check.report.blockers] \
        == blocked
    assert {b.category for b in check.report.blockers} <= {"ownership"}
    assert [(o["dgd"], o["state"]) for o in check.ev["ownership"]] == [
        ("demo", "absent" if candidate is None else "ours" if candidate == MINE else "foreign"),
        ("old", "absent" if retired is None else "ours" if retired == MINE else "foreign" if blocked else "recorded")]
    assert not api.of("PATCH") and not api.of("DELETE")


def test_the_retired_dgd_of_the_same_name_is_read_once(fake: tuple[FakeApi, Kube], tmp_path: Path) -> None:
    api, kube = fake
    check = validator(kube, tmp_path, (NS, "demo"))
    check.check_ownership(SimpleNamespace(name="demo"))  # type: ignore[arg-type]
    assert len(api.of("GET")) == 1 and check.report.blockers == []

