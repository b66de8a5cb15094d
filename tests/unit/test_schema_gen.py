"""deploy_suite.record.schema_gen: the ledger schema's enum lists are the vocabularies of deploy_suite.vocab."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deploy_suite.errors import LedgerError
from deploy_suite.record import ledger, schema_gen
from deploy_suite.vocab import BlockerClass, RunStatus, StepOutcome, TeardownAction, TeardownPolicy

DATA = Path(__file__).parent / "data"


def at(doc: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def test_the_committed_schema_is_the_generated_one():
    text = schema_gen.SCHEMA_PATH.read_text(encoding="utf-8")
    assert schema_gen.render(text) == text, "run: python -m deploy_suite.record.schema_gen"
    assert schema_gen.main(["--check"]) == 0


def test_each_generated_list_is_its_vocabulary_in_order():
    schema = json.loads(schema_gen.SCHEMA_PATH.read_text(encoding="utf-8"))
    expected = {("properties", "status"): RunStatus,
                ("properties", "steps", "items", "properties", "outcome"): StepOutcome,
                ("properties", "blockers", "items", "properties", "class"): BlockerClass,
                ("properties", "teardown", "properties", "policy"): TeardownPolicy,
                ("properties", "teardown", "properties", "action"): TeardownAction}
    assert set(expected) <= set(schema_gen.ENUMS)
    for path, vocab in expected.items():
        assert at(schema, path)["enum"] == [m.value for m in vocab], path


def test_a_stale_list_is_rewritten_and_nothing_else_changes(tmp_path):
    text = schema_gen.SCHEMA_PATH.read_text(encoding="utf-8")
    start, end = schema_gen.enum_spans(text)[("properties", "blockers", "items", "properties", "class")]
    stale = text[:start] + '["namespace", "pinned-knob"]' + text[end:]
    assert schema_gen.render(stale) == text
    copy = tmp_path / "ledger.schema.json"
    copy.write_text(stale, encoding="utf-8")
    assert schema_gen.main(["--check", "--schema", str(copy)]) == 1
    assert schema_gen.main(["--schema", str(copy)]) == 0
    assert copy.read_text(encoding="utf-8") == text


def test_a_vocabulary_without_its_list_in_the_schema_is_an_error():
    text = schema_gen.SCHEMA_PATH.read_text(encoding="utf-8")
    start, _ = schema_gen.enum_spans(text)[("properties", "status")]
    # Turn the key of the status list into another one: the list is no longer where ENUMS says.
    assert text[start - len('"enum": '):start] == '"enum": '
    without = text[:start - len('"enum": ')] + '"examples": ' + text[start:]
    with pytest.raises(ValueError, match="no enum list at properties/status"):
        schema_gen.render(without)


def test_the_span_reader_finds_every_enum_list_json_finds():
    text = schema_gen.SCHEMA_PATH.read_text(encoding="utf-8")
    schema = json.loads(text)
    found: dict[tuple[str, ...], Any] = {}

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("enum"), list):
                found[path] = node["enum"]
            for key, value in node.items():
                walk(value, (*path, key))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, (*path, str(index)))

    walk(schema, ())
    spans = schema_gen.enum_spans(text)
    assert set(spans) == set(found) and len(found) >= 10
    for path, (start, end) in spans.items():
        assert json.loads(text[start:end]) == found[path]


def test_a_ledger_written_before_the_vocabularies_still_validates():
    # Blocker classes written by every earlier version of the suite (git history), as strings.
    old = json.loads((DATA / "ledger_ready.json").read_text(encoding="utf-8"))
    old["status"] = "blocked"
    old["blockers"] = [{"step": "step2_validate", "class": c, "message": "m", "fix": "f"}
                       for c in ("input", "namespace", "crd", "storage-class", "secret", "pvc", "image", "dry-run",
                                 "platform", "pinned", "gpu-ceiling", "gpu-capacity", "gpu-sku", "ownership",
                                 "budget", "served-model")]
    ledger.validate(old)
    old["blockers"][0]["class"] = "no-such-class"
    with pytest.raises(LedgerError, match="blockers/0/class: 'no-such-class' is not one of"):
        ledger.validate(old)
