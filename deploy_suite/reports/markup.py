"""The pages' markup: Jinja2 templates, package data in ``deploy_suite/reports/templates/``, and the one
environment that renders them.

The report modules shape a ledger's values (Python: which section, which colour, which rows); the
templates hold every tag. Escaping is the templates' default, not the callers' duty: every value a
template outputs is HTML-escaped (``html.escape``, as the pages always were; None is empty text)
unless it is a fragment a template already rendered (``Markup``), and an undefined name is an error.
A line break and the indentation after it in a template's text are not output: the templates are
laid out for reading, the pages stay as compact as before (a space a page needs is on its line).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from jinja2.ext import Extension
from jinja2.lexer import Token, TokenStream
from markupsafe import Markup

_BREAK = re.compile(r"\n[ \t]*")


def esc(value: Any) -> Markup:
    """A value as HTML text: markup as it is, anything else escaped (None: empty)."""
    if hasattr(value, "__html__"):
        return Markup(value)
    return Markup(html.escape("" if value is None else str(value)))


class _JoinLines(Extension):
    """Drop a line break and the indentation after it from the templates' own text (not from values)."""

    def filter_stream(self, stream: TokenStream) -> Iterator[Token]:
        for token in stream:
            yield Token(token.lineno, "data", _BREAK.sub("", token.value)) if token.type == "data" else token


_ENV = Environment(loader=PackageLoader("deploy_suite.reports", "templates"), autoescape=True, finalize=esc,
                   undefined=StrictUndefined, extensions=[_JoinLines], keep_trailing_newline=True)


@cache
def macros(name: str) -> Any:
    """The macros of template ``name``, to call from Python (each returns ``Markup``)."""
    return _ENV.get_template(name).module


def page(name: str, **values: Any) -> str:
    """Template ``name`` rendered with ``values``."""
    return _ENV.get_template(name).render(**values)


@cache
def style(name: str) -> Markup:
    """A stylesheet of the templates folder, as the page's ``<style>`` holds it (a fixed text, no value in it)."""
    return Markup(resources.files("deploy_suite.reports").joinpath("templates", name).read_text(encoding="utf-8"))
