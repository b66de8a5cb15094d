"""The pages' markup: Jinja2 templates, package data in ``deploy_suite/reports/templates/``, and the one
environment that renders them.

The report modules build view models (``deploy_suite.reports.values``: which section, which colour,
which rows, as plain data and the nodes of ``values``); the templates hold every tag and draw the
view models. Escaping is the environment's, never a caller's duty: autoescaping is on, every value a
template outputs is HTML-escaped (by ``html.escape``, the entities the pages always had; None is
empty text) unless it is a fragment a template rendered (a macro's output), and an undefined name
is an error. A line break and the indentation after it in a template's text are not output: the
templates are laid out for reading, the pages stay as compact as before (a space a page needs is on
its line); the stylesheets (``*.css``) are included as they are.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any, NoReturn

from jinja2 import Environment, PackageLoader, StrictUndefined
from jinja2.ext import Extension
from jinja2.lexer import Token, TokenStream
from markupsafe import Markup

from deploy_suite.reports.values import Block

_BREAK = re.compile(r"\n[ \t]*")


def _escaped(value: Any) -> Any:
    """What ``{{ value }}`` outputs: a macro's output as it is, anything else escaped (None: empty)."""
    if hasattr(value, "__html__"):
        return value
    # Markup: this is the escaping itself (html.escape rather than markupsafe's escape, whose
    # entities for quotes differ), so that autoescaping does not escape it twice.
    return Markup(html.escape("" if value is None else str(value)))


def _unknown_block(value: object) -> NoReturn:
    raise TypeError(f"templates/values.html.j2 has no macro for {type(value).__name__}")


class _JoinLines(Extension):
    """Drop a line break and the indentation after it from the templates' own text (not from values),
    except in a stylesheet, which is included as written."""

    def filter_stream(self, stream: TokenStream) -> Iterator[Token]:
        keep = (stream.name or "").endswith(".css")
        for token in stream:
            yield Token(token.lineno, "data", _BREAK.sub("", token.value)) if token.type == "data" and not keep \
                else token


_ENV = Environment(loader=PackageLoader("deploy_suite.reports", "templates"), autoescape=True, finalize=_escaped,
                   undefined=StrictUndefined, extensions=[_JoinLines], keep_trailing_newline=True)
_ENV.tests["block"] = lambda value: isinstance(value, Block)
_ENV.globals["unknown_block"] = _unknown_block


def page(template: str, **view: Any) -> str:
    """A page: template ``template`` drawing the view model ``view``."""
    return _ENV.get_template(template).render(**view)


def block(template: str, macro: str, *view: Any) -> str:
    """A block of a page (pytest-html's summary, a step's extra): macro ``macro`` of ``template``
    drawing the view model ``view``."""
    return str(getattr(_ENV.get_template(template).module, macro)(*view))
