"""CONTRIBUTING.md's "Layout" table places every module of the harness (``deploy_suite/``, ``plugins/``,
``fixtures/``) and names no module that does not exist: a newcomer finds each file where the table
says, and a module moved or removed leaves no stale row.

The table's convention, which this test reads: a row's first path is the folder (or the files) it
describes; a module of that folder is named in its row as `` `name` (what it holds)``, a backticked
name followed by a parenthesis (other backticked words, functions or values, are not followed by
one); a module in a subfolder without a row of its own is named in the row of its nearest listed
folder. The step modules are named by the step registry (``procedure.registry.STEPS``) instead.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from deploy_suite.procedure.registry import STEPS

REPO = Path(__file__).resolve().parents[2]
TREES = ("deploy_suite", "plugins", "fixtures")
STEPS_DIR = "deploy_suite/steps/"
TICKED = re.compile(r"`([^`]+)`")
# A module named in a row's description: `name` (what it holds).
NAMED = re.compile(r"`([a-z_][a-z0-9_]*)` \(")


@dataclass(frozen=True)
class Row:
    paths: tuple[str, ...]  # the path column's paths, repository-relative
    text: str  # the description

    @property
    def folder(self) -> str | None:
        """The folder the row describes (``deploy_suite/procedure/``), or ``None`` for a row of files."""
        first = self.paths[0]
        return first if first.endswith("/") else None


def rows() -> list[Row]:
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    out = []
    for line in section.splitlines():
        cells = line.split(" | ")
        if not line.startswith("| `") or len(cells) < 2:
            continue
        ticked = [t for t in TICKED.findall(cells[0]) if "/" in t or t.endswith(".py")]
        if not ticked:
            continue
        base = ticked[0].rsplit("/", 1)[0] + "/" if "/" in ticked[0].rstrip("/") else ""
        # A bare file name beside the first path is in that path's folder (`cli.py`, `triage_cli.py`).
        paths = tuple(t if "/" in t else base + t for t in ticked)
        out.append(Row(paths, " | ".join(cells[1:])))
    return out


def modules() -> list[str]:
    """Every module of the harness's trees, repository-relative; a package's ``__init__`` is its folder's."""
    found = []
    for tree in TREES:
        for folder, dirs, files in os.walk(REPO / tree):  # a linked folder (deploy_suite/plugins) is not followed
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            found += [(Path(folder) / f).relative_to(REPO).as_posix() for f in files
                      if f.endswith(".py") and f != "__init__.py"]
    return sorted(found)


def home(module: str, table: list[Row]) -> Row | None:
    """The row a module belongs in: the row naming its file, else the row of its nearest listed folder."""
    for row in table:
        if module in row.paths:
            return row
    folders = [row for row in table if row.folder and module.startswith(row.folder)]
    return max(folders, key=lambda row: len(row.folder or ""), default=None)


def test_the_layout_table_is_read() -> None:
    table = rows()
    assert len(table) > 15
    assert any(row.folder == "deploy_suite/procedure/" for row in table)
    assert len(modules()) > 80


def test_every_module_is_named_in_its_folders_row() -> None:
    table = rows()
    unplaced = []
    for module in modules():
        row = home(module, table)
        if row is None:
            unplaced.append(f"{module}: no row of the table holds it")
        elif module.startswith(STEPS_DIR):
            if Path(module).name not in {step.module for step in STEPS}:
                unplaced.append(f"{module}: not a step of procedure.registry.STEPS")
        elif module not in row.paths and Path(module).stem not in NAMED.findall(row.text):
            unplaced.append(f"{module}: not named as `{Path(module).stem}` (...) in the row of {row.paths[0]}")
    assert not unplaced, "modules the layout table does not place:\n" + "\n".join(unplaced)


def test_the_table_names_no_module_that_does_not_exist() -> None:
    table = rows()
    stale = [f"{path}: no such file or folder" for row in table for path in row.paths if not (REPO / path).exists()]
    for row in table:
        if row.folder is None or not row.folder.startswith(TREES):
            continue
        own = {Path(m).stem for m in modules() if home(m, table) == row}
        stale += [f"`{name}` in the row of {row.folder}: no module of that folder"
                  for name in NAMED.findall(row.text) if name not in own]
    assert not stale, "the layout table names what does not exist:\n" + "\n".join(stale)
