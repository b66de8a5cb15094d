"""The ledger's secret guard over a corpus of real formats (tests/unit/data/secret_corpus.yaml):
model paths, digests, revisions and UUIDs pass; tokens are caught, by find_secret and by redact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deploy_suite import yamlio
from deploy_suite.record import ledger

CORPUS = yamlio.load_one(Path(__file__).parent / "data" / "secret_corpus.yaml")


def placed(entry: dict[str, Any]) -> Any:
    return {entry["key"]: entry["value"]} if "key" in entry else entry["value"]


def ids(entries: list[dict[str, Any]]) -> list[str]:
    return [f"{e.get('key', 'text')}:{e['value'][:40]}" for e in entries]


@pytest.mark.parametrize("entry", CORPUS["pass"], ids=ids(CORPUS["pass"]))
def test_real_paths_digests_revisions_and_uuids_pass(entry: dict[str, Any]) -> None:
    assert ledger.find_secret({"diagnostics": [placed(entry)]}) is None
    assert ledger.redact(entry["value"]) == entry["value"]


@pytest.mark.parametrize("entry", CORPUS["catch"], ids=ids(CORPUS["catch"]))
def test_tokens_are_caught(entry: dict[str, Any]) -> None:
    where = ledger.find_secret({"diagnostics": [placed(entry)]})
    assert where is not None and where.startswith("/diagnostics/0")
    text = f"{entry['key']}={entry['value']}" if "key" in entry else entry["value"]
    assert ledger.REDACTED in ledger.redact(text)
