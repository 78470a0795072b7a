"""``venn config``: every setting, its variable and the value this process would use."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from venn.settings import Settings, configuration_markdown, describe, sections

MASK = "(set)"


def shown(value: object, secret: bool) -> str:
    """A value as `venn config` prints it: a set secret as MASK, never its text."""
    text = "1" if value is True else "0" if value is False else str(value)
    return MASK if secret and text else text


def config(
    markdown: Annotated[
        bool, typer.Option("--markdown", help="Print docs/configuration.md (the defaults).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object: variable -> value.")] = (
        False
    ),
) -> None:
    """Print every setting (environment variable, value, default), read as every Venn process
    reads them: the environment, then the stack `venn up` runs in VENN_RUN_DIR. Secrets are
    masked."""
    if markdown:
        typer.echo(configuration_markdown(), nl=False)
        return
    docs = describe(Settings.from_env())
    if as_json:
        typer.echo(json.dumps({d.env: shown(d.value, d.secret) for d in docs}, indent=1))
        return
    console = Console()
    for name, title, _, _ in sections():
        table = Table(title=title, title_justify="left", show_lines=False)
        for column in ("variable", "value", "default"):
            table.add_column(column, overflow="fold")
        for d in (d for d in docs if d.section == name):
            value = shown(d.value, d.secret)
            table.add_row(d.env, value if value != d.default else f"[dim]{value}[/dim]", d.default)
        console.print(table)


def register(app: typer.Typer) -> None:
    """Attach `venn config` to the CLI."""
    app.command()(config)
