"""Ledger values as HTML: escaping, badges, key/value and record tables, artifact paths as links.

The building blocks of ``deploy_suite.reports.iteration``: any ledger value (an evidence dict, a list of
records, a path) rendered readably, every string HTML-escaped. Pure functions of their arguments.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def muted(text: str) -> str:
    return f'<span class="dsr-muted">{esc(text)}</span>'


def badge(text: str, colour: str) -> str:
    return f'<span class="dsr-badge" style="background:{colour}">{esc(text)}</span>'


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

    def path(self, path: Any) -> str:
        return self.link(path, f"<code>{esc(path)}</code>")

    def link(self, path: Any, label: str) -> str:
        """``label`` (already HTML) linking to the EXP_ROOT-relative ``path``, or just ``label``."""
        text = str(path)
        # Only plain EXP_ROOT-relative paths become links; quote() also turns "scheme:" into "scheme%3A".
        if self.prefix is None or not text or text.startswith("/") or ".." in text.split("/") or any(
            c.isspace() for c in text
        ):
            return label
        return f'<a href="{esc(self.prefix + quote(text))}">{label}</a>'


NO_LINKS = Links()


def _looks_like_artifact(text: str) -> bool:
    return text.startswith(("artifacts/", "inputs/")) and not any(c.isspace() for c in text)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def value_html(value: Any, links: Links = NO_LINKS, depth: int = 0) -> str:
    """One ledger value as HTML: scalars inline, dicts as key/value tables, uniform lists as tables."""
    if value is None:
        return muted("\u2013")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return esc(value)
    if isinstance(value, str):
        if value == "":
            return muted("(empty)")
        if "\n" in value or len(value) > 240:
            return f"<pre>{esc(value)}</pre>"
        return links.path(value) if _looks_like_artifact(value) else esc(value)
    if depth >= 4:
        return f"<pre>{esc(json.dumps(value, indent=1, default=str))}</pre>"
    if isinstance(value, Mapping):
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
                return html_table(["", *keys], [[f"<b>{esc(k)}</b>", *(value_html(v.get(c), links, depth + 1)
                                                                for c in keys)] for k, v in value.items()])
        return kv_table([(str(k), value_html(v, links, depth + 1)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        if not value:
            return muted("none")
        if all(_is_scalar(v) for v in value):
            parts = [value_html(v, links, depth + 1) for v in value]
            if sum(len(str(v)) for v in value) <= 120 and not any(_looks_like_artifact(str(v)) for v in value):
                return ", ".join(parts)
            return "<ul>" + "".join(f"<li>{p}</li>" for p in parts) + "</ul>"
        if all(isinstance(v, Mapping) for v in value):
            cols: list[str] = []
            for item in value:
                cols.extend(str(k) for k in item if str(k) not in cols)
            if len(cols) <= 8:
                return html_table(cols, [[value_html(item.get(k), links, depth + 1) for k in cols] for item in value])
        return "<ul>" + "".join(f"<li>{value_html(v, links, depth + 1)}</li>" for v in value) + "</ul>"
    return esc(value)


def kv_table(pairs: Sequence[tuple[str, str]], cls: str = "dsr-kv") -> str:
    """Rows of (escaped-by-us key, already-rendered HTML value)."""
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in pairs)
    return f'<table class="{cls}"><tbody>{rows}</tbody></table>'


def html_table(head: Sequence[str], rows: Sequence[Sequence[str]], numeric: frozenset[int] = frozenset(),
           cls: str = "") -> str:
    """A table with an escaped header and already-rendered cells; ``numeric`` column indexes align right."""
    def td(i: int, cell: str, tag: str = "td") -> str:
        return f'<{tag} class="dsr-num">{cell}</{tag}>' if i in numeric else f"<{tag}>{cell}</{tag}>"

    thead = "".join(td(i, esc(h), "th") for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(td(i, c) for i, c in enumerate(row)) + "</tr>" for row in rows)
    klass = f' class="{cls}"' if cls else ""
    return f"<table{klass}><thead><tr>{thead}</tr></thead><tbody>{body}</tbody></table>"


def rest(section: Mapping[str, Any], shown: Sequence[str], links: Links) -> list[tuple[str, str]]:
    """Key/values of a section not shown by its dedicated rendering: nothing of the ledger is hidden."""
    return [(str(k), value_html(v, links, 1)) for k, v in section.items() if k not in shown]
