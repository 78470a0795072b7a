"""The one way to start a Venn stack: a broker, the audit database, every topic and the
services, in one run directory (`Stack`).

`venn up` runs one detached (it outlives the command; `venn down` stops it from its run
dir); `venn demo`, the load test, the tests and the benchmarks run theirs attached and stop
it when done. A stack starts its own broker (Apache Kafka or Tansu) or uses one given
(``VENN_BROKER_KIND=external``, with the principals' passwords where it is secured), and
its own embedded PostgreSQL or the database at ``VENN_DATABASE_URL``. Beside other stacks
on one broker it takes a scheduler app id and recorder group of its own (``unique``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient
from sqlalchemy.engine import make_url

from devtools.brokers import (
    KAFKA_DIR,
    LocalBroker,
    describe,
    local_broker,
    read_detached,
    resolve_kind,
    start_detached,
    stop_detached,
)
from devtools.postgres import EmbeddedPostgres, server_version
from devtools.process import private_dir, tighten, write_private
from devtools.stack.processes import (
    ServiceSpec,
    first_error,
    log_tail,
    recorder_spec,
    running_services,
    scheduler_spec,
    start_service,
    stop_services,
)
from venn.audit.migrate import upgrade_database
from venn.broker import security
from venn.broker.prepare import prepare_topics
from venn.net import free_port, port_free, split_address, wait_listening
from venn.settings import (
    STACK_FIELDS,
    STACK_FILE,
    Settings,
    keep_run_dir_kafka_users,
    run_dir_database_password,
    run_dir_kafka_users,
    run_dir_secret,
    stack_ports,
)

POSTGRES_DIR = "postgres"


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


def service_env(settings: Settings, policy: str, seed: int, web_port: int = 0) -> dict[str, str]:
    """The environment of a service started with ``settings`` and the scheduler's policy and
    seed (and, for a scheduler worker, its web port: 0 keeps the settings')."""
    scheduler = settings.with_scheduler(
        policy=policy, seed=seed, web_port=web_port or settings.scheduler.web_port
    )
    return scheduler.as_env()


def gateway_spec(workers: int = 1) -> ServiceSpec:
    """The device gateway (services.gateway): HTTP on VENN_GATEWAY_HOST:VENN_GATEWAY_PORT,
    ``workers`` processes sharing the port."""
    more = ("--workers", str(workers)) if workers > 1 else ()
    return ServiceSpec("gateway", ("-m", "services.gateway", "--log-level", "WARNING", *more))


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


def kafka_users(settings: Settings) -> dict[str, str]:
    """The SASL/SCRAM users of the run dir's Kafka: made with its storage, one per principal
    (none for a Kafka formatted before the run dir had users: it stays plaintext)."""
    run = settings.run_path
    if (run / KAFKA_DIR / "cluster.json").exists():
        return run_dir_kafka_users(run)
    return run_dir_kafka_users(run, security.PRINCIPALS, create=True)


def grant(bootstrap: str, users: Mapping[str, str], settings: Settings) -> None:
    """The principals' ACLs for this stack's scheduler app id and recorder group, granted by
    the admin of ``users``; users of principals added since the broker was made, made."""
    admin = security.Credentials(security.ADMIN, users[security.ADMIN])
    missing = [p for p in security.SERVICES if p not in users]
    if missing:  # a run dir made before these principals existed (the job API's)
        users = run_dir_kafka_users(settings.run_path, security.PRINCIPALS, create=True)
        security.ensure_users(bootstrap, admin, {p: users[p] for p in missing})
    security.apply_acls(bootstrap, admin, settings.app_id, settings.recorder_group)


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


def prepare_run_dir(run: Path) -> Path:
    """The run dir the owner's only: secrets, the broker's log (job tokens), the database.
    The embedded database's server, when it runs as its own user (as root), keeps its
    passage through it: taken from a running server (a second `venn up`), it panicked at its
    next checkpoint and shut down (issue 34, item 1)."""
    database = EmbeddedPostgres(run / POSTGRES_DIR)
    private_dir(run, passage=database.needs_passage and database.data_dir.exists())
    tighten(run)
    return run


@dataclass
class Stack:
    """A Venn stack in ``settings.run_dir``: ``up()`` starts it, ``down()`` stops it (or use
    it as a context manager). ``settings`` say where: VENN_BROKER_KIND (kafka, tansu, auto:
    its own broker; external: the one at VENN_BROKER), VENN_DATABASE_URL (empty: an
    embedded PostgreSQL in the run dir), the services' own settings."""

    settings: Settings
    workers: int = 1
    """Scheduler workers: one decides, the others are hot standbys."""
    policy: str = "venn"
    seed: int = 0
    recorder: bool = True
    """The recorder, and with it the audit database (none without)."""
    gateway: bool = True
    gateway_workers: int = 1
    detached: bool = False
    """Outlive this process (`venn up`): services in their own sessions, a broker of its own
    recorded in the run dir at VENN_BROKER. Attached, its own broker takes a free port."""
    secure: bool = True
    """An auth secret (API tokens) and, on an Apache Kafka of its own, one SASL/SCRAM
    principal per service with its ACLs, as `venn up` runs; False: neither."""
    unique: bool = False
    """A scheduler app id and recorder group of its own (``-<tag>`` added): a stack beside
    others on one broker resumes nothing of theirs."""
    kafka_users: Mapping[str, str] | None = None
    """The principals' passwords of an external secured broker (admin included): kept in the
    run dir, as `venn up` keeps its own broker's, and this stack's ACLs granted."""
    extra_env: Mapping[str, str] = field(default_factory=dict)
    """More environment for every service (a benchmark's VENN_ overrides)."""
    profile_dir: Path | None = None
    """Run the scheduler workers and the gateway under pyinstrument, sessions saved here."""
    ready_timeout: float = 90.0
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    info: StackInfo | None = field(default=None, init=False)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, init=False)
    """The services this object started: name -> process."""
    ports: dict[str, int] = field(default_factory=dict, init=False)
    """HTTP ports: "gateway", each scheduler worker's web server, "recorder"."""
    _broker: LocalBroker | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        settings = absolute(self.settings)
        if self.unique:
            settings = dataclasses.replace(
                settings,
                app_id=f"{settings.app_id}-{self.tag}",
                recorder_group=f"{settings.recorder_group}-{self.tag}",
            )
        self.settings = settings

    @property
    def run_dir(self) -> Path:
        return self.settings.run_path

    @property
    def url(self) -> str:
        """The gateway's base URL."""
        host = self.settings.gateway.host
        host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
        return f"http://{host}:{self.settings.gateway.port}"

    @property
    def worker_ports(self) -> dict[str, int]:
        """Scheduler worker -> its web port (/metrics, /healthz)."""
        return {n: p for n, p in self.ports.items() if n.startswith("scheduler")}

    def specs(self) -> list[ServiceSpec]:
        schedulers = [scheduler_spec(w) for w in range(1, self.workers + 1)]
        others = [recorder_spec()] if self.recorder else []
        others += [gateway_spec(self.gateway_workers)] if self.gateway else []
        specs = [*schedulers, *others]
        if self.profile_dir is None:
            return specs
        profiled = ("gateway", *(s.name for s in schedulers))
        return [s.profiled(self.profile_dir) if s.name in profiled else s for s in specs]

    def start_broker(self, settings: Settings) -> tuple[Settings, str]:
        """This stack's broker: the given one (external), the run dir's detached one (started
        or reused), or one of its own. The settings with its address and resolved kind."""
        kind = resolve_kind(settings.broker_kind)
        run = settings.run_path
        if kind == "external":
            if self.kafka_users:
                keep_run_dir_kafka_users(run, self.kafka_users)
                grant(settings.broker, self.kafka_users, settings)
            settings = dataclasses.replace(settings, broker_kind=kind)
            return settings, f"external at {settings.broker}"
        users = kafka_users(settings) if kind == "kafka" and self.secure else {}
        if self.detached:
            existing = read_detached(run)
            if existing is None:
                host, port = split_address(settings.broker)
                if not port_free(host, port):
                    raise RuntimeError(
                        f"{settings.broker} is in use (another broker?): set VENN_BROKER to a "
                        "free host:port, or VENN_BROKER_KIND=external to use the broker there"
                    )
            record = existing or start_detached(
                run, kind, settings.broker, settings.kafka_nodes, users or None
            )
            bootstrap, kind, description = record.bootstrap, record.kind, record.describe()
        else:
            broker = local_broker(kind, run, None, settings.kafka_nodes, users or None)
            self._broker = broker.start()
            bootstrap = broker.bootstrap
            description = describe(broker.kind, broker.version, bootstrap)
        if users:
            grant(bootstrap, users, settings)
        return dataclasses.replace(settings, broker=bootstrap, broker_kind=kind), description

    def up(self, wait: bool = True) -> StackInfo:
        """Start (or, detached, reuse) the broker, the database and the services; with
        ``wait``, return once the scheduler's consumer group is stable with every worker and
        the gateway and the recorder listen."""
        settings = self.settings
        run = prepare_run_dir(settings.run_path)
        try:
            settings, broker_description = self.start_broker(settings)
            database_description = "none"
            if self.recorder:
                settings, database_description = start_database(settings)
            if self.secure:
                secret = settings.auth_secret or run_dir_secret(run, create=True)
                settings = dataclasses.replace(settings, auth_secret=secret)
            asyncio.run(prepare_topics(settings))
            if self.recorder:
                upgrade_database(settings.database_url)
            self.settings = settings = self._start_services(settings)
            if wait:
                self._wait_ready(settings)
        except BaseException:
            self.down()  # what did start (broker, database, services) stops with it
            raise
        self.info = StackInfo(
            run,
            settings.broker,
            broker_description,
            settings.database_url,
            database_description,
            running_services(run),
        )
        record: dict[str, object] = {name: getattr(settings, name) for name in STACK_FIELDS}
        record["ports"] = self.ports
        write_private(run / STACK_FILE, json.dumps({**record, "policy": self.policy}))
        return self.info

    def _start_services(self, settings: Settings) -> Settings:
        run = settings.run_path
        alive = running_services(run) if self.detached else {}
        known = stack_ports(run) if alive else {}
        scheduler = settings.scheduler
        settings = dataclasses.replace(
            settings.with_scheduler(
                web_port=known.get("scheduler")
                or scheduler.web_port
                or free_port(scheduler.web_host)
            ),
            recorder_port=known.get("recorder") or settings.recorder_port or free_port(),
        )
        self.ports = {}
        if self.gateway:
            self.ports["gateway"] = settings.gateway.port
        for spec in self.specs():
            role = "scheduler" if spec.name.startswith("scheduler") else spec.name
            port = 0
            if spec.name == "scheduler":
                self.ports[spec.name] = settings.scheduler.web_port
            elif role == "scheduler":
                port = self.ports[spec.name] = known.get(spec.name) or free_port()
            elif role == "recorder":
                self.ports[role] = settings.recorder_port
            if spec.name in alive:
                continue
            # Each service signs in to Kafka as itself (venn.broker.security.access).
            env = {**service_env(settings.for_role(role), self.policy, self.seed, port)}
            env.update(self.extra_env)
            # A gateway with workers leads a group of its own: stopping it stops them all.
            own_group = self.detached or (spec.name == "gateway" and self.gateway_workers > 1)
            self.processes[spec.name] = start_service(run, spec, env, detached=own_group)
        return settings

    def _wait_ready(self, settings: Settings) -> None:
        run = settings.run_path
        workers = {n: p for n, p in self.processes.items() if n.startswith("scheduler")}
        ready = wait_scheduler_ready(
            settings, self.ready_timeout, members=self.workers, processes=list(workers.values())
        )
        if not asyncio.run(ready):
            raise RuntimeError(not_ready(run, workers))
        listening = [("gateway", settings.gateway.host, settings.gateway.port)] * self.gateway
        listening += [("recorder", settings.recorder_host, settings.recorder_port)] * self.recorder
        for name, host, port in listening:
            if not wait_listening("127.0.0.1" if host == "0.0.0.0" else host, port, 60.0):
                raise RuntimeError(f"the {name} does not listen on {port}; see {run / name}.log")

    def broker_pids(self) -> list[int]:
        """The processes of this stack's own broker (none on an external one)."""
        if self._broker is not None:
            return self._broker.pids()
        record = read_detached(self.run_dir)
        return list(record.pids) if record is not None else []

    def check_alive(self) -> None:
        """RuntimeError naming the first service this object started that has exited."""
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the {name} exited with {proc.returncode}; see {self.run_dir / name}.log"
                )

    def down(self, timeout: float = 10.0) -> list[str]:
        """Stop the services, the broker (its own) and the run dir's embedded database.
        Returns what was stopped. Their files stay: a detached stack resumes from them."""
        stopped = down(self.settings, timeout)
        for proc in self.processes.values():
            proc.poll()  # reaped (stopped by pid above)
        self.processes = {}
        if self._broker is not None:
            self._broker.stop()
            self._broker = None
            stopped.append("broker")
        return stopped

    def __enter__(self) -> Stack:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()


def up(
    settings: Settings, policy: str = "venn", seed: int = 0, wait: bool = True, workers: int = 1
) -> StackInfo:
    """`venn up`: start (or reuse) the detached broker, database and services of
    ``settings.run_dir`` (``workers`` scheduler workers: one decides, the others are hot
    standbys); with ``wait``, return once the scheduler's consumer group is stable with
    them all."""
    stack = Stack(settings, workers=workers, policy=policy, seed=seed, detached=True)
    return stack.up(wait)


def down(settings: Settings, timeout: float = 10.0) -> list[str]:
    """`venn down`: stop the services, the detached broker and the embedded database of
    ``settings.run_dir``. Returns what was stopped. Their files stay: `venn up` resumes
    from them."""
    run = absolute(settings).run_path
    stopped = stop_services(run, timeout)
    if stop_detached(run, max(timeout, 30.0)):
        stopped.append("broker")
    database = EmbeddedPostgres(run / POSTGRES_DIR)
    if database.pid() is not None and database.stop():
        stopped.append("postgres")
    (run / STACK_FILE).unlink(missing_ok=True)
    return stopped
