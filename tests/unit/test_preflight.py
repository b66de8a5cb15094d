"""Step 2 as a library call (deploy_suite.procedure.validate.preflight): what it hands the gates, and the
typed Preflight result that records the ledger sections and stops the run on a blocker."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from deploy_suite.errors import StepBlocked
from deploy_suite.model.dgd import load_dgd
from deploy_suite.model.files import sha256_file
from deploy_suite.procedure import validate
from deploy_suite.procedure.compat_patches import Finding, Patch
from deploy_suite.procedure.settings import Settings
from deploy_suite.procedure.validate import Preflight, ValidationInputs, ValidationReport
from deploy_suite.procedure.workspace import PreviousDeployment
from deploy_suite.record.ledger import Ledger
from deploy_suite.record.resume import Carried
from tests.unit import lifecycles

CONTEXT = "ctx-a"


def write_ledger(root: Path, status: str, dgd: str, gpus: int, torn_down_at: str | None = None) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "deployment_ledger.json").write_text(json.dumps(
        {"status": status, "dgd_name": dgd, "gpus_requested": gpus, "torn_down_at": torn_down_at}))


def settings(tmp_path: Path, storage_class: str | None = None, served_model: str | None = None) -> Settings:
    return Settings(iteration=1, exp_root=tmp_path, workload=tmp_path / "user_workload.yaml", workload_sha256="a" * 64,
                    dgd=tmp_path / "dgd.yaml", dgd_sha256="b" * 64, provenance="user-interviewer",
                    storage_class=storage_class, served_model=served_model)


def fake_run(tmp_path: Path, *, storage_class: str | None = None, served_model: str | None = None) -> Any:
    """What preflight() reads of the StepContext, for iteration 1 of an experiment with three ledgers:
    iteration 0 (live, retired by step 3), iteration 2 (live) and iteration 3 (torn down)."""
    exp = tmp_path.resolve()
    artifacts = exp / "artifacts"
    write_ledger(artifacts / "deploy-iter-000", "ready", "old", 8)
    write_ledger(artifacts / "deploy-iter-002", "ready", "other", 4)
    write_ledger(artifacts / "deploy-iter-003", "ready", "gone", 2, torn_down_at="2026-06-01T12:00:00Z")
    (exp / "inputs").mkdir()
    (exp / "inputs" / "baseline_dgd.yaml").write_text("kind: DynamoGraphDeployment\n")
    copies = artifacts / "deploy-iter-001" / "applied_manifests"
    manifests = {"deploy": copies / "deploy.yaml", "model-cache": copies / "model-cache.yaml"}
    copies.mkdir(parents=True)
    for kind, path in manifests.items():
        path.write_text(f"# {kind} as step 2's patches left it\n")
    workload = SimpleNamespace(dgd_path="inputs/baseline_dgd.yaml",
                               data={"kubernetes": {"namespace": "ns", "storage_class": "from-workload"},
                                     "resources": {"gpu_ceiling": 16}})
    previous = PreviousDeployment(artifacts / "deploy-iter-000", artifacts / "deploy-iter-000" / "l.json", 0,
                                  "old", CONTEXT, "old-ns", "ready")
    return SimpleNamespace(settings=settings(tmp_path, storage_class, served_model), exp_root=exp,
                           deploy_root=artifacts / "deploy-iter-001", workload=workload, previous=previous,
                           manifests=manifests, namespace="ns", step="step2_validate",
                           carried=Carried())


def gates_returning(monkeypatch: pytest.MonkeyPatch, report: ValidationReport) -> list[ValidationInputs]:
    seen: list[ValidationInputs] = []

    def fake_validate(kube: Any, inputs: ValidationInputs) -> ValidationReport:
        seen.append(inputs)
        return report

    monkeypatch.setattr(validate, "validate", fake_validate)
    return seen


def test_preflight_hands_the_gates_the_runs_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = fake_run(tmp_path, storage_class="fast")
    seen = gates_returning(monkeypatch, ValidationReport(served_model="Qwen/Qwen3-0.6B", frontend_service="d-frontend"))

    result = validate.preflight(run, SimpleNamespace(context=CONTEXT))  # type: ignore[arg-type]

    [inputs] = seen
    assert inputs.namespace == "ns" and inputs.display_root == run.exp_root
    assert (inputs.deploy_path, dict(inputs.support_paths)) == (
        run.manifests["deploy"], {"model-cache": run.manifests["model-cache"]})
    assert inputs.baseline_dgd_path == run.exp_root / "inputs" / "baseline_dgd.yaml"
    # --storage-class wins over the workload's; the workload's own mapping is left as it was.
    assert inputs.workload["kubernetes"] == {"namespace": "ns", "storage_class": "fast"}
    assert run.workload.data["kubernetes"]["storage_class"] == "from-workload"
    # Step 3 retires iteration 0 on this context first: its GPUs count neither as held nor as live.
    assert inputs.retiring == ("old-ns", "old")
    assert inputs.other_live_gpus == 4
    assert result.other_live_dgds == ["deploy-iter-002:other"]
    assert (result.served_model, result.frontend_service) == ("Qwen/Qwen3-0.6B", "d-frontend")


def test_preflight_retires_nothing_on_another_context_and_prefers_the_served_model_option(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = fake_run(tmp_path, served_model="from-option")
    seen = gates_returning(monkeypatch, ValidationReport(served_model="from-dgd"))

    result = validate.preflight(run, SimpleNamespace(context="ctx-b"))  # type: ignore[arg-type]

    assert seen[0].retiring is None
    assert seen[0].workload["kubernetes"]["storage_class"] == "from-workload"
    assert result.served_model == "from-option"


def blocked_report() -> ValidationReport:
    return ValidationReport(
        blockers=[Finding("secret", "secret hf missing", "create it"), Finding("pinned", "knob changed", "keep it"),
                  Finding("gpu-capacity", "GPU capacity insufficient: 8 > 4", "free GPUs")],
        warnings=["fragmented"], limitations=["CRD read forbidden"],
        patches=[Patch("applied_manifests/deploy.yaml", "add toleration", "tainted GPU nodes", at="t0")],
        evidence={"namespace": "present"}, capacity={"capacity": "insufficient", "reasons": ["8 > 4"]},
        gpus_requested=8, frontend_service="d-frontend", served_model="m")


def test_a_blocked_preflight_raises_the_last_blocker_counting_the_others(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gates_returning(monkeypatch, blocked_report())
    with pytest.raises(StepBlocked) as caught:
        validate.preflight(fake_run(tmp_path), SimpleNamespace(context=CONTEXT))  # type: ignore[arg-type]
    error = caught.value
    assert (error.category, error.fix) == ("gpu-capacity", "free GPUs")
    assert error.message == "GPU capacity insufficient: 8 > 4 (and 2 more blocker(s) in the ledger)"
    assert isinstance(error.result, Preflight) and error.result.served_model == "m"


def test_one_blocker_is_raised_as_it_is_and_none_raises_nothing() -> None:
    one = ValidationReport(blockers=[Finding("crd", "Dynamo CRDs missing", "install")])
    stop = Preflight(one, None, None, []).blocked()
    assert stop is not None and stop.message == "Dynamo CRDs missing"
    assert Preflight(ValidationReport(), None, None, []).blocked() is None


def test_recording_a_blocked_preflight_writes_the_step2_sections_as_the_plugin_does(tmp_path: Path) -> None:
    run = lifecycles.started(settings(tmp_path), "step2_validate").context
    result = Preflight(blocked_report(), "m", "d-frontend", ["deploy-iter-002:other"])
    stop = result.blocked()
    assert stop is not None

    # What plugins/ledger.py does with a StepBlocked carrying a result: record it, then the blocker.
    run.record(stop.result)  # type: ignore[arg-type]
    run.recorder.ledger.add_blocker("step2_validate", stop.category, stop.message, stop.fix)

    data = run.recorder.ledger.data
    assert data["patches"] == [{"file": "applied_manifests/deploy.yaml", "change": "add toleration",
                                "reason": "tainted GPU nodes", "at": data["patches"][0]["at"], "changes": [],
                                "evidence": {}, "source": "automatic"}]
    assert data["limitations"] == ["CRD read forbidden"]
    assert (data["gpus_requested"], data["frontend_service"], data["served_model"]) == (8, "d-frontend", "m")
    assert data["capacity"] == {"capacity": "insufficient", "reasons": ["8 > 4"]}
    assert data["preflight"] == {
        "namespace": "present", "warnings": ["fragmented"], "limitations": ["CRD read forbidden"],
        "other_live_dgds": ["deploy-iter-002:other"], "capacity": "insufficient", "pinned_ok": False,
        "blockers": ["secret", "pinned", "gpu-capacity"]}
    assert [(b["class"], b["message"]) for b in data["blockers"]] == [
        ("secret", "secret hf missing"), ("pinned", "knob changed"),
        ("gpu-capacity", "GPU capacity insufficient: 8 > 4 (and 2 more blocker(s) in the ledger)")]
    assert {b["step"] for b in data["blockers"]} == {"step2_validate"}
    assert run.recorder.evidence == {"capacity": "insufficient", "blockers": 3, "patches": 1,
                                     "warnings": ["fragmented"]}
    assert run.result(Preflight) is result


def test_a_spent_budget_blocks_step2_last_and_the_budget_section_is_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = fake_run(tmp_path)
    write_ledger(run.exp_root / "artifacts" / "deploy-iter-004", "failed", "bad", 8)
    run.workload.data["budgets"] = {"max_failed_deploys": 1, "gpu_hours": None, "wall_clock_hours": None}
    gates_returning(monkeypatch, ValidationReport(gpus_requested=8,
                                                  blockers=[Finding("secret", "secret hf missing", "create it")]))
    with pytest.raises(StepBlocked) as caught:
        validate.preflight(run, SimpleNamespace(context=CONTEXT))  # type: ignore[arg-type]
    error = caught.value
    assert error.category == "budget" and error.message.startswith(
        "failed-deploy budget spent: 1 failed deploy(s) recorded in the experiment's ledgers (deploy-iter-004: 1)")
    assert error.message.endswith("(and 1 more blocker(s) in the ledger)")
    result = error.result
    assert isinstance(result, Preflight) and result.budget is not None
    assert result.budget["max_failed_deploys"]["spent"] and result.budget["blocked"] == ["budget"]

    state = lifecycles.started(settings(tmp_path), "step2_validate").context
    state.record(result)
    assert state.recorder.ledger.data["budget"] == result.budget
    assert state.recorder.ledger.data["preflight"]["blockers"] == ["secret", "budget"]


def test_the_ledger_hashes_the_copies_as_step_2_leaves_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Step 1 hashed the copies before step 2's compatibility patches rewrote them.
    run = fake_run(tmp_path)
    gates_returning(monkeypatch, ValidationReport())
    result = validate.preflight(run, kube=SimpleNamespace(context=CONTEXT))
    ledger = Ledger({"applied_manifests": [{"type": "deploy", "sha256": "stale"},
                                           {"type": "model-cache", "sha256": "stale"}]})
    result.record(ledger)
    assert [e["sha256"] for e in ledger.data["applied_manifests"]] == [
        sha256_file(run.manifests["deploy"]), sha256_file(run.manifests["model-cache"])]


def test_a_baseline_that_cannot_be_found_makes_pinned_ok_false(tmp_path: Path) -> None:
    # Iteration 1 with resources.pinned, the baseline deployment.dgd_path names gone from EXP_ROOT:
    # the gate blocks (class pinned) instead of passing an uncompared candidate.
    recipe = Path(__file__).parent / "data" / "recipes" / "llama-3-70b" / "vllm-agg-deploy.yaml"
    deploy = tmp_path / "artifacts" / "deploy-iter-001" / "applied_manifests" / "deploy.yaml"
    deploy.parent.mkdir(parents=True)
    deploy.write_text(recipe.read_text())
    workload = {"deployment": {"dgd_path": "inputs/user_provided_dgd.yaml", "dgd_sha256": "c" * 64},
                "resources": {"pinned": ["precision", "tensor_parallel_size"]}}
    gate = validate.Validator(SimpleNamespace(context=CONTEXT), ValidationInputs(  # type: ignore[arg-type]
        namespace="ns", deploy_path=deploy, support_paths={}, baseline_dgd_path=None, workload=workload,
        display_root=tmp_path))
    gate.check_pinned(load_dgd(deploy))
    [finding] = gate.report.blockers
    assert finding.category == "pinned" and "'inputs/user_provided_dgd.yaml' names no file" in finding.message
    assert "deployment.dgd_sha256" in finding.fix

    run = lifecycles.started(settings(tmp_path), "step2_validate").context
    run.record(Preflight(gate.report, None, None, []))
    assert run.recorder.ledger.data["preflight"]["pinned_ok"] is False
    assert run.recorder.ledger.data["preflight"]["pinned"]["baseline"]["verified"] is False


@pytest.mark.parametrize("pinned", [["router_mode_v2", "max_batch_tokens"], None])
def test_unknown_or_null_pinned_names_never_block_step2(tmp_path: Path, pinned: list[str] | None) -> None:
    # A pinned name the knob table does not know is a limitation of the run, not a dead end at
    # every iteration; pinned written null (an unknown) compares nothing.
    recipe = Path(__file__).parent / "data" / "recipes" / "llama-3-70b" / "vllm-agg-deploy.yaml"
    deploy = tmp_path / "artifacts" / "deploy-iter-000" / "applied_manifests" / "deploy.yaml"
    deploy.parent.mkdir(parents=True)
    deploy.write_text(recipe.read_text())
    workload = {"deployment": {"dgd_path": "inputs/user_provided_dgd.yaml", "dgd_sha256": "c" * 64},
                "resources": {"pinned": pinned}}
    gate = validate.Validator(SimpleNamespace(context=CONTEXT), ValidationInputs(  # type: ignore[arg-type]
        namespace="ns", deploy_path=deploy, support_paths={}, baseline_dgd_path=None, workload=workload,
        display_root=tmp_path))
    gate.check_pinned(load_dgd(deploy))
    assert gate.report.blockers == []
    assert [("router_mode_v2" in x, "max_batch_tokens" in x) for x in gate.report.limitations] == (
        [(True, False), (False, True)] if pinned else [])
