"""``venn up``, ``venn down`` and ``venn demo``: the local stack on embedded defaults."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the stack commands to the CLI."""
    _ = app
