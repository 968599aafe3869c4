"""The documentation's relative links resolve, and the README stays one screen.

For README.md, every docs/*.md and results/README.md: each relative Markdown link
`[text](path)` or `[text](path#anchor)` (images too) names a file or folder that exists, and an
anchor names a heading of the target, by GitHub's slug rule. External links (http, https,
mailto) are not checked. Links inside fenced code blocks and inline code are not links.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MAX_README_LINES = 200

# [text](target) or ![alt](target); the target may carry a "title".
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = ("http://", "https://", "mailto:", "ftp://")


def documents() -> list[Path]:
    return [README, *sorted((REPO / "docs").glob("*.md")), REPO / "results" / "README.md"]


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * len(match.group(1))
            continue
        if fence is not None:
            if line.strip().startswith(fence) and set(line.strip()) <= {fence[0]}:
                fence = None
            continue
        yield number, line


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: the rendered text, lowercased, punctuation removed
    (letters, digits, marks, `_`, `-` and spaces kept), spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    kept = []
    for char in text.lower():
        category = unicodedata.category(char)
        if char in "-_ " or category[0] in "LNM":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    slugs = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        slugs.add(slug if count == 0 else f"{slug}-{count}")
    return slugs


def relative_links(path: Path):
    """(line number, target) for every relative link of a Markdown file."""
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            target = match.group(1)
            if not target.lower().startswith(EXTERNAL):
                yield number, target


def broken_links(path: Path) -> list[str]:
    problems = []
    for number, target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        where = f"{path.relative_to(REPO)}:{number}: {target}"
        resolved = (path.parent / unquote(file_part)).resolve() if file_part else path
        if file_part.startswith("/"):
            problems.append(f"{where}: absolute path; link relative to the file")
            continue
        if not resolved.exists():
            shown = resolved.relative_to(REPO) if resolved.is_relative_to(REPO) else resolved
            problems.append(f"{where}: no such file {shown}")
            continue
        if anchor and resolved.suffix == ".md" and unquote(anchor).lower() not in anchors(resolved):
            problems.append(f"{where}: no heading with anchor #{anchor} in "
                            f"{resolved.relative_to(REPO)}")
    return problems


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(path):
    assert path.exists(), f"{path} is missing"
    problems = broken_links(path)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_every_docs_page_is_linked_from_the_readme():
    linked = {target.partition("#")[0] for _, target in relative_links(README)}
    pages = {f"docs/{page.name}" for page in (REPO / "docs").glob("*.md")}
    assert not pages - linked, f"docs pages the README does not link: {sorted(pages - linked)}"


def test_readme_is_one_screen_and_starts_with_the_two_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines (at most {MAX_README_LINES}): move detail to docs/")
    head = "\n".join(lines[:40])
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", head, flags=re.M | re.S)
    code = "\n".join(blocks)
    for command in ("run_ablations.py --space components", "python -m pytest"):
        assert command in code, (
            f"no fenced code block within README.md's first 40 lines holds {command!r}")


def test_github_slug():
    assert github_slug("Hyperparameter search (`hpo`)") == "hyperparameter-search-hpo"
    assert github_slug("Data: a 4.3 GB file dataset") == "data-a-43-gb-file-dataset"
    assert github_slug("Memory-aware defaults: `--auto-batch`, `--diagnose`") == (
        "memory-aware-defaults---auto-batch---diagnose")
    assert github_slug("Training switches (`benchmarks/switches.py`)") == (
        "training-switches-benchmarksswitchespy")
    assert github_slug("The `components` space") == "the-components-space"


def test_checker_finds_a_broken_link_and_a_broken_anchor(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Some section\n")
    page = tmp_path / "README.md"
    page.write_text("[ok](docs/a.md#some-section) [gone](docs/b.md) [bad](docs/a.md#nope)\n"
                    "`[code](not/a/link.md)` [web](https://example.com/x.md)\n"
                    "```\n[fenced](not/a/link.md)\n```\n")
    problems = broken_links(page)
    assert len(problems) == 2, problems
    assert "docs/b.md" in problems[0] and "#nope" in problems[1]
