"""The pages' templates (deploy_suite/reports/markup.py, templates/): the environment escapes every value,
every node of a view model has its macro, and the stylesheets reach the page as written."""

from __future__ import annotations

import dataclasses
import json
import re
from importlib import resources
from pathlib import Path

import pytest

from deploy_suite.reports import iteration, markup, values
from deploy_suite.reports.values import Block, Links

HOSTILE = "<img src=x onerror=\"alert('y')\">&amp;"
TEMPLATES = resources.files("deploy_suite.reports").joinpath("templates")


def _node(node: object) -> str:
    return markup.block("values.html.j2", "node", node)


def test_autoescaping_is_on_and_escapes_as_the_pages_always_did() -> None:
    assert markup._ENV.autoescape is True
    # html.escape's entities (&quot; &#x27;), not markupsafe's (&#34; &#39;): pages byte-equal to the f-string ones.
    assert _node(HOSTILE) == "&lt;img src=x onerror=&quot;alert(&#x27;y&#x27;)&quot;&gt;&amp;amp;"
    assert _node(None) == ""


EXAMPLES = [values.Muted(HOSTILE), values.Badge(HOSTILE, "#fff"), values.Code(HOSTILE), values.Pre(HOSTILE),
            values.Bold(HOSTILE), values.Link("x", HOSTILE), values.Link(None, HOSTILE), values.Joined([HOSTILE]),
            values.Lines([HOSTILE, HOSTILE]), values.Bullets([HOSTILE]), values.KeyValues([("k", HOSTILE)]),
            values.Table(["h"], [[HOSTILE]], frozenset({0}))]


def test_every_kind_of_block_has_an_example_here() -> None:
    kinds = {c for c in vars(values).values() if isinstance(c, type) and issubclass(c, Block) and c is not Block}
    assert kinds == {type(e) for e in EXAMPLES}


@pytest.mark.parametrize("block", EXAMPLES, ids=lambda b: f"{type(b).__name__}")
def test_every_block_of_a_view_model_has_its_macro_and_escapes_its_text(block: Block) -> None:
    html = _node(block)
    assert "<img" not in html and "&lt;img" in html, html


def test_a_block_without_a_macro_is_an_error_not_an_empty_cell() -> None:
    @dataclasses.dataclass(frozen=True)
    class Unknown(Block):
        kind = "unknown"

    with pytest.raises(TypeError, match="no macro for Unknown"):
        _node(Unknown())


def test_a_link_is_a_path_under_exp_root_or_only_its_label() -> None:
    assert _node(Links("../").path("artifacts/a b")) == "<code>artifacts/a b</code>"
    linked = '<a href="../artifacts/x.json"><code>artifacts/x.json</code></a>'
    assert _node(Links("../").path("artifacts/x.json")) == linked
    assert _node(Links(None).path("artifacts/x.json")) == "<code>artifacts/x.json</code>"


def test_the_templates_never_mark_a_value_safe() -> None:
    """Escaping is the environment's: no ``|safe`` and no ``autoescape false`` in any template."""
    for template in TEMPLATES.iterdir():
        text = template.read_text(encoding="utf-8")
        assert not re.search(r"\|\s*safe\b|autoescape\s+false", text), template.name


def test_the_stylesheet_reaches_the_page_as_written(ready_ledger: Path) -> None:
    css = TEMPLATES.joinpath("report.css").read_text(encoding="utf-8")
    page = iteration.render(json.loads(ready_ledger.read_text()))
    # Line breaks and indentation are dropped from the templates' own text, never from a stylesheet.
    assert f"<style>{css}</style>" in page
    assert page.startswith('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">') and page.endswith(
        "</body></html>\n")


@pytest.fixture
def ready_ledger() -> Path:
    return Path(__file__).parent / "data" / "ledger_ready.json"
