"""Every relative link of the README and docs/ points at a file of the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_relative_link_reaches_a_file() -> None:
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a URL, or an anchor in the same page
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


def test_the_readme_lists_every_page_of_docs_and_the_quickstart_first() -> None:
    text = (ROOT / "README.md").read_text()
    listed = re.findall(r"^- \[docs/([\w-]+\.md)\]", text, flags=re.M)
    assert sorted(listed) == sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert listed[0] == "quickstart.md", listed
