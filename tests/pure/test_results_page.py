"""The generated blocks of docs/results pages: a bench rewrites its block and keeps the rest."""

from __future__ import annotations

from pathlib import Path

from bench.common import write_block


def test_a_block_is_created_appended_and_replaced_keeping_the_hand_written_text(
    tmp_path: Path,
) -> None:
    page = tmp_path / "x.md"
    write_block(page, "x", "first", "X")
    assert page.read_text() == "# X\n\n<!-- bench:x begin -->\nfirst\n<!-- bench:x end -->\n"
    page.write_text(page.read_text() + "\nHand-written.\n")
    write_block(page, "x", "second\n", "ignored")
    text = page.read_text()
    assert "second" in text and "first" not in text and text.endswith("\nHand-written.\n")
    write_block(page, "y", "other", "ignored")
    assert page.read_text().startswith(text.rstrip()) and "<!-- bench:y end -->" in page.read_text()
