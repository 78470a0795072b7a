"""``venn report``: the audit database rendered into a summary and plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from venn.settings import Settings


def report(
    database_url: Annotated[
        str,
        typer.Option(
            help="Audit DB URL (default: VENN_DATABASE_URL, else the running stack's database)."
        ),
    ] = "",
    out: Annotated[Path, typer.Option(help="Directory for the summary and plots.")] = Path(
        "report"
    ),
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Summarise the audit database: per-job JCT, scheduling delay against response time,
    failed rounds by reason, per-tier figures; writes summary.md, summary.json and PNGs."""
    from venn.report import AuditUnavailable, build_report, load_audit, write_report
    from venn.report.load import display_url
    from venn.report.render import report_json

    url = database_url or Settings.from_env().database_url
    try:
        rows = load_audit(url)
    except AuditUnavailable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    figures = build_report(rows.jobs, rows.rounds)
    source = display_url(url)
    try:
        written = write_report(figures, rows.rounds, out, source)
    except OSError as exc:
        typer.echo(f"error: cannot write the report to {out}: {exc.strerror or exc}", err=True)
        raise typer.Exit(1) from None
    if as_json:
        print(json.dumps(report_json(figures, source)))
        return
    # Plain lines, not rich's: paths and URLs must not be wrapped.
    typer.echo(
        f"{figures.jobs_total} jobs ({figures.jobs_finished} finished), "
        f"{figures.rounds_total} rounds ({figures.rounds_failed} failed) from {source}"
    )
    if figures.jct.mean is not None:
        typer.echo(f"mean JCT {figures.jct.mean:,.1f} s over {figures.jct.count} finished jobs")
    typer.echo("wrote " + ", ".join(str(p) for p in written))


def register(app: typer.Typer) -> None:
    """Attach the report command to the CLI."""
    app.command()(report)
