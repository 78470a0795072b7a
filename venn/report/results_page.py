"""Generated blocks in docs/results pages: each bench owns the text between its markers,
and everything outside them is hand-written and kept."""

from __future__ import annotations

from pathlib import Path


def write_block(page: Path, name: str, text: str, title: str) -> None:
    """Replace the block ``name`` of ``page`` with ``text``; a missing page is created with
    ``title`` and the block, a page without the block gets it appended."""
    begin, end = f"<!-- bench:{name} begin -->", f"<!-- bench:{name} end -->"
    block = f"{begin}\n{text.rstrip()}\n{end}"
    if not page.exists():
        page.write_text(f"# {title}\n\n{block}\n")
        return
    doc = page.read_text()
    if begin not in doc:
        page.write_text(f"{doc.rstrip()}\n\n{block}\n")
        return
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    page.write_text(f"{head}{block}{tail}")
