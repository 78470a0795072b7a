"""The embedded stack: broker, topics, audit DB and services, in one run directory.

`venn up` keeps it running (detached); `venn demo` starts a private one and tears it down.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient
from sqlalchemy.engine import make_url

from venn.audit.embedded import EmbeddedPostgres, server_version
from venn.audit.migrate import upgrade_database
from venn.auth import Tokens
from venn.broker import security
from venn.broker.local import (
    KAFKA_DIR,
    read_detached,
    resolve_kind,
    start_detached,
    stop_detached,
)
from venn.broker.process import (
    free_port,
    port_free,
    private_dir,
    split_address,
    tighten,
    wait_listening,
    write_private,
)
from venn.broker.topics import prepare_topics
from venn.settings import (
    STACK_FIELDS,
    STACK_FILE,
    Settings,
    run_dir_database_password,
    run_dir_kafka_users,
    run_dir_secret,
)
from venn.stack.processes import (
    ServiceSpec,
    first_error,
    log_tail,
    recorder_spec,
    running_services,
    scheduler_spec,
    start_service,
    stop_services,
)

POSTGRES_DIR = "postgres"
DASHBOARD_TOKEN_TTL_S = 12 * 3600.0
"""Lifetime of the operator token in the dashboard URL `venn up` prints."""


@dataclass(frozen=True)
class StackInfo:
    run_dir: Path
    broker: str
    broker_description: str
    database_url: str
    database_description: str
    services: dict[str, int]


def absolute(settings: Settings) -> Settings:
    """Settings with an absolute run dir (services run with the run dir as cwd)."""
    return dataclasses.replace(settings, run_dir=str(Path(settings.run_dir).resolve()))


def prepare(settings: Settings) -> None:
    """Create every topic (changelogs included) and migrate the audit DB to head."""
    asyncio.run(prepare_topics(settings))
    upgrade_database(settings.database_url)


def service_env(settings: Settings, policy: str, seed: int, web_port: int = 0) -> dict[str, str]:
    """The environment of a service started with ``settings`` and the scheduler's policy and
    seed (and, for a scheduler worker, its web port: 0 keeps the settings')."""
    scheduler = settings.with_scheduler(
        policy=policy, seed=seed, web_port=web_port or settings.scheduler.web_port
    )
    return scheduler.as_env()


def gateway_spec() -> ServiceSpec:
    """The device gateway (services.gateway): HTTP on VENN_GATEWAY_HOST:VENN_GATEWAY_PORT."""
    return ServiceSpec("gateway", ("-m", "services.gateway", "--log-level", "WARNING"))


def default_services(workers: int = 1) -> list[ServiceSpec]:
    schedulers = [scheduler_spec(w) for w in range(1, workers + 1)]
    return [*schedulers, recorder_spec(), gateway_spec()]


async def wait_scheduler_ready(
    settings: Settings,
    timeout: float = 90.0,
    members: int = 1,
    processes: Sequence[subprocess.Popen[bytes]] = (),
) -> bool:
    """Wait until the scheduler's consumer group is stable with at least ``members``
    workers (its agents are reading); False at once if one of the worker ``processes``
    this caller started has exited (a worker that cannot bind its port exits at start)."""
    deadline = time.monotonic() + timeout
    options = settings.for_role(security.ADMIN).kafka_options
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.broker, client_id="venn-stack", **options
    )
    await admin.start()
    try:
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in processes):
                return False
            try:
                groups = await admin.describe_consumer_groups([settings.app_id])
            except Exception:  # the coordinator may not know the group yet
                groups = []
            for response in groups:
                for group in response.to_object().get("groups", []):
                    stable = group.get("state") == "Stable"
                    if stable and len(group.get("members") or ()) >= members:
                        return True
            await asyncio.sleep(0.5)
    finally:
        await admin.close()
    return False


def not_ready(run: Path, workers: Mapping[str, subprocess.Popen[bytes]]) -> str:
    """Why the scheduler is not ready, with the log tail of a worker that exited (or of the
    first worker): what CI keeps of a start that failed."""
    exited = [name for name, p in workers.items() if p.poll() is not None]
    name = exited[0] if exited else "scheduler"
    what = f"{name} exited ({workers[name].returncode})" if exited else "no stable group"
    error = first_error(run, name) or "none"
    return (
        f"the scheduler did not become ready: {what}; first error in {run / name}.log: "
        f"{error}\nit ends:\n{log_tail(run, name, 30)}"
    )


def start_broker(settings: Settings) -> tuple[Settings, str]:
    """Start (or reuse) the run dir's detached broker where VENN_BROKER says, unless the
    kind is external. Returns the settings with the broker's address and resolved kind."""
    kind = resolve_kind(settings.broker_kind)
    if kind == "external":
        return dataclasses.replace(settings, broker_kind=kind), f"external at {settings.broker}"
    existing = read_detached(settings.run_path)
    if existing is None:
        host, port = split_address(settings.broker)
        if not port_free(host, port):
            raise RuntimeError(
                f"{settings.broker} is in use (another broker?): set VENN_BROKER to a free "
                "host:port, or VENN_BROKER_KIND=external to use the broker listening there"
            )
    users = kafka_users(settings) if kind == "kafka" else {}
    record = existing or start_detached(
        settings.run_path, kind, settings.broker, settings.kafka_nodes, users or None
    )
    if users:
        admin = security.Credentials(security.ADMIN, users[security.ADMIN])
        missing = [p for p in security.SERVICES if p not in users]
        if missing:  # a run dir made before these principals existed (the job API's)
            users = run_dir_kafka_users(settings.run_path, security.PRINCIPALS, create=True)
            security.ensure_users(record.bootstrap, admin, {p: users[p] for p in missing})
        security.apply_acls(record.bootstrap, admin, settings.app_id, settings.recorder_group)
    return (
        dataclasses.replace(settings, broker=record.bootstrap, broker_kind=record.kind),
        record.describe(),
    )


def kafka_users(settings: Settings) -> dict[str, str]:
    """The SASL/SCRAM users of the run dir's Kafka: made with its storage, one per principal
    (none for a Kafka formatted before the run dir had users: it stays plaintext)."""
    run = settings.run_path
    if (run / KAFKA_DIR / "cluster.json").exists():
        return run_dir_kafka_users(run)
    return run_dir_kafka_users(run, security.PRINCIPALS, create=True)


def start_database(settings: Settings) -> tuple[Settings, str]:
    """VENN_DATABASE_URL when set, else the run dir's embedded PostgreSQL (started)."""
    server = EmbeddedPostgres(
        settings.run_path / POSTGRES_DIR, password=run_dir_database_password(settings.run_path)
    )
    if settings.database_url and settings.database_url != server.url():
        return settings, make_url(settings.database_url).render_as_string(hide_password=True)
    server.start()
    url = server.url()
    return dataclasses.replace(settings, database_url=url), f"PostgreSQL {server_version()} {url}"


def up(
    settings: Settings, policy: str = "venn", seed: int = 0, wait: bool = True, workers: int = 1
) -> StackInfo:
    """Start (or reuse) the detached broker, database and services of ``settings.run_dir``
    (``workers`` scheduler workers: one decides, the others are hot standbys); with ``wait``,
    return once the scheduler's consumer group is stable with them all."""
    if workers < 1:
        raise ValueError("workers must be >= 1")
    settings = absolute(settings)
    run = settings.run_path
    private_dir(run)  # secrets, the broker's log (job tokens), the database: the owner's only
    tighten(run)
    settings, broker_description = start_broker(settings)
    settings, database_description = start_database(settings)
    secret = settings.auth_secret or run_dir_secret(run, create=True)
    settings = dataclasses.replace(settings, auth_secret=secret)
    prepare(settings)
    alive = running_services(run)
    ports = stack_ports(run) if alive else {}
    settings = dataclasses.replace(
        settings.with_scheduler(
            web_port=ports.get("scheduler")
            or settings.scheduler.web_port
            or free_port(settings.scheduler.web_host)
        ),
        recorder_port=ports.get("recorder") or settings.recorder_port or free_port(),
    )
    worker_ports = {"scheduler": settings.scheduler.web_port}
    started: dict[str, subprocess.Popen[bytes]] = {}
    for spec in default_services(workers):
        role = "scheduler" if spec.name.startswith("scheduler") else spec.name
        port = 0
        if role == "scheduler" and spec.name != "scheduler":
            port = worker_ports[spec.name] = ports.get(spec.name) or free_port()
        env = service_env(settings.for_role(role), policy, seed, port)
        if spec.name not in alive:
            # Each service signs in to Kafka as itself (venn.broker.security.access).
            started[spec.name] = start_service(run, spec, env)
    workers_started = {n: p for n, p in started.items() if n.startswith("scheduler")}
    if wait and not asyncio.run(
        wait_scheduler_ready(settings, members=workers, processes=list(workers_started.values()))
    ):
        raise RuntimeError(not_ready(run, workers_started))
    if wait:
        for name, host, port in (
            ("gateway", settings.gateway.host, settings.gateway.port),
            ("recorder", settings.recorder_host, settings.recorder_port),
        ):
            if not wait_listening("127.0.0.1" if host == "0.0.0.0" else host, port, 60.0):
                raise RuntimeError(f"the {name} does not listen on {port}; see {run / name}.log")
    info = StackInfo(
        run,
        settings.broker,
        broker_description,
        settings.database_url,
        database_description,
        running_services(run),
    )
    record: dict[str, object] = {name: getattr(settings, name) for name in STACK_FIELDS}
    record["ports"] = {
        "gateway": settings.gateway.port,
        **worker_ports,
        "recorder": settings.recorder_port,
    }
    write_private(run / STACK_FILE, json.dumps({**record, "policy": policy}))
    return info


def stack_ports(run_dir: str | Path) -> dict[str, int]:
    """The HTTP ports of the services `venn up` started in ``run_dir`` (gateway: the API;
    scheduler and recorder: /healthz and /metrics)."""
    try:
        ports = json.loads((Path(run_dir) / STACK_FILE).read_text()).get("ports", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(k): int(v) for k, v in ports.items()} if isinstance(ports, dict) else {}


def dashboard_url(
    settings: Settings, port: int | None = None, ttl_s: float = DASHBOARD_TOKEN_TTL_S
) -> str:
    """The gateway's dashboard page (``port``: the gateway's, default VENN_GATEWAY_PORT).
    With authentication it carries a fresh operator token in the URL fragment, which a
    browser never sends to a server; the page moves it into the tab's sessionStorage."""
    host = settings.gateway.host
    host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    host = f"[{host}]" if ":" in host else host
    url = f"http://{host}:{port or settings.gateway.port}/"
    if settings.auth_enabled:
        token = Tokens(settings.auth_secret).issue("admin", "dashboard", ttl_s=ttl_s)
        url += f"#token={token}"
    return url


def down(settings: Settings, timeout: float = 10.0) -> list[str]:
    """Stop the services, the broker and the embedded database of ``settings.run_dir``.
    Returns what was stopped. Their files stay: `venn up` resumes from them."""
    run = absolute(settings).run_path
    stopped = stop_services(run, timeout)
    if stop_detached(run, max(timeout, 30.0)):
        stopped.append("broker")
    database = EmbeddedPostgres(run / POSTGRES_DIR)
    if database.pid() is not None and database.stop():
        stopped.append("postgres")
    (run / STACK_FILE).unlink(missing_ok=True)
    return stopped
