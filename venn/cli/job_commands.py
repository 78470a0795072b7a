"""``venn job submit|list|status|cancel``, ``venn devices``, ``venn plan``: the job API
(services/gateway/jobs_api.py) from the command line. Every command takes --json; errors
are one line on stderr with exit code 1 (stack or broker not there) or 2 (refused)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Column, Table

from venn.cli.api_client import ApiClient, ApiFailure
from venn.jobspec import JobSpecError, parse_job_spec

app = typer.Typer(help="Submit, list, watch and cancel jobs.", no_args_is_help=True)
console = Console()
quiet = Console(quiet=True)


def _spinner(text: str, as_json: bool) -> Any:
    """A spinner on long commands (none with --json: stdout stays machine-readable)."""
    return (quiet if as_json else console).status(text)


Url = Annotated[str | None, typer.Option("--url", help="Gateway URL (VENN_API_URL).")]
Token = Annotated[str | None, typer.Option("--token", help="API token (VENN_API_TOKEN).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _call(fn: Callable[[ApiClient], Any], url: str | None, token: str | None) -> Any:
    try:
        return fn(ApiClient.locate(url, token))
    except ApiFailure as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exc.code) from None


def _print_json(payload: Any) -> None:
    typer.echo(json.dumps(payload, indent=2, sort_keys=True))


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d}" if hours < 48 else f"{hours / 24:.1f} d"


def _estimate(job: dict[str, Any]) -> str:
    """When the job is estimated to finish, from now ("-": ended or no estimate)."""
    if job.get("state") not in ("submitted", "running"):
        return "-"
    remaining = job.get("estimated_remaining_s")
    if remaining is None:
        return "never at this supply" if job.get("estimate_state") == "never" else "-"
    late = job.get("estimated_remaining_p90_s")
    band = f" (P90 {_duration(late)})" if late is not None else ""
    return f"in {_duration(remaining)}{band}"


def _job_line(job: dict[str, Any]) -> list[str]:
    open_round = job.get("open_round") or {}
    met = f"{open_round.get('assigned', 0)}/{open_round.get('demand')}" if open_round else "-"
    return [
        str(job["job_id"]),
        str(job["state"]),
        f"{job['round']}/{job['rounds']}",
        met,
        f"{job.get('sched_delay_s', 0):.1f}",
        f"{job.get('response_time_s', 0):.1f}",
        str(job.get("waiting") or "-"),
        _estimate(job),
    ]


def _jobs_table(jobs: list[dict[str, Any]]) -> Table:
    # Ids stay whole on one line (they are copied into `venn job status`); the other
    # columns give way on a narrow terminal.
    widest = max((len(str(job["job_id"])) for job in jobs), default=3)
    table = Table(
        Column("job", no_wrap=True, min_width=widest),
        Column("state", no_wrap=True),
        Column("round", no_wrap=True),
        "demand met", "sched delay s", "response s", "waits", "finishes",
    )  # fmt: skip
    for job in jobs:
        table.add_row(*_job_line(job))
    return table


def _job_detail(job: dict[str, Any]) -> Table:
    """One job, a field per line: what `venn job status` shows."""
    table = Table(show_header=False, box=None)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    line = dict(zip(("job", "state", "round", "demand met", "sched delay s", "response s",
                     "waits", "finishes"), _job_line(job), strict=True))  # fmt: skip
    requirement = job.get("requirement") or {}
    line["requirement"] = ", ".join(f"{k}>={v:g}" for k, v in requirement.items()) or "any"
    line["deadline s"] = str(job.get("deadline_s"))
    if job.get("jct_s") is not None:
        line["jct s"] = f"{job['jct_s']:.1f}"
    admission = job.get("admission")
    if admission:
        line["admission"] = f"{admission['decision']}: {admission['reason']}"
    for name, value in line.items():
        table.add_row(name, value)
    return table


@app.command()
def submit(
    file: Path,
    queue: Annotated[
        bool, typer.Option("--queue", help="Wait in the queue rather than be refused.")
    ] = False,
    finish_within: Annotated[
        float | None,
        typer.Option(help="Refuse it unless it is estimated to finish within SECONDS."),
    ] = None,
    accept_late: Annotated[
        bool,
        typer.Option("--accept-late", help="Admit it with a warning if it would finish late."),
    ] = False,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Submit the job in FILE (YAML or JSON: requirement, demand, rounds, deadline_s,
    optional finish_by). Refused (exit 2) with the reason and its counts when admission
    says no; --queue waits for admission instead."""
    try:
        body = file.read_bytes()
        parse_job_spec(body)  # a malformed file is refused here, before any request
    except OSError as exc:
        typer.echo(f"error: cannot read {file}: {exc.strerror}", err=True)
        raise typer.Exit(2) from None
    except JobSpecError as exc:
        typer.echo(f"error: malformed job file {file}: {exc.detail}", err=True)
        raise typer.Exit(2) from None
    params = {"queue": queue, "accept_late": accept_late}
    query = "&".join(f"{k}=true" for k, v in params.items() if v)
    if finish_within is not None:
        query += f"{'&' if query else ''}finish_by={time.time() + finish_within:.0f}"
    path = "/v1/jobs" + (f"?{query}" if query else "")
    with _spinner("submitting", as_json):
        answer = _call(lambda c: c.request("POST", path, body), url, token)
    if as_json:
        _print_json(answer)
        return
    if answer.get("state") == "queued":
        typer.echo(f"job {answer['job_id']} queued: {answer['detail']}")
    else:
        said = "submitted" if answer["created"] else "already there"
        typer.echo(f"job {answer['job_id']} {said}")
    if answer.get("estimated_finish") is not None:
        now = time.time()
        remaining = max(0.0, answer["estimated_finish"] - now)
        late = answer.get("estimated_finish_p90")
        band = f" (P90 {_duration(max(0.0, late - now))})" if late is not None else ""
        typer.echo(f"estimated to finish in {_duration(remaining)}{band}")
    if answer.get("warning"):
        typer.echo(f"warning: {answer['warning']}")
    if answer.get("token"):
        typer.echo(f"job token: {answer['token']}")
    typer.echo(answer["coordinator"])


@app.command("list")
def list_jobs(url: Url = None, token: Token = None, as_json: AsJson = False) -> None:
    """Every job: state, round k of n, demand met, delays, why it waits."""
    jobs = _call(lambda c: c.request("GET", "/v1/jobs"), url, token)["jobs"]
    if as_json:
        _print_json(jobs)
    else:
        console.print(_jobs_table(jobs))


@app.command()
def status(
    job_id: str,
    watch: Annotated[bool, typer.Option("--watch", help="Refresh until the job ends.")] = False,
    interval: Annotated[float, typer.Option(help="Refresh period, seconds.")] = 1.0,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """One job's status; --watch follows it (a progress bar) until it ends."""
    path = f"/v1/jobs/{job_id}"
    job = _call(lambda c: c.request("GET", path), url, token)
    if watch and not as_json:
        from rich.progress import BarColumn, Progress, TextColumn

        with Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}")
        ) as progress:
            bar = progress.add_task(job_id, total=job["rounds"] or 1, info="")
            while True:
                waits = job.get("waiting") or "-"
                progress.update(
                    bar, completed=job["rounds_done"], info=f"{job['state']}, waits: {waits}"
                )
                if job["state"] not in ("queued", "submitted", "running"):
                    break
                time.sleep(interval)
                job = _call(lambda c: c.request("GET", path), url, token)
    elif watch:
        while job["state"] in ("queued", "submitted", "running"):
            time.sleep(interval)
            job = _call(lambda c: c.request("GET", path), url, token)
    if as_json:
        _print_json(job)
    else:
        console.print(_job_detail(job))


@app.command()
def cancel(job_id: str, url: Url = None, token: Token = None, as_json: AsJson = False) -> None:
    """Cancel a job and wait until the job view says so."""
    path = f"/v1/jobs/{job_id}"
    with _spinner(f"cancelling {job_id}", as_json):
        answer = _call(lambda c: c.request("DELETE", path), url, token)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            job = _call(lambda c: c.request("GET", path), url, token)
            if job["state"] == "cancelled":
                answer = {"job_id": job_id, "state": "cancelled"}
                break
            time.sleep(0.3)
    if as_json:
        _print_json(answer)
    else:
        typer.echo(f"job {job_id}: {answer['state']}")


def devices(url: Url = None, token: Token = None, as_json: AsJson = False) -> None:
    """Devices seen and check-in rate per eligibility group (the scheduler's snapshot)."""
    supply = _call(lambda c: c.request("GET", "/v1/devices"), url, token)
    if as_json:
        _print_json(supply)
        return
    if not supply["available"]:
        typer.echo("no snapshot from the scheduler yet")
        return
    table = Table("device group", "eligible for job groups", "check-ins in window", "per s")
    for d in supply["device_groups"]:
        table.add_row(
            str(d["device_group"]),
            ",".join(map(str, d["eligible_for"])) or "-",
            str(d["checkins_in_window"]),
            f"{d['checkin_rate_per_s']:.2f}",
        )
    console.print(table)
    typer.echo(f"check-ins/s: {supply['checkin_rate_per_s']:.2f}, busy: {supply['busy_devices']}")


def plan(url: Url = None, token: Token = None, as_json: AsJson = False) -> None:
    """Which device groups feed which job group (the scheduler's snapshot)."""
    current = _call(lambda c: c.request("GET", "/v1/plan"), url, token)
    if as_json:
        _print_json(current)
        return
    if not current["available"]:
        typer.echo("no snapshot from the scheduler yet")
        return
    table = Table("job group", "requirement", "open jobs", "fed by device groups")
    for g in current["job_groups"]:
        req = ",".join(f"{k}>={v:g}" for k, v in g["requirement"].items()) or "any"
        fed = ",".join(map(str, g["fed_by"])) or "-"
        table.add_row(str(g["group"]), req, ",".join(g["open_jobs"]) or "-", fed)
    console.print(table)


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="job")
    parent.command("devices")(devices)
    parent.command("plan")(plan)
