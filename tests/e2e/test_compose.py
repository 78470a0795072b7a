"""docker-compose.yml, tested without a Docker engine.

1. `docker-compose config` parses the file, with and without the demo profile, and resolves
   the same services, commands and environments as PyYAML does here (the anchors).
2. The file runs the releases the project tests against (Apache Kafka of kafka-pom.xml,
   the embedded Postgres's major version), every Venn service takes the shared
   `x-venn-env`, whose names are all settings of venn/settings.py, and the kafka service's
   KAFKA_* settings, rendered as the apache/kafka image renders them, start this Kafka
   release from its jars with both listeners advertising what compose promises.
3. Every service's `command` runs as a local process with the environment compose gives
   it, in the order its `depends_on` conditions require (its own healthchecks included):
   the `kafka` and `postgres` services are the session's Apache Kafka and Postgres (a fresh
   database), host names are mapped to their local addresses, every *_PORT is a free port
   (the published ports follow it), the run dir is a scratch dir (existing only if the
   Dockerfile creates it), and the app id and recorder group are made unique (topics are
   shared by every test of the session). Nothing else is changed.

Without a docker-compose binary the config test is skipped, unless VENN_REQUIRE_COMPOSE=1
(.ci/run sets it, and installs Debian's docker-compose).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
import yaml
from sqlalchemy import select
from sqlalchemy.engine import make_url

from venn.audit.db import create_database, drop_database, make_engine
from venn.audit.models import JobAudit, RoundAudit
from venn.broker.kafka import kafka_version
from venn.broker.process import free_port, metadata_brokers, split_address
from venn.settings import describe

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
CORE = {"kafka", "postgres", "migrate", "topics", "scheduler", "recorder", "gateway"}
DEMO = {"coordinator", "devices"}
INFRA = {"kafka", "postgres"}  # images, not our commands: the session's broker and database
ONE_SHOTS = {"migrate", "topics"}
COMPOSE_KAFKA = "kafka:9092"
UNIQUE_VARS = ("VENN_APP_ID", "VENN_RECORDER_GROUP")
ONE_SHOT_TIMEOUT = 120.0
COORDINATOR_TIMEOUT = 300.0
STOP_TIMEOUT = 15.0
JOB_LINE = re.compile(r"^(?P<job>\S+): finished=(?P<finished>\w+) jct_s=\S+ attempts=(?P<n>\d+)$")


def load_compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict)
    return data


def environment_of(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's `environment` (mapping or list form) as compose passes it: strings."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(str(item).partition("=")[::2] for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def conditions(service: Mapping[str, Any]) -> dict[str, str]:
    """`depends_on` as {service: condition} (the list form means service_started)."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {str(d): "service_started" for d in deps}
    return {str(d): str((c or {}).get("condition", "service_started")) for d, c in deps.items()}


def container_ports(service: Mapping[str, Any]) -> list[int]:
    """Container side of each `ports` entry ("8080:8080", "6066", long form)."""
    ports = []
    for entry in service.get("ports") or []:
        target = entry.get("target") if isinstance(entry, dict) else str(entry).split(":")[-1]
        ports.append(int(str(target).split("/")[0]))
    return ports


def image_env() -> dict[str, str]:
    """The ENV lines of the Dockerfile (what every container of the image starts with)."""
    env: dict[str, str] = {}
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("ENV "):
            for token in shlex.split(line[4:]):
                key, _, value = token.partition("=")
                env[key] = value
    return env


def image_dirs() -> set[str]:
    """Directories the Dockerfile creates (`mkdir -p` in its RUN lines)."""
    found: set[str] = set()
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("RUN "):
            for command in re.split(r"&&|;", line[4:]):
                words = shlex.split(command)
                if words[:2] == ["mkdir", "-p"]:
                    found.update(words[2:])
    return found


def ours(compose: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The services built from this repository's image, in file order."""
    return {n: s for n, s in compose["services"].items() if s.get("build") is not None}


# -- 1. docker-compose config --------------------------------------------------------------


def compose_binary() -> list[str] | None:
    exe = shutil.which("docker-compose")
    if exe:
        return [exe]
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return [docker, "compose"]
    return None


@pytest.fixture(scope="module")
def compose_cli() -> list[str]:
    cli = compose_binary()
    if cli is None:
        reason = (
            "no docker-compose binary on PATH (nor a `docker compose` plugin): "
            "apt-get install --no-install-recommends docker-compose (.ci/run does)"
        )
        if os.environ.get("VENN_REQUIRE_COMPOSE") == "1":
            pytest.fail(reason + "; VENN_REQUIRE_COMPOSE=1 requires it")
        pytest.skip(reason)
    return cli


def run_compose(cli: list[str], *args: str) -> str:
    done = subprocess.run(
        [*cli, "-f", str(COMPOSE_FILE), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def compose_major(cli: list[str]) -> int:
    out = subprocess.run(
        [*cli, "version", "--short"], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"(\d+)\.\d+", out)
    assert match, out
    return int(match.group(1))


def test_docker_compose_config_parses_the_file(compose_cli: list[str]) -> None:
    for profile in ([], ["--profile", "demo"]):
        run_compose(compose_cli, *profile, "config", "-q")
    plain = set(run_compose(compose_cli, "config", "--services").split())
    demo = set(run_compose(compose_cli, "--profile", "demo", "config", "--services").split())
    assert demo == CORE | DEMO
    # Compose 1.x lists profiled services in `config` whatever --profile says; 2.x does not.
    assert plain == (CORE | DEMO if compose_major(compose_cli) < 2 else CORE)

    # What compose resolves is what the local run below reads with PyYAML.
    resolved = yaml.safe_load(run_compose(compose_cli, "--profile", "demo", "config"))
    local = load_compose()["services"]
    for name, service in resolved["services"].items():
        assert environment_of(service) == environment_of(local[name]), name
        assert service.get("command") == local[name].get("command"), name
        assert conditions(service) == conditions(local[name]), name


# -- 2. the file itself ----------------------------------------------------------------------


def test_compose_runs_the_tested_releases_and_the_shared_settings() -> None:
    from venn.audit.embedded import server_version

    compose = load_compose()
    services = compose["services"]
    assert services["kafka"]["image"] == f"apache/kafka:{kafka_version()}"
    pg_major = services["postgres"]["image"].split(":")[1].split(".")[0]
    assert pg_major == server_version().split(".")[0]
    kafka = environment_of(services["kafka"])
    assert len(base64.urlsafe_b64decode(kafka["CLUSTER_ID"] + "==")) == 16
    assert kafka["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert kafka["KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"] == "0"
    assert "PLAINTEXT_HOST://localhost:29092" in kafka["KAFKA_ADVERTISED_LISTENERS"]
    assert "29092:29092" in services["kafka"]["ports"]

    shared = {str(k): str(v) for k, v in compose["x-venn-env"].items()}
    known = {d.env for d in describe()}
    assert set(shared) <= known, set(shared) - known
    assert shared["VENN_BROKER"] == COMPOSE_KAFKA and shared["VENN_BROKER_KIND"] == "external"
    assert shared["VENN_GATEWAY_HOST"] == shared["VENN_SCHEDULER_WEB_HOST"] == "0.0.0.0"
    port_values = {int(v) for k, v in shared.items() if k.endswith("_PORT")}
    for name, service in ours(compose).items():
        assert environment_of(service) == shared, f"{name} does not take x-venn-env as is"
        # A published port is one the service binds (on 0.0.0.0, above).
        assert set(container_ports(service)) <= port_values, name
    assert container_ports(services["gateway"]) == [int(shared["VENN_GATEWAY_PORT"])]
    # Scaled schedulers cannot share a fixed host port.
    assert services["scheduler"]["ports"] == [shared["VENN_SCHEDULER_WEB_PORT"]]
    assert {n for n, s in services.items() if s.get("profiles")} == DEMO


# Keys apache/kafka's start script fills with its own defaults (localhost listeners, /tmp
# log dir, ...) when unset (docker/resources/common-scripts/configureDefaults): set them all.
IMAGE_DEFAULTED = (
    "CLUSTER_ID", "KAFKA_NODE_ID", "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "KAFKA_LISTENERS",
    "KAFKA_ADVERTISED_LISTENERS", "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
    "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "KAFKA_PROCESS_ROLES",
    "KAFKA_CONTROLLER_QUORUM_VOTERS", "KAFKA_INTER_BROKER_LISTENER_NAME",
    "KAFKA_CONTROLLER_LISTENER_NAMES", "KAFKA_LOG_DIRS",
)  # fmt: skip
# Variables the image passes to the JVM or log4j, not to server.properties.
IMAGE_NOT_PROPERTIES = ("KAFKA_VERSION", "KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS")
ADDRESS_KEYS = ("listeners", "advertised.listeners", "controller.quorum.voters")


def kafka_properties(env: Mapping[str, str]) -> dict[str, str]:
    """server.properties as the apache/kafka image renders it from KAFKA_* variables:
    KAFKA_ABC_DEF -> abc.def, double underscore -> _, triple underscore -> -."""
    props = {}
    for key, value in env.items():
        if not key.startswith("KAFKA_") or key in IMAGE_NOT_PROPERTIES:
            continue
        name = "-".join(
            "_".join(part.replace("_", ".") for part in chunk.split("__"))
            for chunk in key[len("KAFKA_") :].split("___")
        )
        props[name.lower()] = value
    return props


def test_the_kafka_service_configuration_runs_on_apache_kafka(tmp_path: Path) -> None:
    """The kafka service's KAFKA_* settings, rendered as the image does, on this Kafka
    release from its jars: host `kafka` is loopback, ports are free ones, and each listener
    hands its clients the address compose advertises (kafka:9092 in the network,
    localhost:29092 on the host)."""
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient

    from venn.broker import kafka

    reason = kafka.unavailable_reason()
    if reason is not None:
        pytest.skip(f"Apache Kafka cannot run here: {reason}")
    env = environment_of(load_compose()["services"]["kafka"])
    assert set(IMAGE_DEFAULTED) <= set(env), set(IMAGE_DEFAULTED) - set(env)
    props = kafka_properties(env)
    ports = {
        int(p): free_port()
        for key in ADDRESS_KEYS
        for p in re.findall(r":(\d+)(?=,|$)", props[key])
    }
    for key in ADDRESS_KEYS:
        props[key] = re.sub(
            r":(\d+)(?=,|$)", lambda m: f":{ports[int(m.group(1))]}", props[key]
        ).replace("kafka:", "127.0.0.1:")
    props["log.dirs"] = str(tmp_path / "data")
    config = tmp_path / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    (tmp_path / "log4j2.properties").write_text(kafka.LOG4J2)
    java, libs = kafka.java_binary(), kafka.ensure_libs()
    assert java is not None
    classpath = f"{libs}/*"
    log4j = f"-Dlog4j2.configurationFile={tmp_path / 'log4j2.properties'}"
    storage = [java, "-cp", classpath, "kafka.tools.StorageTool", "format"]
    formatted = subprocess.run(
        [*storage, "-t", env["CLUSTER_ID"], "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr
    server = [java, "-Xms256m", "-Xmx512m", *kafka.JVM_OPTIONS, log4j, "-cp", classpath]
    log_path = tmp_path / "kafka.log"
    with open(log_path, "wb") as log:
        node = subprocess.Popen(
            [*server, "kafka.Kafka", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    internal, host = ports[9092], ports[29092]

    async def brokers_seen_through(bootstrap: str) -> list[tuple[str, int]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
        await admin.start()
        try:
            cluster = await admin.describe_cluster()
            return [(b["host"], b["port"]) for b in cluster["brokers"]]
        finally:
            await admin.close()

    try:
        deadline = time.monotonic() + 120
        while not (
            metadata_brokers("127.0.0.1", internal, 1.0)
            and metadata_brokers("127.0.0.1", host, 1.0)
        ):
            assert node.poll() is None, log_path.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, log_path.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        assert asyncio.run(brokers_seen_through(f"127.0.0.1:{internal}")) == [
            ("127.0.0.1", internal)
        ]
        assert asyncio.run(brokers_seen_through(f"localhost:{host}")) == [("localhost", host)]
    finally:
        node.terminate()
        try:
            node.wait(30)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait()


# -- 3. every service as a local process -----------------------------------------------------


@dataclass
class LocalService:
    name: str
    argv: list[str]
    env: dict[str, str]
    depends_on: dict[str, str]
    healthcheck: list[str] | None
    health_budget_s: float
    ports: dict[int, int]  # container port -> local port
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        self.log = open(self.log_path, "wb")  # noqa: SIM115 (closed by stop_all)
        self.proc = subprocess.Popen(
            self.argv,
            cwd=ROOT,  # the image's WORKDIR holds the same files (alembic.ini, migrations/)
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def local_command(command: list[str]) -> list[str]:
    """`python`, `venn`, `alembic` of the image -> this interpreter and its scripts."""
    exe, *args = command
    if exe == "python":
        return [sys.executable, *args]
    modules = {"venn": "venn.cli", "alembic": "alembic"}
    assert exe in modules, f"no local equivalent of the image's {exe!r}"
    script = Path(sys.executable).parent / exe
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script), *args]
    return [sys.executable, "-m", modules[exe], *args]


def seconds(value: Any, default: float) -> float:
    """A compose duration ("5s", "1m30s", "500ms") in seconds."""
    if value is None:
        return default
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", str(value)):
        total += float(number) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6}[unit]
    return total


def local_env(
    env: Mapping[str, str], broker: str, db_url: str, run_dir: Path, token: str
) -> tuple[dict[str, str], dict[int, int]]:
    """The compose environment with every address made local. Returns it and the port map."""
    out: dict[str, str] = {}
    ports: dict[int, int] = {}
    for key, value in env.items():
        if "@postgres:5432/" in value:  # the audit DB: the session's server, a fresh database
            given, local = make_url(value), make_url(db_url)
            assert given.drivername == local.drivername == "postgresql+psycopg", value
            value = given.set(
                username=local.username,
                password=local.password,
                host=local.host,
                port=local.port,
                database=local.database,
            ).render_as_string(hide_password=False)
        value = value.replace(COMPOSE_KAFKA, broker)
        if key == "VENN_RUN_DIR":
            value = str(run_dir)
        elif key in UNIQUE_VARS:
            value = f"{value}-compose-{token}"
        elif key.endswith("_PORT") and value.isdigit():
            ports[int(value)] = free_port()
            value = str(ports[int(value)])
        out[key] = value
    return out, ports


def plan(
    compose: Mapping[str, Any], broker: str, db_url: str, tmp_path: Path, token: str
) -> dict[str, LocalService]:
    host_env = {k: v for k, v in os.environ.items() if not k.startswith("VENN_")}
    names = "|".join(map(re.escape, compose["services"]))
    leftover = re.compile(rf"(?<![\w.-])({names}):\d+")
    planned: dict[str, LocalService] = {}
    for name, service in ours(compose).items():
        container_env = {**image_env(), **environment_of(service)}
        # Each container has its own run dir, which exists only if the image creates it.
        run_dir = tmp_path / name / "run"
        run_dir.parent.mkdir(parents=True)
        if container_env.get("VENN_RUN_DIR") in image_dirs():
            run_dir.mkdir()
        env, ports = local_env(container_env, broker, db_url, run_dir, token)
        unmapped = {k: v for k, v in env.items() if leftover.search(v)}
        assert not unmapped, f"{name}: compose host names left in {unmapped}"
        missing = set(container_ports(service)) - set(ports)
        assert not missing, f"{name} publishes {missing}, which no *_PORT variable sets"
        check = (service.get("healthcheck") or {}).get("test")
        if check is not None:
            assert check[0] == "CMD", f"{name}: a healthcheck that runs here too (exec form)"
            check = local_command(check[1:])
        health = service.get("healthcheck") or {}
        interval = seconds(health.get("interval"), 30)
        budget = seconds(health.get("start_period"), 0) + interval * int(health.get("retries", 3))
        planned[name] = LocalService(
            name=name,
            argv=local_command([str(a) for a in service["command"]]),
            env={**host_env, **env},
            depends_on=conditions(service),
            healthcheck=check,
            health_budget_s=budget,
            ports={c: ports[c] for c in container_ports(service)},
            log_path=tmp_path / f"{name}.log",
        )
    return planned


def wait_exit(svc: LocalService, timeout: float) -> int:
    assert svc.proc is not None, f"{svc.name} never started"
    try:
        return svc.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{svc.name} still running after {timeout:.0f} s") from None


def wait_healthy(svc: LocalService) -> None:
    """Run the service's own compose healthcheck until it passes (as compose would)."""
    assert svc.healthcheck is not None, f"{svc.name} is waited for as healthy: no healthcheck"
    deadline = time.monotonic() + svc.health_budget_s
    while True:
        rc = svc.exited()
        assert rc is None, f"{svc.name} exited {rc} before it was healthy"
        probe = subprocess.run(
            svc.healthcheck, env=svc.env, cwd=ROOT, capture_output=True, timeout=30, check=False
        )
        if probe.returncode == 0:
            return
        assert time.monotonic() < deadline, f"{svc.name} unhealthy: {probe.stderr[-500:]!r}"
        time.sleep(0.5)


def infra_ready(name: str, broker: str, db_url: str) -> None:
    if name == "kafka":
        host, port = split_address(broker)
        assert metadata_brokers(host, port, timeout=5.0), "the session's Kafka does not answer"
    else:
        engine = make_engine(db_url)
        try:
            with engine.connect():
                pass
        finally:
            engine.dispose()


def start_in_order(stack: Mapping[str, LocalService], broker: str, db_url: str) -> None:
    """Start every service once its depends_on conditions hold, in file order."""
    for svc in stack.values():
        for dep, condition in svc.depends_on.items():
            if dep in INFRA:  # healthy by construction: the session's fixtures
                infra_ready(dep, broker, db_url)
                continue
            other = stack[dep]
            if condition == "service_completed_successfully":
                rc = wait_exit(other, ONE_SHOT_TIMEOUT)
                assert rc == 0, f"{dep} exited {rc}:\n{other.text()[-3000:]}"
            elif condition == "service_healthy":
                wait_healthy(other)
            else:
                assert condition == "service_started", condition
                assert other.proc is not None, f"{svc.name} needs {dep} started first"
        svc.start()


def stop_all(stack: Mapping[str, LocalService]) -> None:
    """SIGTERM everything still running at once, SIGKILL what is left after a timeout."""
    running = [s.proc for s in stack.values() if s.proc is not None and s.proc.poll() is None]
    for proc in running:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    for proc in running:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for svc in stack.values():
        if svc.log is not None:
            svc.log.close()


def http_get(port: int, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return response.status, response.read().decode()


def listens_on_all_addresses(port: int) -> bool | None:
    """True if a socket listens on 0.0.0.0:port or [::]:port; None without /proc/net."""
    readable = False
    for table, any_addr in (("/proc/net/tcp", "0" * 8), ("/proc/net/tcp6", "0" * 32)):
        try:
            rows = [line.split() for line in Path(table).read_text().splitlines()[1:]]
        except OSError:
            continue
        readable = True
        for row in rows:
            addr, _, hex_port = row[1].partition(":")
            if row[3] == "0A" and int(hex_port, 16) == port and addr == any_addr:
                return True
    return False if readable else None


def job_lines(text: str) -> dict[str, tuple[bool, int]]:
    """The coordinator's last word per job: (finished, closed round attempts)."""
    jobs = {}
    for line in text.splitlines():
        match = JOB_LINE.match(line.strip())
        if match:
            jobs[match["job"]] = (match["finished"] == "True", int(match["n"]))
    return jobs


def audit_rows(url: str, jobs: set[str]) -> tuple[Counter[tuple[str, int]], set[str]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rounds = conn.execute(
                select(RoundAudit.job_id, RoundAudit.round_index).where(RoundAudit.job_id.in_(jobs))
            ).all()
            finished = conn.execute(
                select(JobAudit.job_id).where(
                    JobAudit.job_id.in_(jobs), JobAudit.finished_at.is_not(None)
                )
            ).all()
    finally:
        engine.dispose()
    return Counter((r.job_id, r.round_index) for r in rounds), {r.job_id for r in finished}


@pytest.fixture
def compose_db(pg_admin_url: str) -> Iterator[str]:
    url = create_database(pg_admin_url, f"venn_compose_{uuid.uuid4().hex[:10]}")
    try:
        yield url
    finally:
        drop_database(url)


def test_every_service_runs_as_compose_starts_it(
    broker: str, compose_db: str, tmp_path: Path, unique: str
) -> None:
    compose = load_compose()
    stack = plan(compose, broker, compose_db, tmp_path, unique)
    assert set(stack) == (CORE | DEMO) - INFRA
    gated = {d for s in stack.values() for d, c in s.depends_on.items() if "completed" in c}
    assert gated == ONE_SHOTS
    started = time.monotonic()
    failed = True
    try:
        start_in_order(stack, broker, compose_db)
        coordinator = stack["coordinator"]
        rc = wait_exit(coordinator, COORDINATOR_TIMEOUT)
        command = [str(a) for a in compose["services"]["coordinator"]["command"]]
        expected_jobs = int(command[command.index("--jobs") + 1])
        jobs = job_lines(coordinator.text())
        assert rc == 0, f"coordinator exited {rc}"
        assert len(jobs) == expected_jobs and all(done for done, _ in jobs.values()), jobs

        # One audit row per closed round attempt (round_index = attempt), one finished job row.
        want = Counter({(job, i): 1 for job, (_, n) in jobs.items() for i in range(n)})
        deadline = time.monotonic() + 30
        while True:
            rows, finished = audit_rows(compose_db, set(jobs))
            if (rows == want and finished == set(jobs)) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert rows == want
        assert finished == set(jobs)

        gateway, scheduler = stack["gateway"], stack["scheduler"]
        status, body = http_get(gateway.ports[8080], "/healthz")
        assert status == 200 and json.loads(body)["status"] == "ok", body
        assert gateway.env["VENN_GATEWAY_HOST"] == "0.0.0.0"
        assert listens_on_all_addresses(gateway.ports[8080]) in (True, None)
        (web_port,) = scheduler.ports.values()
        status, metrics = http_get(web_port, "/metrics")
        assigned = re.search(r"^venn_scheduler_assignments_total (\S+)$", metrics, re.M)
        assert status == 200 and assigned and float(assigned.group(1)) > 0, metrics[:2000]
        assert listens_on_all_addresses(web_port) in (True, None)

        servers = [s for s in stack.values() if s.name not in ONE_SHOTS | {"coordinator"}]
        exited = {s.name: s.exited() for s in servers if s.exited() is not None}
        assert exited == {}, f"long-running services exited: {exited}"
        failed = False
    finally:
        stop_all(stack)
        elapsed = time.monotonic() - started
        if failed:
            for svc in stack.values():
                state = "not started" if svc.proc is None else f"exit {svc.proc.returncode}"
                print(f"===== {svc.name} ({state}) {svc.log_path}")
                print("\n".join(svc.text().splitlines()[-60:]))
        print(f"compose stack ran for {elapsed:.0f} s; logs in {tmp_path}")
