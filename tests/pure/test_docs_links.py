"""Every reference in README.md and docs/ resolves inside the repository.

Checked: Markdown links and images with a relative target (the file, and a ``#fragment``
against the target's headings), and repository paths written in prose or code spans
(``venn/core/irs.py``, ``docs/results/bench/*.json``). Paths under docs/ named in the code
(a bench's output, a docstring's pointer) must exist too.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP_DIRS = ("venn", "services", "docs", "bench", "tests", "loadtest", "ops", "schemas",
            "migrations", ".ci")  # fmt: skip
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
REPO_PATH = re.compile(
    r"(?<![\w./-])(?:\.\./)*((?:" + "|".join(re.escape(d) for d in TOP_DIRS) + r")/[\w.*/-]*\w)"
)
CODE_DOC_PATH = re.compile(r"(?<![\w./-])(docs/[\w.*/-]*\w)")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces -> '-'."""
    text = re.sub(r"`|\*\*|__", "", heading.strip()).lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in ("L", "N"))
    return kept.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in FENCE.sub("", path.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return frozenset(found)


def exists(path_text: str) -> bool:
    if any(c in path_text for c in "*?["):
        return any(ROOT.glob(path_text))
    return (ROOT / path_text).exists()


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT)) if ROOT in path.parents else str(path)


def broken_links(md: Path) -> list[str]:
    text = md.read_text()
    problems = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, fragment = target.partition("#")
        dest = (md.parent / path_part).resolve() if path_part else md
        if not dest.exists():
            problems.append(f"{_name(md)}: link to missing {target}")
            continue
        if ROOT not in dest.parents and ROOT in md.parents:
            problems.append(f"{_name(md)}: link outside the repository: {target}")
            continue
        if fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            problems.append(f"{_name(md)}: no heading #{fragment} in {path_part or md.name}")
    return problems


def missing_paths(text: str, pattern: re.Pattern[str] = REPO_PATH) -> list[str]:
    without_links = LINK.sub(" ", text)
    return sorted({p for p in pattern.findall(without_links) if not exists(p.rstrip("."))})


@pytest.mark.parametrize("md", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(md: Path) -> None:
    assert broken_links(md) == []


@pytest.mark.parametrize("md", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_repository_paths_named_in_docs_exist(md: Path) -> None:
    assert missing_paths(md.read_text()) == []


def test_docs_paths_named_in_code_exist() -> None:
    missing = {}
    for top in ("venn", "services", "bench", "loadtest", "tests"):
        for py in sorted((ROOT / top).rglob("*.py")):
            found = missing_paths(py.read_text(), CODE_DOC_PATH)
            if found:
                missing[str(py.relative_to(ROOT))] = found
    assert missing == {}


def test_docs_index_lists_every_page() -> None:
    index = ROOT / "docs" / "README.md"
    linked = {
        (index.parent / t.partition("#")[0]).resolve()
        for t in LINK.findall(index.read_text())
        if not re.match(r"^[a-z][a-z0-9+.-]*:", t)
    }
    pages = {p.resolve() for p in (ROOT / "docs").rglob("*.md")} - {index.resolve()}
    assert sorted(str(p.relative_to(ROOT)) for p in pages - linked) == []


def test_the_checker_finds_what_it_should(tmp_path: Path) -> None:
    """The checks above can fail: a broken link, a broken anchor, a missing path."""
    page = ROOT / "docs" / "README.md"
    assert broken_links(page) == []
    fake = tmp_path / "page.md"
    fake.write_text("# Title\n[a](missing.md) [b](#nowhere) [c](#title) [d](https://x.org/y)\n")
    assert broken_links(fake) == [
        f"{fake}: link to missing missing.md",
        f"{fake}: no heading #nowhere in page.md",
    ]
    assert missing_paths("see `venn/core/nothing_here.py` and venn/core/irs.py") == [
        "venn/core/nothing_here.py"
    ]
    assert slug("The `venn` policy: why (and how)") == "the-venn-policy-why-and-how"


def test_the_readme_is_a_front_door() -> None:
    """At most 10 KB; its diagram and the architecture's topic table name every topic; its
    folder map names every top-level folder and every package of venn/ and services/."""
    from venn.broker.topics import ALL_TOPICS

    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= 10_000
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    for text in (readme, architecture):
        assert [t for t in ALL_TOPICS if t not in text] == []
    tracked = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    tracked -= {"run", "build", "dist", "report"} | {p for p in tracked if "egg-info" in p}
    packages = {
        f"{top}/{p.name}/"
        for top in ("venn", "services")
        for p in (ROOT / top).iterdir()
        if (p / "__init__.py").is_file()
    }
    tracked -= {"venn", "services"}  # named package by package
    wanted = {f"`{name}/`" for name in tracked} | {f"`{p}`" for p in packages}
    assert sorted(w for w in wanted if w not in readme) == []
