"""deploy_suite.record.ledger (atomic, schema-valid, secret-free writes) and the Lifecycle step lifecycle."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from deploy_suite.errors import InputError, LedgerError, SecretLeak, StepBlocked
from deploy_suite.plugins.lifecycle import Lifecycle
from deploy_suite.procedure.registry import STEP_NAMES
from deploy_suite.procedure.settings import Settings
from deploy_suite.record import ledger

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Command:
    """Stands in for deploy_suite.access.kube.CommandRecord: the ledger only needs the four attributes."""

    command: str
    kind: str
    at: str
    outcome: str


def document(**overrides: Any) -> dict[str, Any]:
    data = ledger.new_document(deploy_id="deploy-iter-000", iteration=0, provenance="user-interviewer",
                               step_names=STEP_NAMES, now="2026-06-01T12:00:00Z")
    data.update(overrides)
    return data


# --- schema ----------------------------------------------------------------------------------


def test_schema_is_a_valid_draft_2020_12_schema_with_version_1():
    schema = ledger.schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema_version"] == {"const": 1}
    for budget in ("gpus_requested", "allocated_at", "torn_down_at", "failed_attempts"):
        assert budget in schema["required"]


def test_new_document_is_schema_valid_and_lists_every_step():
    data = document()
    ledger.validate(data)
    assert [s["name"] for s in data["steps"]] == list(STEP_NAMES)
    assert {s["outcome"] for s in data["steps"]} == {"not_run"}
    assert data["torn_down_at"] is None and data["failed_attempts"] == []


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"status": "done"}, "status"),
        ({"iteration": -1}, "iteration"),
        ({"user_workload": {"path": "/abs/user_workload.yaml", "sha256": "a" * 64}}, "user_workload"),
        ({"user_workload": {"path": "../x.yaml", "sha256": "a" * 64}}, "user_workload"),
        ({"commands": [{"command": "kubectl get ns", "kind": "read", "at": "2026-06-01T12:00:00Z",
                        "outcome": "ok"}]}, "commands/0/command"),
        ({"unknown_field": 1}, "(top level)"),
        ({"gpus_requested": "8"}, "gpus_requested"),
    ],
)
def test_schema_rejects_malformed_ledgers(change: dict[str, Any], where: str):
    with pytest.raises(LedgerError, match="breaks its schema"):
        ledger.validate(document(**change))
    data = document(**change)
    with pytest.raises(LedgerError) as info:
        ledger.validate(data)
    assert where in str(info.value)


def test_every_record_method_keeps_the_ledger_schema_valid(tmp_path: Path):
    book = ledger.Ledger(document(), tmp_path / ledger.LEDGER_NAME)
    book.record_command(Command("kubectl --context c get ns x", "read", "2026-06-01T12:00:00Z", "ok"))
    book.add_patch({"file": "artifacts/deploy-iter-000/applied_manifests/model-cache.yaml",
                    "change": "add /spec/storageClassName", "reason": "placeholder storage class",
                    "at": "2026-06-01T12:00:00Z", "source": "automatic", "evidence": {"storage_classes": ["standard"]},
                    "changes": [{"op": "add", "pointer": "/spec/storageClassName", "before": "your-storage-class-name",
                                 "after": "standard"}]})
    book.add_blocker("step2_validate", "secret", "secret hf-token-secret missing", "create it (name only)")
    book.add_limitation("storageclass list forbidden")
    book.add_diagnostic({"step": "step6_readiness", "excerpt": "0/3 nodes available"})
    book.add_cleanup_command("kubectl --context c delete dynamographdeployment demo-agg -n ns")
    book.add_config_engagement({"pod": "p", "arg": "--max-num-seqs 64"})
    book.add_failed_attempt("step6_readiness", "untolerated-taint", {"event": "FailedScheduling"}, "taint")
    for section, value in (("preflight", {"pinned_ok": True}), ("gpus_requested", 1),
                           ("allocated_at", "2026-06-01T12:00:00Z"), ("smoke", {"success": 1})):
        book.set_section(section, value)
    assert book.save(check_schema=True)
    ledger.validate(json.loads((tmp_path / ledger.LEDGER_NAME).read_text()))


def test_only_a_checked_save_validates_the_schema(tmp_path: Path):
    path = tmp_path / ledger.LEDGER_NAME
    book = ledger.Ledger(document(), path)
    book.data["gpus_requested"] = "8"  # breaks the schema (an integer)
    assert book.save()  # a save inside a step: guarded and atomic, the schema is checked at its end
    assert json.loads(path.read_text())["gpus_requested"] == "8"
    book.data["status"] = "blocked"
    with pytest.raises(LedgerError, match="gpus_requested"):
        book.save(check_schema=True)
    assert json.loads(path.read_text())["status"] == "in_progress"  # the refused write left the file


def test_command_kind_outside_the_contract_is_refused():
    book = ledger.Ledger(document())
    with pytest.raises(LedgerError):
        book.record_command(Command("kubectl --context c get x", "exec", "2026-06-01T12:00:00Z", "ok"))


def test_unknown_section_is_refused():
    with pytest.raises(LedgerError):
        ledger.Ledger(document()).set_section("status", "ready")


def test_save_without_a_directory_writes_nothing():
    assert ledger.Ledger(document()).save() is False


# --- atomic writes ---------------------------------------------------------------------------


def test_write_replaces_the_file_and_leaves_no_temp_file(tmp_path: Path):
    path = tmp_path / ledger.LEDGER_NAME
    ledger.write_json(path, document())
    ledger.write_json(path, document(status="blocked"))
    assert json.loads(path.read_text())["status"] == "blocked"
    assert os.listdir(tmp_path) == [ledger.LEDGER_NAME]


@pytest.mark.parametrize("fail_at", ["fsync", "replace"])
def test_interrupted_write_keeps_the_previous_ledger_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            fail_at: str):
    path = tmp_path / ledger.LEDGER_NAME
    ledger.write_json(path, document())
    before = path.read_bytes()

    def interrupt(*_args: Any) -> None:
        raise KeyboardInterrupt  # what a Ctrl-C in the middle of the write looks like

    monkeypatch.setattr(os, fail_at, interrupt)
    with pytest.raises(KeyboardInterrupt):
        ledger.write_json(path, document(status="failed"))
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == [ledger.LEDGER_NAME]


def test_invalid_ledger_is_never_written(tmp_path: Path):
    path = tmp_path / ledger.LEDGER_NAME
    with pytest.raises(LedgerError):
        ledger.write_json(path, document(status="bogus"))
    assert not path.exists()


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from deploy_suite.record import ledger
    from deploy_suite.procedure.registry import STEP_NAMES
    path = Path(sys.argv[1])
    data = ledger.new_document(deploy_id="deploy-iter-000", iteration=0, provenance="user-interviewer",
                               step_names=STEP_NAMES)
    ledger.write_json(path, data)
    print("ready", flush=True)
    n = 0
    while True:
        n += 1
        data["diagnostics"] = ["x" * (n % 5000)] * (n % 50)  # sizes vary: a torn write would show
        ledger.write_json(path, data)
""")


def test_a_writer_killed_at_any_moment_leaves_valid_json(tmp_path: Path):
    path = tmp_path / ledger.LEDGER_NAME
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for attempt in range(8):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, env=env)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(0.05 + 0.03 * attempt)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        ledger.validate(json.loads(path.read_text()))


# --- torn_down_at ----------------------------------------------------------------------------


def test_write_torn_down_at_changes_only_that_field(tmp_path: Path):
    path = tmp_path / ledger.LEDGER_NAME
    old = document(status="ready", dgd_name="demo-agg")
    ledger.write_json(path, old)
    ledger.write_torn_down_at(path, "2026-06-02T08:00:00Z")
    new = json.loads(path.read_text())
    assert new.pop("torn_down_at") == "2026-06-02T08:00:00Z"
    old.pop("torn_down_at")
    assert new == old
    assert os.listdir(tmp_path) == [ledger.LEDGER_NAME]


def test_write_torn_down_at_keeps_keys_of_an_older_ledger(tmp_path: Path):
    path = tmp_path / ledger.LEDGER_NAME
    path.write_text(json.dumps({"dgd_name": "x", "legacy": {"a": 1}}))
    ledger.write_torn_down_at(path, "2026-06-02T08:00:00Z")
    assert json.loads(path.read_text()) == {"dgd_name": "x", "legacy": {"a": 1}, "torn_down_at": "2026-06-02T08:00:00Z"}


# --- redaction guard -------------------------------------------------------------------------

SECRET_BLOB = "aGZfZmFrZVRva2VuVmFsdWVGb3JUZXN0czEyMzQ1Njc4OTBhYmNkZWZn"


@pytest.mark.parametrize(
    "value",
    [
        {"kind": "Secret", "metadata": {"name": "hf-token-secret"}, "data": {"HF_TOKEN": "eA=="}},
        {"kind": "Secret", "stringData": {"HF_TOKEN": "x"}},
        f"HF_TOKEN: {SECRET_BLOB}",
        "token hf_abcdefghijklmnopqrstuvwxyzABCDEF1234",
        "Bearer eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW0iLCJhdWQiOiJ4In0.c2lnbmF0dXJlc2lnbmF0dXJl",
        "kubectl create secret generic hf-token-secret --from-literal=HF_TOKEN=abc",
        "-----BEGIN RSA PRIVATE KEY-----",
    ],
    ids=["secret-data", "secret-stringData", "base64-blob", "hf-token", "jwt", "from-literal", "private-key"],
)
def test_secret_material_is_refused(tmp_path: Path, value: Any):
    path = tmp_path / ledger.LEDGER_NAME
    with pytest.raises(SecretLeak) as info:
        ledger.write_json(path, document(diagnostics=[value]))
    assert "diagnostics/0" in str(info.value)
    assert not path.exists()
    if isinstance(value, str):
        assert value not in str(info.value)


def test_every_save_refuses_secret_material_also_without_the_schema_check(tmp_path: Path):
    book = ledger.Ledger(document(), tmp_path / ledger.LEDGER_NAME)
    book.add_diagnostic({"log": f"HF_TOKEN: {SECRET_BLOB}"})
    with pytest.raises(SecretLeak, match="diagnostics/0/log"):
        book.save()
    assert not (tmp_path / ledger.LEDGER_NAME).exists()


@pytest.mark.parametrize(
    "value",
    [
        "a" * 64,  # a sha256
        "0b2f9c" * 10 + "abcd",
        "kubectl --context offline-demo get secret hf-token-secret -n dynamo-demo -o name",
        "artifacts/deploy-iter-000/applied_manifests/deploy.yaml",
        "nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:" + "c" * 64,
        "python3 -m dynamo.vllm --model RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic --served-model-name x",
        "ThisIsAVeryLongCamelCaseIdentifierWithoutDigitsAtAllReally",
        {"kind": "Secret", "metadata": {"name": "hf-token-secret"}},  # metadata only is fine
    ],
    ids=["sha256", "hex", "kubectl-get-secret-by-name", "path", "image-digest", "args", "long-word", "secret-meta"],
)
def test_ordinary_values_pass_the_guard(value: Any):
    assert ledger.find_secret(document(diagnostics=[value])) is None


# --- Lifecycle: the step lifecycle -------------------------------------------------------------


@pytest.fixture
def run(lifecycle: Lifecycle) -> Lifecycle:
    return lifecycle


def saved_unchecked(run: Lifecycle) -> dict[str, Any]:
    assert run.ledger_path is not None
    data: dict[str, Any] = json.loads(run.ledger_path.read_text())
    return data


def saved(run: Lifecycle) -> dict[str, Any]:
    data = saved_unchecked(run)
    ledger.validate(data)
    return data


def test_fresh_directory_gets_an_in_progress_ledger_at_step1(run: Lifecycle):
    data = saved(run)
    assert (data["status"], data["current_step"], data["resumes"]) == ("in_progress", "step1_inputs", [])


def test_started_step_is_saved_as_the_current_step(run: Lifecycle):
    run.begin_step("step1_inputs")
    data = saved(run)
    assert data["current_step"] == "step1_inputs"
    assert data["steps"][0]["started_at"] is not None and data["steps"][0]["ended_at"] is None


def test_passed_steps_move_current_step_to_the_next_one(run: Lifecycle):
    run.begin_step("step1_inputs")
    run.recorder.add_evidence(checked=True)
    run.end_step("step1_inputs", "passed")
    data = saved(run)
    assert data["status"] == "in_progress" and data["current_step"] == "step2_validate"
    assert data["steps"][0]["evidence"] == {"checked": True}
    assert data["steps"][0]["duration_s"] >= 0


def test_blocked_step_blocks_every_later_step_with_its_reason(run: Lifecycle):
    run.begin_step("step1_inputs")
    run.end_step("step1_inputs", "passed")
    run.begin_step("step2_validate")
    # A missing prerequisite raised by the step, ended as the ledger plugin ends it.
    run.stop_step("step2_validate", StepBlocked("namespace", "namespace dynamo-demo not found", "create it"))
    assert run.blocked_reason("step3_retire_previous") == (
        "blocked by step2_validate: namespace dynamo-demo not found; fix: create it")
    data = saved(run)
    assert (data["status"], data["current_step"]) == ("blocked", "step2_validate")
    assert data["blockers"] == [{"step": "step2_validate", "class": "namespace",
                                 "message": "namespace dynamo-demo not found", "fix": "create it"}]


def test_failed_step_makes_the_ledger_failed(run: Lifecycle):
    run.begin_step("step1_inputs")  # a failed step is a failed attempt (tests/unit/test_outcomes.py)
    run.end_step("step1_inputs", "failed", "StepFailure: crash loop")
    assert saved(run)["status"] == "failed"
    assert run.blocked_reason("step2_validate") == "blocked by step1_inputs: StepFailure: crash loop"


def test_a_step_that_did_not_run_blocks_the_later_ones(run: Lifecycle):
    run.end_step("step1_inputs", "passed")
    assert run.blocked_reason("step2_validate") is None
    assert run.blocked_reason("step3_retire_previous") == (
        "blocked by step2_validate: not run (its test module is missing or was deselected)")


def test_all_steps_passed_or_self_skipped_is_ready(run: Lifecycle):
    for name in STEP_NAMES:
        if name == "step3_retire_previous":
            run.skip_step(name, "iteration 0 has nothing to retire")
        else:
            run.end_step(name, "passed")
    assert (saved(run)["status"], saved(run)["current_step"]) == ("ready", "step7_smoke")


def test_the_schema_is_checked_where_a_step_ends_and_at_session_end(run: Lifecycle):
    run.begin_step("step1_inputs")
    run.ledger.data["gpus_requested"] = "8"  # a step breaking the ledger's shape
    run.save()
    assert saved_unchecked(run)["gpus_requested"] == "8"
    with pytest.raises(LedgerError, match="gpus_requested"):
        run.end_step("step1_inputs", "passed")
    assert saved_unchecked(run)["steps"][0]["outcome"] == "not_run"  # that write was refused
    with pytest.raises(LedgerError, match="gpus_requested"):
        run.finish(0)
    assert saved_unchecked(run)["session"]["finished_at"] is None


def test_mutating_commands_are_saved_at_once(run: Lifecycle):
    run.recorder.command(Command("kubectl --context c get ns x", "read", "2026-06-01T12:00:00Z", "ok"))
    assert saved(run)["commands"] == []
    run.recorder.command(Command("kubectl --context c apply -f x", "mutate", "2026-06-01T12:00:01Z", "ok"))
    assert [c["kind"] for c in saved(run)["commands"]] == ["read", "mutate"]


def test_refused_input_without_a_directory_writes_no_ledger(tmp_path: Path):
    settings = Settings(iteration=0, exp_root=tmp_path, workload=tmp_path / "w", workload_sha256="a" * 64,
                        dgd=tmp_path / "d", dgd_sha256="b" * 64, provenance="user-interviewer")
    state = Lifecycle.create(settings)
    state.refuse_input("step1_inputs", InputError("--workload w", "file not found", "pass it"))
    state.end_step("step1_inputs", "blocked", "x")
    assert state.ledger_path is None
    assert not (tmp_path / "artifacts").exists()
    assert state.ledger.data["blockers"][0]["message"] == "--workload w: file not found"


def test_resume_keeps_the_history_of_the_earlier_run(run: Lifecycle, tmp_path: Path):
    run.recorder.command(Command("kubectl --context c apply -f x", "mutate", "2026-06-01T12:00:01Z", "ok"))
    run.ledger.add_failed_attempt("step6_readiness", "crash", "CrashLoopBackOff", "OOM")
    run.end_step("step1_inputs", "blocked", "why")
    earlier = saved(run)
    again = Lifecycle.create(run.settings)
    again.attach_directory(tmp_path / "artifacts" / "deploy-iter-000", True, earlier)
    data = saved(again)
    assert len(data["commands"]) == 1 and len(data["failed_attempts"]) == 1
    assert data["resumes"][0]["previous_status"] == "blocked"
    assert data["resumes"][0]["previous_steps"][0]["outcome"] == "blocked"
    assert data["status"] == "in_progress" and data["steps"][0]["outcome"] == "not_run"


def test_a_resume_keeps_the_copies_recorded_hashes_until_step_1_records_them_again(run: Lifecycle, tmp_path: Path):
    # A resume refused in step 1 (a hand-edited copy) must not forget what the copies were: the
    # next rerun compares against the same hashes and refuses again instead of recopying silently.
    entry = {"type": "deploy", "path": "artifacts/deploy-iter-000/applied_manifests/deploy.yaml",
             "source_path": "inputs/user_provided_dgd.yaml", "source_name": "user_provided_dgd.yaml",
             "sha256": "c" * 64, "source_sha256": "d" * 64}
    run.ledger.data["applied_manifests"] = [entry]
    run.end_step("step1_inputs", "passed")
    again = Lifecycle.create(run.settings)
    again.attach_directory(tmp_path / "artifacts" / "deploy-iter-000", True, saved(run))
    again.refuse_input("step1_inputs", InputError("run-scoped copy x", "was edited", "remove it"))
    again.end_step("step1_inputs", "blocked", "edited")
    assert saved(again)["applied_manifests"] == [entry]
