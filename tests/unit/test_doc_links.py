"""Every relative link of the README, docs/, CONTRIBUTING and the agent skill resolves: the file
exists, and a ``#anchor`` names a heading of it (GitHub's slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md")),
         REPO / ".agents" / "skills" / "deploy-dynamo-recipe" / "SKILL.md"]
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_CODE = re.compile(r"`[^`\n]*`")


def prose(text: str) -> str:
    """The text without fenced blocks and code spans (a link inside them is not a link)."""
    return _CODE.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for line in _FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            base = slug(match.group(1))
            name, n = base, 0
            while name in found:  # GitHub suffixes a repeated heading with -1, -2, ...
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def links(path: Path) -> list[str]:
    return [t for t in _LINK.findall(prose(path.read_text(encoding="utf-8")))
            if not re.match(r"[a-z][a-z0-9+.-]*:", t)]  # http:, https:, mailto: are not checked


def test_the_checker_sees_broken_links_and_anchors(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Top `x`\n## Two words, here\n[a](gone.md) [b](#two-words-here) [c](#nope) "
                    "`[d](inside-code.md)` [e](https://example.com)\n")
    assert links(page) == ["gone.md", "#two-words-here", "#nope"]
    assert anchors(page) == {"top-x", "two-words-here"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        name, _, anchor = target.partition("#")
        path = (page.parent / name).resolve() if name else page
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_readme_is_a_newcomers_page() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.split()) <= 1200
    assert re.findall(r"^make (\w+)", text, re.M) == ["demo", "test"], "exactly the two set-up commands"
