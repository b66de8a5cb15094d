"""Ledger values as view models: which block shows a value (text, a table, a list, a link), never its tags.

The building blocks of the pages (``deploy_suite.reports.iteration``, ``capacity``, ``experiment``): any
ledger value (an evidence dict, a list of records, a path) becomes a tree of the nodes below, and the
macro ``node`` of ``templates/values.html.j2`` draws that tree. A plain ``str`` or number in a tree is
text; every text is escaped by the templates (``deploy_suite.reports.markup``). Pure functions of their
arguments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import quote

# A node of a view model: text (anything else than a Block: str, int, float; None is no text) or a Block.
Node = Any


class Block:
    """A node that is a block of the page (``kind`` names its macro in templates/values.html.j2)."""

    kind: ClassVar[str]


@dataclass(frozen=True)
class Muted(Block):
    """Grey text: what is absent, a unit, a time."""

    text: Any
    kind: ClassVar[str] = "muted"


@dataclass(frozen=True)
class Badge(Block):
    text: Any
    colour: str
    kind: ClassVar[str] = "badge"


@dataclass(frozen=True)
class Code(Block):
    text: Any
    kind: ClassVar[str] = "code"


@dataclass(frozen=True)
class Pre(Block):
    """A text of several lines (or a long one), kept as it is."""

    text: Any
    kind: ClassVar[str] = "pre"


@dataclass(frozen=True)
class Bold(Block):
    text: Any
    kind: ClassVar[str] = "bold"


@dataclass(frozen=True)
class Link(Block):
    """``label`` linking to ``href``; without ``href``, the label alone."""

    href: str | None
    label: Node
    kind: ClassVar[str] = "link"


@dataclass(frozen=True)
class Joined(Block):
    """Nodes one after the other, ``sep`` (text) between them."""

    items: Sequence[Node]
    sep: str = ", "
    kind: ClassVar[str] = "joined"


@dataclass(frozen=True)
class Lines(Block):
    """Nodes one per line."""

    items: Sequence[Node]
    kind: ClassVar[str] = "lines"


@dataclass(frozen=True)
class Bullets(Block):
    items: Sequence[Node]
    kind: ClassVar[str] = "bullets"


@dataclass(frozen=True)
class KeyValues(Block):
    """Rows of (key as text, value as a node)."""

    pairs: Sequence[tuple[str, Node]]
    cls: str = "dsr-kv"
    kind: ClassVar[str] = "kv"


@dataclass(frozen=True)
class Table(Block):
    """A header of text and rows of nodes; the columns in ``numeric`` align right."""

    head: Sequence[str]
    rows: Sequence[Sequence[Node]]
    numeric: frozenset[int] = frozenset()
    cls: str = ""
    kind: ClassVar[str] = "table"


def seconds(value: Any) -> str:
    return f"{value:.2f} s" if isinstance(value, int | float) and not isinstance(value, bool) else ""


def get_map(ledger: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = ledger.get(key)
    return value if isinstance(value, Mapping) else {}


def get_list(container: Mapping[str, Any], key: str) -> list[Any]:
    value = container.get(key)
    return list(value) if isinstance(value, list) else []


@dataclass(frozen=True)
class Links:
    """How EXP_ROOT-relative ledger paths become links: ``prefix`` leads from the page to EXP_ROOT.

    ``prefix`` None: paths are shown as text (the page's location relative to EXP_ROOT is unknown).
    """

    prefix: str | None = None

    def path(self, path: Any) -> Link:
        return self.link(path, Code(path))

    def link(self, path: Any, label: Node) -> Link:
        """``label`` linking to the EXP_ROOT-relative ``path``, or just ``label`` (no href)."""
        text = str(path)
        # Only plain EXP_ROOT-relative paths become links; quote() also turns "scheme:" into "scheme%3A".
        if self.prefix is None or not text or text.startswith("/") or ".." in text.split("/") or any(
            c.isspace() for c in text
        ):
            return Link(None, label)
        return Link(self.prefix + quote(text), label)


NO_LINKS = Links()


def _looks_like_artifact(text: str) -> bool:
    return text.startswith(("artifacts/", "inputs/")) and not any(c.isspace() for c in text)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def value_node(value: Any, links: Links = NO_LINKS, depth: int = 0) -> Node:
    """One ledger value as a node: scalars inline, dicts as key/value tables, uniform lists as tables."""
    if value is None:
        return Muted("\u2013")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        if value == "":
            return Muted("(empty)")
        if "\n" in value or len(value) > 240:
            return Pre(value)
        return links.path(value) if _looks_like_artifact(value) else value
    if depth >= 4:
        return Pre(json.dumps(value, indent=1, default=str))
    if isinstance(value, Mapping):
        return _mapping_node(value, links, depth)
    if isinstance(value, list | tuple):
        if not value:
            return Muted("none")
        if all(_is_scalar(v) for v in value):
            parts = [value_node(v, links, depth + 1) for v in value]
            if sum(len(str(v)) for v in value) <= 120 and not any(_looks_like_artifact(str(v)) for v in value):
                return Joined(parts)
            return Bullets(parts)
        if all(isinstance(v, Mapping) for v in value):
            cols: list[str] = []
            for item in value:
                cols.extend(str(k) for k in item if str(k) not in cols)
            if len(cols) <= 8:
                return Table(cols, [[value_node(item.get(k), links, depth + 1) for k in cols] for item in value])
        return Bullets([value_node(v, links, depth + 1) for v in value])
    return str(value)


def _mapping_node(value: Mapping[Any, Any], links: Links, depth: int) -> Node:
    if not value:
        return Muted("none")
    inner = list(value.values())
    if len(inner) > 1 and all(isinstance(v, Mapping) and v and all(_is_scalar(x) for x in v.values())
                              for v in inner):
        # A dict of flat records (e.g. copies by manifest type): one row per key reads best.
        keys: list[str] = []
        for item in inner:
            keys.extend(str(k) for k in item if str(k) not in keys)
        if len(keys) <= 6:
            return Table(["", *keys], [[Bold(k), *(value_node(v.get(c), links, depth + 1) for c in keys)]
                                       for k, v in value.items()])
    return KeyValues([(str(k), value_node(v, links, depth + 1)) for k, v in value.items()])


def rest(section: Mapping[str, Any], shown: Sequence[str], links: Links) -> list[tuple[str, Node]]:
    """Key/values of a section not shown by its dedicated rendering: nothing of the ledger is hidden."""
    return [(str(k), value_node(v, links, 1)) for k, v in section.items() if k not in shown]
