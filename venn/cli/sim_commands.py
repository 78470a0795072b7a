"""``venn sim`` and ``venn reproduce``."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the simulator commands to the CLI."""
    _ = app
