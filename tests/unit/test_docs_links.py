"""The front page and the manual stay connected: every relative link in README.md, docs/ and
bench/README.md names a file that exists, and an anchor names a heading of that file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "bench" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to dashes."""
    found = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def links() -> list[tuple[Path, str]]:
    out = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        out += [(page, target) for target in LINK.findall(text) if not re.match(r"[a-z]+://", target)]
    return out


def test_the_manual_has_pages_and_the_front_page_links_every_one():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    pages = sorted((REPO / "docs").glob("*.md"))
    assert len(pages) >= 10
    missing = [page.name for page in pages if f"(docs/{page.name})" not in readme]
    assert not missing, f"docs pages the README does not link: {missing}"


@pytest.mark.parametrize("page,target", links(), ids=lambda v: v.name if isinstance(v, Path) else v)
def test_a_relative_link_names_a_file_and_a_heading_that_exist(page, target):
    path, _, anchor = target.partition("#")
    resolved = (page.parent / path).resolve() if path else page
    assert resolved.exists(), f"{page.relative_to(REPO)}: link to missing {target}"
    if anchor:
        assert anchor in anchors(resolved), f"{page.relative_to(REPO)}: no heading #{anchor} in {path or page.name}"
