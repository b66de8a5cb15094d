"""The ledger schema's ``enum`` lists, generated from the vocabularies of :mod:`deploy_suite.vocab`.

A value the code writes and the schema does not list fails every run at its first ledger write;
a value listed and never written documents nothing. So the lists are not kept by hand: ``ENUMS``
says which vocabulary each list is, and ``python -m deploy_suite.record.schema_gen`` rewrites the
lists in ``schemas/ledger.schema.json`` (``--check`` only says whether they are current; a unit
test does the same). Only the lists change: the file's layout and every other line stay as written.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path

from deploy_suite.vocab import (
    BlockerClass,
    RunStatus,
    StepOutcome,
    TeardownAction,
    TeardownPolicy,
)

SCHEMA_PATH = Path(__file__).parent / "schemas" / "ledger.schema.json"

Path_ = tuple[str, ...]
# Each generated list: where it is in the schema, and the vocabularies whose values it lists, in order.
ENUMS: dict[Path_, tuple[type[StrEnum], ...]] = {
    ("properties", "status"): (RunStatus,),
    ("properties", "steps", "items", "properties", "outcome"): (StepOutcome,),
    ("properties", "blockers", "items", "properties", "class"): (BlockerClass,),
    ("properties", "teardown", "properties", "policy"): (TeardownPolicy,),
    ("properties", "teardown", "properties", "action"): (TeardownAction,),
}

_SCALAR = re.compile(r'-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null')


def values(path: Path_) -> list[str]:
    """The list ``ENUMS`` generates at ``path``."""
    return [member.value for vocab in ENUMS[path] for member in vocab]


def enum_spans(text: str) -> dict[Path_, tuple[int, int]]:
    """Where each ``enum`` array of the JSON ``text`` is: the path of the object holding it -> its
    character span (the brackets included)."""
    spans: dict[Path_, tuple[int, int]] = {}
    decoder = json.JSONDecoder()

    def ws(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    def value(i: int, path: Path_) -> int:
        i = ws(i)
        if text[i] == "{":
            i = ws(i + 1)
            while text[i] != "}":
                key, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
                i = value(ws(i) + 1, (*path, key))  # past the ':'
                i = ws(i)
                i = ws(i + 1) if text[i] == "," else i
            return i + 1
        if text[i] == "[":
            start, i, index = i, ws(i + 1), 0
            while text[i] != "]":
                i = ws(value(i, (*path, str(index))))
                i = ws(i + 1) if text[i] == "," else i
                index += 1
            if path and path[-1] == "enum":
                spans[path[:-1]] = (start, i + 1)
            return i + 1
        if text[i] == '"':
            return int(json.decoder.scanstring(text, i + 1)[1])  # type: ignore[attr-defined]
        found = _SCALAR.match(text, i)
        if found is None:
            decoder.decode(text)  # raises the JSON error that names the place
            raise ValueError(f"unexpected JSON at character {i}")
        return found.end()

    value(0, ())
    return spans


def render(text: str) -> str:
    """``text`` with every list of ``ENUMS`` generated; a path without an ``enum`` list is an error."""
    spans = enum_spans(text)
    missing = [path for path in ENUMS if path not in spans]
    if missing:
        raise ValueError(f"the schema has no enum list at {', '.join('/'.join(p) for p in missing)}")
    for path in sorted(ENUMS, key=lambda p: spans[p][0], reverse=True):
        start, end = spans[path]
        text = text[:start] + json.dumps(values(path)) + text[end:]
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy_suite.record.schema_gen",
                                     description="generate the ledger schema's enum lists from deploy_suite.vocab")
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed lists are not current")
    parser.add_argument("--schema", type=Path, default=SCHEMA_PATH)
    args = parser.parse_args(argv)
    text = args.schema.read_text(encoding="utf-8")
    generated = render(text)
    if args.check:
        state = "current" if generated == text else "stale: run python -m deploy_suite.record.schema_gen"
        print(f"{args.schema}: {state}")
        return 0 if generated == text else 1
    if generated != text:
        args.schema.write_text(generated, encoding="utf-8")
    print(f"{args.schema}: {len(ENUMS)} enum lists generated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
