"""The ``venn`` command line: simulator commands, the local stack, jobs, tokens, audit
reports and the settings (`venn config`)."""

from __future__ import annotations

import typer

from venn.cli import (
    config_commands,
    job_commands,
    report_commands,
    sim_commands,
    stack_commands,
    token_commands,
)

app = typer.Typer(
    help="Venn: a resource manager for collaborative (federated) learning jobs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
sim_commands.register(app)
stack_commands.register(app)
report_commands.register(app)
token_commands.register(app)
job_commands.register(app)
config_commands.register(app)


def main() -> None:
    app()
