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


def protocol_pointers() -> list[tuple[str, str, str]]:
    """Every mention of the protocol reference in code, tests, benches and scripts: (file:line, path, section)."""
    pointer = re.compile(r"(\S*)sglang_api\.md`*\)?[\s#]*(?:§(\d+(?:\.\d+)*))?")
    found = []
    for folder in ("synthgen", "tests", "bench", "scripts"):
        for source in sorted((REPO / folder).rglob("*.py")):
            if source == Path(__file__).resolve():
                continue
            text = source.read_text(encoding="utf-8")
            for match in pointer.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                where = f"{source.relative_to(REPO)}:{line}"
                found.append((where, match.group(1).lstrip("`(\"'"), match.group(2) or ""))
    return found


def test_the_protocol_reference_is_mentioned_somewhere():
    assert len(protocol_pointers()) >= 10


@pytest.mark.parametrize("where,path,section", protocol_pointers(), ids=lambda v: v)
def test_a_pointer_to_the_protocol_reference_names_its_file_in_the_repository_and_a_section_it_has(
    where, path, section
):
    assert path == "docs/", f"{where}: write the reference as docs/sglang_api.md (a path in this repository)"
    headings = (REPO / "docs" / "sglang_api.md").read_text(encoding="utf-8").splitlines()
    if section:
        assert any(re.match(rf"#+ {re.escape(section)}[. ]", h) for h in headings), f"{where}: no §{section}"
