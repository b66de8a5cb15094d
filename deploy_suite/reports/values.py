"""Ledger values as HTML: badges, key/value and record tables, artifact paths as links.

The building blocks of ``deploy_suite.reports.iteration``: any ledger value (an evidence dict, a list of
records, a path) rendered readably. Which shape becomes which block is decided here; the tags are the
macros of ``templates/values.html.j2`` (``deploy_suite.reports.markup``), which escape every string.
Pure functions of their arguments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from markupsafe import Markup

from deploy_suite.reports.markup import esc, macros

esc = esc  # re-exported: the report modules' one escaping function (markup.esc)


def _m() -> Any:
    return macros("values.html.j2")


def muted(text: str) -> Markup:
    return Markup(_m().muted(text))


def badge(text: str, colour: str) -> Markup:
    return Markup(_m().badge(text, colour))


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

    def path(self, path: Any) -> Markup:
        return self.link(path, _m().code(path))

    def link(self, path: Any, label: str) -> Markup:
        """``label`` (text, or a rendered fragment) linking to the EXP_ROOT-relative ``path``, or just ``label``."""
        text = str(path)
        # Only plain EXP_ROOT-relative paths become links; quote() also turns "scheme:" into "scheme%3A".
        if self.prefix is None or not text or text.startswith("/") or ".." in text.split("/") or any(
            c.isspace() for c in text
        ):
            return esc(label)
        return Markup(_m().link(self.prefix + quote(text), esc(label)))


NO_LINKS = Links()


def _looks_like_artifact(text: str) -> bool:
    return text.startswith(("artifacts/", "inputs/")) and not any(c.isspace() for c in text)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def value_html(value: Any, links: Links = NO_LINKS, depth: int = 0) -> Markup:
    """One ledger value as HTML: scalars inline, dicts as key/value tables, uniform lists as tables."""
    m = _m()
    if value is None:
        return muted("\u2013")
    if isinstance(value, bool):
        return esc("yes" if value else "no")
    if isinstance(value, int | float):
        return esc(value)
    if isinstance(value, str):
        if value == "":
            return muted("(empty)")
        if "\n" in value or len(value) > 240:
            return Markup(m.pre(value))
        return links.path(value) if _looks_like_artifact(value) else esc(value)
    if depth >= 4:
        return Markup(m.pre(json.dumps(value, indent=1, default=str)))
    if isinstance(value, Mapping):
        return _mapping_html(value, links, depth)
    if isinstance(value, list | tuple):
        if not value:
            return muted("none")
        if all(_is_scalar(v) for v in value):
            parts = [value_html(v, links, depth + 1) for v in value]
            if sum(len(str(v)) for v in value) <= 120 and not any(_looks_like_artifact(str(v)) for v in value):
                return Markup(m.joined(parts, ", "))
            return Markup(m.ul(parts))
        if all(isinstance(v, Mapping) for v in value):
            cols: list[str] = []
            for item in value:
                cols.extend(str(k) for k in item if str(k) not in cols)
            if len(cols) <= 8:
                return html_table(cols, [[value_html(item.get(k), links, depth + 1) for k in cols] for item in value])
        return Markup(m.ul([value_html(v, links, depth + 1) for v in value]))
    return esc(value)


def _mapping_html(value: Mapping[Any, Any], links: Links, depth: int) -> Markup:
    if not value:
        return muted("none")
    inner = list(value.values())
    if len(inner) > 1 and all(isinstance(v, Mapping) and v and all(_is_scalar(x) for x in v.values())
                              for v in inner):
        # A dict of flat records (e.g. copies by manifest type): one row per key reads best.
        keys: list[str] = []
        for item in inner:
            keys.extend(str(k) for k in item if str(k) not in keys)
        if len(keys) <= 6:
            return html_table(["", *keys], [[Markup(_m().bold(k)), *(value_html(v.get(c), links, depth + 1)
                                                                      for c in keys)] for k, v in value.items()])
    return kv_table([(str(k), value_html(v, links, depth + 1)) for k, v in value.items()])


def kv_table(pairs: Sequence[tuple[str, str]], cls: str = "dsr-kv") -> Markup:
    """Rows of (key as text, value as a rendered fragment)."""
    return Markup(_m().kv_table(pairs, cls))


def html_table(head: Sequence[str], rows: Sequence[Sequence[str]], numeric: frozenset[int] = frozenset(),
               cls: str = "") -> Markup:
    """A table with a header of text and rendered cells; ``numeric`` column indexes align right."""
    return Markup(_m().html_table(head, rows, numeric, cls))


def rest(section: Mapping[str, Any], shown: Sequence[str], links: Links) -> list[tuple[str, Markup]]:
    """Key/values of a section not shown by its dedicated rendering: nothing of the ledger is hidden."""
    return [(str(k), value_html(v, links, 1)) for k, v in section.items() if k not in shown]


def code(text: Any) -> Markup:
    return Markup(_m().code(text))
