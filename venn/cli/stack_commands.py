"""``venn up``, ``venn down`` and ``venn demo``: the local stack on embedded defaults.

The stack itself is `devtools.stack`, outside the library: these commands are the one place
in `venn` that imports `devtools`, and only inside the command that needs it, so that the
rest of the CLI (and `import venn.cli`) never loads a launcher (docs/architecture.md)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Annotated

import typer
from rich.console import Console
from rich.live import Live

from venn.settings import Settings


def _demo_default(name: str) -> Callable[[], object]:
    """The default of a `venn demo` option: that of `DemoConfig`, read when the command runs."""

    def default() -> object:
        from devtools.stack.demo import DemoConfig

        return getattr(DemoConfig(), name)

    return default


def up(
    policy: Annotated[str, typer.Option(help="Scheduling policy of the scheduler.")] = "venn",
    seed: Annotated[int, typer.Option(help="Seed of randomised policies.")] = 0,
    workers: Annotated[
        int,
        typer.Option(min=1, help="Scheduler workers: one decides, the others are hot standbys."),
    ] = 1,
) -> None:
    """Start the embedded stack detached: broker, topics, DB migrations, scheduler, recorder."""
    from devtools.stack.local import up as stack_up

    info = stack_up(Settings.from_env(), policy, seed, workers=workers)
    console = Console()
    console.print(f"broker    {info.broker_description}")
    console.print(f"database  {info.database_description}")
    for name, pid in info.services.items():
        console.print(f"{name:<9} pid {pid}  log {info.run_dir / (name + '.log')}")
    console.print(f"dashboard {_dashboard_url()}", soft_wrap=True)
    console.print(f"stop with: VENN_RUN_DIR={info.run_dir} venn down")


def _dashboard_url(ttl_s: float | None = None) -> str:
    """The dashboard of the gateway of VENN_RUN_DIR's stack, with an operator token."""
    from venn.auth.local import DASHBOARD_TOKEN_TTL_S, dashboard_url
    from venn.settings import stack_ports

    settings = Settings.from_env()
    port = stack_ports(settings.run_dir).get("gateway", settings.gateway.port)
    return dashboard_url(settings, port, ttl_s or DASHBOARD_TOKEN_TTL_S)


def dashboard(
    ttl: Annotated[float, typer.Option("--ttl", help="Lifetime of its token, seconds.")] = (
        12 * 3600.0
    ),
) -> None:
    """Print the live dashboard's URL (the gateway of `venn up`), with an operator token in
    its fragment (kept by the page in the tab's sessionStorage, never sent in a request)."""
    typer.echo(_dashboard_url(ttl))


def down(
    timeout: Annotated[float, typer.Option(help="Seconds before SIGKILL.")] = 10.0,
) -> None:
    """Stop everything `venn up` started (SIGTERM, then SIGKILL after the timeout)."""
    from devtools.stack.local import down as stack_down

    stopped = stack_down(Settings.from_env(), timeout)
    Console().print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


def demo(
    *,
    workload: Annotated[str, typer.Option(help="Workload name or YAML path.")] = "demo",
    policy: Annotated[str, typer.Option(help="random|fifo|srsf|venn|venn-sched|venn-match")] = (
        "venn"
    ),
    jobs: Annotated[
        int, typer.Option(default_factory=_demo_default("jobs"), help="Number of jobs to sample.")
    ],
    speedup: Annotated[
        float,
        typer.Option(
            default_factory=_demo_default("speedup"), help="Trace seconds per wall second."
        ),
    ],
    rate: Annotated[
        float,
        typer.Option(
            default_factory=_demo_default("rate_per_s"), help="Device check-ins per trace second."
        ),
    ],
    arrival_scale: Annotated[
        float,
        typer.Option(
            default_factory=_demo_default("arrival_scale"),
            help="Factor on the workload's inter-arrival gaps.",
        ),
    ],
    database_url: Annotated[
        str, typer.Option(help="Audit DB URL (default: an embedded PostgreSQL in a temp dir).")
    ] = "",  # VENN_DATABASE_URL when set
    broker_kind: Annotated[
        str, typer.Option(help="kafka | tansu | auto (default: VENN_BROKER_KIND, else auto).")
    ] = "",
    seed: Annotated[int | None, typer.Option(help="Workload sampling seed.")] = None,
    timeout: Annotated[float, typer.Option(help="Wall seconds before giving up.")] = 600.0,
    workers: Annotated[
        int,
        typer.Option(min=1, help="Scheduler workers: one decides, the others are hot standbys."),
    ] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Run a workload end to end on a private embedded stack, with live progress."""
    from devtools.stack.demo import DemoConfig, DemoHandles, run_demo
    from devtools.stack.progress import ProgressView, result_table

    settings = Settings.from_env(running=False)  # the demo's stack is its own
    config = DemoConfig(
        workload=workload,
        policy=policy,
        jobs=jobs,
        seed=seed,
        speedup=speedup,
        rate_per_s=rate,
        arrival_scale=arrival_scale,
        database_url=database_url or settings.database_url,
        broker_kind=broker_kind or settings.broker_kind,
        timeout_s=timeout,
        workers=workers,
    )
    handles = DemoHandles()
    if as_json:
        result = asyncio.run(run_demo(config, handles))
        print(json.dumps(result.summary()))
    else:
        console = Console()
        with Live(ProgressView(handles), console=console, refresh_per_second=4):
            result = asyncio.run(run_demo(config, handles))
        console.print(result_table(result))
        console.print(f"broker {result.broker}; database {result.database}")
        console.print(
            f"{result.jobs_finished}/{result.jobs_total} jobs finished, "
            f"{result.rounds_closed} rounds closed ({result.rounds_failed} failed), "
            f"{result.assignments} assignments, {result.audit_rounds} audit rows; "
            f"wall {result.wall_s:.0f} s + {result.startup_s:.0f} s start-up"
        )
        decided = ", ".join(f"{name} {n}" for name, n in result.workers.items())
        console.print(f"scheduler check-ins decided: {decided}")
    if result.jobs_finished < result.jobs_total:
        raise typer.Exit(1)


def prepare(
    migrate: Annotated[bool, typer.Option(help="also run the DB migrations")] = False,
    secure: Annotated[
        bool,
        typer.Option(
            help="first, as the admin (VENN_KAFKA_USER, VENN_KAFKA_PASSWORD, "
            "VENN_KAFKA_MECHANISM), create or update each service principal's SCRAM user "
            "with the password of VENN_KAFKA_PASSWORD_<PRINCIPAL> and grant its ACLs"
        ),
    ] = False,
) -> None:
    """Create every topic (scheduler changelogs included) on VENN_BROKER; optionally migrate.

    Run it before any service starts: a broker that auto-creates topics would give them the
    wrong partition count for Faust. With --secure (docker-compose's Kafka, where users
    cannot be made with the storage) it also makes the service principals' SCRAM users and
    grants their ACLs (venn.broker.security), idempotently.
    """
    from venn.audit.migrate import upgrade_database
    from venn.broker.prepare import prepare_topics

    settings = Settings.from_env()
    console = Console()
    if secure:
        users, acls = secure_kafka(settings)
        console.print(
            f"users {', '.join(users)} and {acls} ACLs ready on {settings.broker}", soft_wrap=True
        )
    asyncio.run(prepare_topics(settings))
    if migrate:
        upgrade_database(settings.database_url)
    console.print(f"topics ready on {settings.broker}")


def secure_kafka(settings: Settings) -> tuple[list[str], int]:
    """`venn prepare --secure`: the SCRAM users and ACLs of every service principal, made by
    the admin of ``settings``. Exits 2 with one line when a credential is missing."""
    from venn.broker import security

    admin = settings.for_role(security.ADMIN).kafka_credentials
    try:
        if admin is None:
            raise ValueError("set VENN_KAFKA_USER and VENN_KAFKA_PASSWORD to the Kafka admin's")
        passwords = settings.kafka_passwords.of(security.SERVICES)
    except ValueError as exc:
        Console(stderr=True).print(f"venn prepare --secure: {exc}")
        raise typer.Exit(2) from None
    users = security.ensure_users(settings.broker, admin, passwords)
    acls = security.apply_acls(settings.broker, admin, settings.app_id, settings.recorder_group)
    return users, acls


def register(app: typer.Typer) -> None:
    """Attach the stack commands to the CLI."""
    app.command()(up)
    app.command()(down)
    app.command()(demo)
    app.command()(prepare)
    app.command()(dashboard)
