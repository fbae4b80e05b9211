"""Every relative link in the Markdown docs points at a file that exists, and every
``#anchor`` into a Markdown page names one of its headings (GitHub's slugs: a code span's
underscores stay, as in ``#hostile-inputs-hostile_inputspy-default-options``)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _pages() -> list[Path]:
    return [
        REPO / "README.md",
        REPO / "bench" / "README.md",
        REPO / "bench" / "HISTORY.md",
        *sorted((REPO / "docs").rglob("*.md")),
    ]


def _slug(heading: str) -> str:
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(h) for h in HEADING.findall(FENCE.sub("", page.read_text()))}


def broken_links(pages: list[Path], root: Path) -> list[str]:
    """``page: target`` for every relative link whose file or anchor does not exist."""
    broken = []
    for page in pages:
        for target in LINK.findall(FENCE.sub("", page.read_text())):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(root)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.relative_to(root)}: {target} (no such heading)")
    return broken


def test_every_relative_docs_link_resolves() -> None:
    pages = _pages()
    assert len(pages) > 5 and all(p.exists() for p in pages)
    assert broken_links(pages, REPO) == []


def test_a_dangling_link_or_anchor_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Real `heading`: yes\n\n## Of `snake_case.py`\n")
    page.write_text(
        "[ok](other.md#real-heading-yes) [web](https://x.dev/y.md) [self](#top)\n"
        "[code](other.md#of-snake_casepy) [nounderscore](other.md#of-snakecasepy)\n"
        "[gone](missing.md) [bad](other.md#nope)\n\n# Top\n"
    )
    assert broken_links([page], tmp_path) == [
        "page.md: other.md#of-snakecasepy (no such heading)",
        "page.md: missing.md",
        "page.md: other.md#nope (no such heading)",
    ]
