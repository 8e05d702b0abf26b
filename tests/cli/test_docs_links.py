"""Every relative link and image in README.md and docs/*.md points to a file of the repository, and every
#anchor to a heading of its target."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
CODE_BLOCK = re.compile(r"^```.*?^```", re.S | re.M)


def _anchors(path: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation other than '-' and '_' dropped, spaces to '-'."""
    text = CODE_BLOCK.sub("", path.read_text())
    headings = re.findall(r"^#+\s+(.*?)\s*$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def _links(page: Path) -> list[str]:
    return [t for t in LINK.findall(CODE_BLOCK.sub("", page.read_text())) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    broken = []
    for target in _links(page):
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


def test_readme_is_a_short_guide_with_the_ci_command():
    text = (ROOT / "README.md").read_text()
    assert len(text) <= 15_000
    assert "make test" in text and "make setup" in text
    assert (ROOT / "docs").is_dir()
