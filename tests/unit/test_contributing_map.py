"""CONTRIBUTING.md's "Where each rule of the procedure lives" names, for each rule, the function that
decides it. A pointer that names nothing misleads a newcomer at once, so every one must resolve."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

CONTRIBUTING = Path(__file__).resolve().parents[2] / "CONTRIBUTING.md"
PACKAGES = ("model", "access", "judges", "record", "procedure", "reports", "plugins", "fixtures", "rbac")
LEAVES = ("errors", "clock", "yamlio", "constants", "vocab", "cli", "triage_cli", "status")
POINTER = re.compile(r"`((?:" + "|".join(PACKAGES + LEAVES) + r")\.[A-Za-z_][\w.]*)`")


def rule_rows() -> list[str]:
    text = CONTRIBUTING.read_text(encoding="utf-8")
    section = text.split("## Where each rule of the procedure lives", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| step")]


def resolve(dotted: str) -> object:
    """Import the longest module prefix of ``deploy_suite.<dotted>``, then follow attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module("deploy_suite." + ".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def test_the_rule_map_has_rows() -> None:
    assert len(rule_rows()) > 40


def test_every_rule_names_a_function_and_each_pointer_resolves() -> None:
    missing, wrong = [], []
    for row in rule_rows():
        pointers = POINTER.findall(row.rsplit("|", 2)[-2])
        if not pointers:
            missing.append(row[:90])
        for dotted in pointers:
            try:
                resolve(dotted)
            except (ImportError, AttributeError) as exc:
                wrong.append(f"{dotted}: {exc}")
    assert not missing, "rows without a pointer:\n" + "\n".join(missing)
    assert not wrong, "pointers that name nothing:\n" + "\n".join(wrong)
