"""docker-compose.yml, tested without a Docker engine.

1. `docker-compose config` refuses the file without its secrets (they come from the
   environment), parses it with them (dummy values), with and without the demo profile, and
   resolves the same services, commands and environments as PyYAML plus compose's variable
   interpolation do here (the anchors, the merges, `${VAR:?message}`).
2. The file runs the releases the project tests against (Apache Kafka of kafka-pom.xml,
   the embedded Postgres's major version); no secret is written in it; every Venn service
   takes the shared `x-venn-env`, whose names are all settings of venn/settings.py, plus
   exactly its own Kafka principal (venn.broker.security), and the API secret or the
   database only where it needs them. The kafka service's KAFKA_* settings, rendered as the
   apache/kafka image renders them, start this Kafka release from its jars, secured: the
   admin signs in with PLAIN on both listeners (each advertising what compose promises), a
   client without credentials is refused, and the service's own healthcheck passes.
3. Every service's `command` runs as a local process with the environment compose gives
   it (the secrets are the test's), in the order its `depends_on` conditions require (its
   own healthchecks included): the `kafka` service is that secured Kafka (one-shot `topics`
   makes the services' SCRAM users and ACLs), `postgres` the session's Postgres (a fresh
   database), host names are mapped to their local addresses, every *_PORT is a free port
   (the published ports follow it), the run dir is a scratch dir (existing only if the
   Dockerfile creates it), and the app id and recorder group are made unique. Nothing else
   is changed. The demo workload finishes, and the gateway's principal may not write job
   events on that cluster.

Without a docker-compose binary the config test is skipped, unless VENN_REQUIRE_COMPOSE=1
(.ci/run sets it, and installs Debian's docker-compose).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import secrets
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
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError, KafkaError, TopicAuthorizationFailedError
from sqlalchemy import select
from sqlalchemy.engine import make_url

from venn.audit.db import create_database, drop_database, make_engine
from venn.audit.models import JobAudit, RoundAudit
from venn.broker import security, topics
from venn.broker.kafka import kafka_version
from venn.broker.process import free_port
from venn.broker.security import Credentials, client_options
from venn.settings import Settings, describe

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
CORE = {"kafka", "postgres", "migrate", "topics", "scheduler", "recorder", "gateway"}
DEMO = {"coordinator", "devices"}
METRICS = {"prometheus", "grafana"}  # third-party images under the metrics profile
INFRA = {"kafka", "postgres"}  # images, not our commands: a Kafka from the jars, Postgres
ONE_SHOTS = {"migrate", "topics"}
COMPOSE_KAFKA = "kafka:9092"
UNIQUE_VARS = ("VENN_APP_ID", "VENN_RECORDER_GROUP")
ONE_SHOT_TIMEOUT = 120.0
COORDINATOR_TIMEOUT = 300.0
STOP_TIMEOUT = 15.0
JOB_LINE = re.compile(r"^(?P<job>\S+): finished=(?P<finished>\w+) jct_s=\S+ attempts=(?P<n>\d+)$")

# Who each Venn service is on Kafka (migrate never talks to Kafka), who holds the API
# secret (checks tokens, or mints them: the demo's coordinator), who reaches the database.
PRINCIPAL_OF = {
    "topics": security.ADMIN,
    "scheduler": "scheduler",
    "recorder": "recorder",
    "gateway": "gateway",
    "coordinator": "coordinator",
    "devices": "devices",
}
JOB_API = {"gateway": security.JOBS}
"""A service that also signs in as a second principal for one part of its work: the
gateway's job API writes venn.jobs as `jobs` (the gateway's own principal cannot)."""
AUTH_SECRET_HOLDERS = {"scheduler", "recorder", "gateway", "coordinator"}
DATABASE_USERS = {"migrate", "recorder"}
SECRET_VARIABLES = {
    *(security.password_variable(p) for p in security.PRINCIPALS),
    "VENN_AUTH_SECRET",
    "VENN_POSTGRES_PASSWORD",
}
"""Every variable the file takes from the environment of `docker compose`: its secrets."""
REFERENCE = re.compile(r"\$(?:(?P<escaped>\$)|\{(?P<name>\w+)(?P<op>:?[-?])?(?P<arg>[^}]*)\})")


def interpolate(value: str, variables: Mapping[str, str]) -> str:
    """Compose's variable interpolation of one value: `$$` is `$`, `${VAR}`, `${VAR:-default}`
    and `${VAR:?message}` (an error when unset or empty)."""

    def one(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name, op, arg = match["name"], match["op"] or "", match["arg"]
        given = variables.get(name)
        unset = given is None or (op.startswith(":") and given == "")
        if op.endswith("?") and unset:
            raise KeyError(f"{name}: {arg}")
        if op.endswith("-") and unset:
            return arg
        return given or ""

    return REFERENCE.sub(one, value)


def is_required(value: str, name: str) -> bool:
    """Whether ``value`` is exactly `${name:?message}`: taken from the environment, required."""
    match = REFERENCE.fullmatch(value)
    return bool(match and match["name"] == name and match["op"] == ":?")


def make_secrets() -> dict[str, str]:
    """Values for SECRET_VARIABLES (hex: safe in JAAS lines and database URLs)."""
    return {name: secrets.token_hex(32) for name in sorted(SECRET_VARIABLES)}


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


def resolved_environment(
    service: Mapping[str, Any], variables: Mapping[str, str]
) -> dict[str, str]:
    """A service's environment after compose's interpolation with ``variables``."""
    return {k: interpolate(v, variables) for k, v in environment_of(service).items()}


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


def compose_run(
    cli: list[str], variables: Mapping[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """`docker-compose ARGS` with ``variables`` as its only VENN_* environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENN_")}
    return subprocess.run(
        [*cli, "-f", str(COMPOSE_FILE), *args],
        cwd=ROOT,
        env={**env, **variables},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def run_compose(cli: list[str], variables: Mapping[str, str], *args: str) -> str:
    done = compose_run(cli, variables, *args)
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
    # The secrets come from the environment: without one, compose refuses the file.
    dummy = make_secrets()
    for missing in sorted(SECRET_VARIABLES):
        given = {k: v for k, v in dummy.items() if k != missing}
        refused = compose_run(compose_cli, given, "--profile", "demo", "config", "-q")
        assert refused.returncode != 0, f"compose ran without {missing}"
        assert f"{missing} unset" in refused.stderr, refused.stderr[-500:]

    for profile in ([], ["--profile", "demo"], ["--profile", "metrics"]):
        run_compose(compose_cli, dummy, *profile, "config", "-q")
    plain = set(run_compose(compose_cli, dummy, "config", "--services").split())
    demo = set(run_compose(compose_cli, dummy, "--profile", "demo", "config", "--services").split())
    metrics = set(
        run_compose(compose_cli, dummy, "--profile", "metrics", "config", "--services").split()
    )
    # Compose 1.x lists profiled services in `config` whatever --profile says; 2.x does not.
    if compose_major(compose_cli) < 2:
        assert plain == demo == metrics == CORE | DEMO | METRICS
    else:
        assert (plain, demo, metrics) == (CORE, CORE | DEMO, CORE | METRICS)

    # What compose resolves is what the local run below reads with PyYAML and interpolates.
    resolved = yaml.safe_load(run_compose(compose_cli, dummy, "--profile", "demo", "config"))
    local = load_compose()["services"]
    for name, service in resolved["services"].items():
        assert environment_of(service) == resolved_environment(local[name], dummy), name
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
    # The scheduler's short session (a standby takes over from a killed decider in seconds)
    # is one the broker accepts.
    tuning = Settings.from_env({"VENN_BROKER_KIND": "external"}, running=False)
    assert int(kafka["KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS"]) <= tuning.scheduler_session_timeout
    assert "HOST://localhost:29092" in kafka["KAFKA_ADVERTISED_LISTENERS"]
    assert "29092:29092" in services["kafka"]["ports"]

    shared = {str(k): str(v) for k, v in compose["x-venn-env"].items()}
    known = {d.env for d in describe()}
    assert set(shared) <= known, set(shared) - known
    assert shared["VENN_BROKER"] == COMPOSE_KAFKA and shared["VENN_BROKER_KIND"] == "external"
    assert shared["VENN_GATEWAY_HOST"] == shared["VENN_SCHEDULER_WEB_HOST"] == "0.0.0.0"
    port_values = {int(v) for k, v in shared.items() if k.endswith("_PORT")}
    passwords = {security.password_variable(p) for p in security.SERVICES}
    assert set(ours(compose)) == set(PRINCIPAL_OF) | {"migrate"}
    assert set(PRINCIPAL_OF.values()) | set(JOB_API.values()) == set(security.PRINCIPALS)
    for name, service in ours(compose).items():
        env = environment_of(service)
        assert {k: env.get(k) for k in shared} == shared, f"{name} changes x-venn-env"
        assert set(env) <= known | passwords, f"{name}: {set(env) - known - passwords}"
        # Its own Kafka principal, the password from its own variable; SCRAM but the admin.
        principal = PRINCIPAL_OF.get(name)
        if principal is None:
            assert not {k for k in env if k.startswith("VENN_KAFKA_")}, name
        else:
            assert env["VENN_KAFKA_USER"] == principal, name
            password = security.password_variable(principal)
            assert is_required(env["VENN_KAFKA_PASSWORD"], password), name
            mechanism = env.get("VENN_KAFKA_MECHANISM", security.MECHANISM)
            assert mechanism == (security.PLAIN if principal == security.ADMIN else "SCRAM-SHA-256")
        # Only the admin's step holds the services' passwords, to make their users (and the
        # gateway its job API's).
        given = {k: v for k, v in env.items() if k in passwords}
        if name == "topics":
            assert set(given) == passwords and all(is_required(v, k) for k, v in given.items())
            assert "--secure" in service["command"]
        elif name in JOB_API:
            variable = security.password_variable(JOB_API[name])
            assert set(given) == {variable} and is_required(given[variable], variable), name
        else:
            assert not given, name
        assert ("VENN_AUTH_SECRET" in env) == (name in AUTH_SECRET_HOLDERS), name
        if "VENN_AUTH_SECRET" in env:
            assert is_required(env["VENN_AUTH_SECRET"], "VENN_AUTH_SECRET"), name
        assert ("VENN_DATABASE_URL" in env) == (name in DATABASE_USERS), name
        # A published port is one the service binds (on 0.0.0.0, above).
        assert set(container_ports(service)) <= port_values, name
    assert container_ports(services["gateway"]) == [int(shared["VENN_GATEWAY_PORT"])]
    # Scaled schedulers cannot share a fixed host port.
    assert services["scheduler"]["ports"] == [shared["VENN_SCHEDULER_WEB_PORT"]]
    assert {n for n, s in services.items() if s.get("profiles")} == DEMO | METRICS
    assert all(services[n]["profiles"] == ["metrics"] for n in METRICS)


def test_no_secret_is_written_in_the_file() -> None:
    """Passwords and keys are references to the environment of `docker compose`, each one
    required (`${VAR:?message}`); nothing else is taken from it."""
    text = COMPOSE_FILE.read_text()
    references = [m for m in REFERENCE.finditer(text) if m["name"]]
    assert {m["name"] for m in references} == SECRET_VARIABLES
    assert all(m["op"] == ":?" for m in references), [m[0] for m in references]

    compose = load_compose()
    for name, service in compose["services"].items():
        for key, value in environment_of(service).items():
            if re.search(r"PASSWORD|SECRET", key):
                assert REFERENCE.fullmatch(value), f"{name}: {key} is written in the file"
            for credential in re.findall(r'(?:password|user_\w+)="([^"]*)"', value):
                assert REFERENCE.fullmatch(credential), f"{name}: {key} has a password"
            if "://" in value and "@" in value:
                password = make_url(value).password
                assert password is None or REFERENCE.fullmatch(str(password)), f"{name}: {key}"
        check = " ".join(map(str, (service.get("healthcheck") or {}).get("test", [])))
        assert "password=" not in check or "$$VENN_KAFKA_PASSWORD" in check, name


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


def test_prepare_secure_needs_the_admin_and_every_service_password(tmp_path: Path) -> None:
    """`venn prepare --secure` (the `topics` step) stops with one line naming what is
    missing, before it reaches any broker."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENN_")}
    env |= {"VENN_RUN_DIR": str(tmp_path), "VENN_BROKER": "127.0.0.1:9", "PYTHONPATH": str(ROOT)}
    passwords = {security.password_variable(p): "x" for p in security.SERVICES}
    cases = {
        "VENN_KAFKA_USER": {**env, **passwords},
        security.password_variable("devices"): {
            **env,
            **passwords,
            "VENN_KAFKA_USER": security.ADMIN,
            "VENN_KAFKA_PASSWORD": "x",
            security.password_variable("devices"): "",
        },
    }
    for named, case_env in cases.items():
        done = subprocess.run(
            local_command(["venn", "prepare", "--secure"]),
            env=case_env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, done.stdout + done.stderr
        assert named in done.stderr, done.stderr


@dataclass
class ComposeKafka:
    """The kafka service's configuration running from the jars, on free loopback ports."""

    env: dict[str, str]
    """The kafka service's environment, interpolated with the test's secrets."""
    ports: dict[int, int]
    """Container port -> local port (9092 in the compose network, 29092 on the host)."""
    admin: Credentials
    home: Path
    log_path: Path

    @property
    def bootstrap(self) -> str:
        """Where the other services reach it (compose's kafka:9092)."""
        return f"127.0.0.1:{self.ports[9092]}"

    @property
    def host_bootstrap(self) -> str:
        """Where a client on the host reaches it (compose's localhost:29092)."""
        return f"localhost:{self.ports[29092]}"

    def healthcheck(self) -> list[str]:
        """The service's own healthcheck (CMD-SHELL), run here: the image's
        kafka-broker-api-versions.sh (not in the broker's jars) is a stand-in that reads the
        same arguments and client config and signs in with them; its port and /tmp local."""
        test = load_compose()["services"]["kafka"]["healthcheck"]["test"]
        assert test[0] == "CMD-SHELL", test
        script = interpolate(str(test[1]), {})  # compose's $$ -> $
        bin_dir = self.home / "bin"
        bin_dir.mkdir(exist_ok=True)
        tool = bin_dir / "kafka-broker-api-versions.sh"
        tool.write_text(
            f'#!/bin/sh\nexec "{sys.executable}" "{bin_dir / "api_versions.py"}" "$@"\n'
        )
        tool.chmod(0o755)
        (bin_dir / "api_versions.py").write_text(API_VERSIONS_STAND_IN)
        script = (
            script.replace("/tmp/", f"{self.home}/")
            .replace("/opt/kafka/bin/", f"{bin_dir}/")
            .replace("localhost:9092", self.bootstrap)
        )
        assert "/opt/" not in script, script
        return ["/bin/sh", "-c", script]

    def healthy(self, env: Mapping[str, str] | None = None) -> bool:
        done = subprocess.run(
            self.healthcheck(),
            env={**os.environ, "PYTHONPATH": str(ROOT), **(self.env if env is None else env)},
            cwd=self.home,
            capture_output=True,
            timeout=60,
            check=False,
        )
        return done.returncode == 0


API_VERSIONS_STAND_IN = '''"""Stand-in for kafka-broker-api-versions.sh --bootstrap-server B
--command-config F: signs in to B the way the tool does, with F's security.protocol,
sasl.mechanism and sasl.jaas.config."""
import re
import sys

from venn.broker.security import Credentials, signs_in

args = sys.argv[1:]
bootstrap = args[args.index("--bootstrap-server") + 1]
with open(args[args.index("--command-config") + 1]) as config:
    props = dict(line.split("=", 1) for line in config.read().splitlines() if line)
assert props["security.protocol"] == "SASL_PLAINTEXT", props
jaas = re.fullmatch(
    r'org\\.apache\\.kafka\\.common\\.security\\.plain\\.PlainLoginModule required '
    r'username="([^"]+)" password="([^"]+)";',
    props["sasl.jaas.config"],
)
assert jaas is not None, "not a PLAIN login line"
creds = Credentials(jaas.group(1), jaas.group(2), props["sasl.mechanism"])
sys.exit(0 if signs_in(bootstrap, creds, timeout=5.0) else 1)
'''


@pytest.fixture(scope="module")
def compose_secrets() -> dict[str, str]:
    """What the test's environment gives `docker compose`: one value per secret."""
    return make_secrets()


@pytest.fixture(scope="module")
def compose_kafka(
    tmp_path_factory: pytest.TempPathFactory, compose_secrets: dict[str, str]
) -> Iterator[ComposeKafka]:
    """The kafka service's KAFKA_* settings, rendered as the image does, on this Kafka
    release from its jars: host `kafka` is loopback and ports are free ones."""
    from venn.broker import kafka

    reason = kafka.unavailable_reason()
    if reason is not None:
        pytest.skip(f"Apache Kafka cannot run here: {reason}")
    home = tmp_path_factory.mktemp("compose-kafka")
    env = resolved_environment(load_compose()["services"]["kafka"], compose_secrets)
    assert set(IMAGE_DEFAULTED) <= set(env), set(IMAGE_DEFAULTED) - set(env)
    # The image's start script exits unless KAFKA_OPTS names a JAAS file when an advertised
    # listener's name holds "SASL_" (docker/resources/common-scripts/configure).
    if re.search(r"SASL_.*://", env["KAFKA_ADVERTISED_LISTENERS"]):
        assert "java.security.auth.login.config" in env.get("KAFKA_OPTS", "")
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
    props["log.dirs"] = str(home / "data")
    config = home / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    (home / "log4j2.properties").write_text(kafka.LOG4J2)
    java, libs = kafka.java_binary(), kafka.ensure_libs()
    assert java is not None
    classpath = f"{libs}/*"
    log4j = f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}"
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
    log_path = home / "kafka.log"
    admin_password = compose_secrets[security.password_variable(security.ADMIN)]
    cluster = ComposeKafka(
        env, ports, Credentials(security.ADMIN, admin_password, security.PLAIN), home, log_path
    )
    with open(log_path, "wb") as log:
        node = subprocess.Popen(
            [*server, "kafka.Kafka", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=home,
        )
    try:
        deadline = time.monotonic() + 120
        for bootstrap in (cluster.bootstrap, cluster.host_bootstrap):
            while not security.signs_in(bootstrap, cluster.admin, timeout=1.0):
                assert node.poll() is None, log_path.read_text(errors="replace")[-3000:]
                assert time.monotonic() < deadline, log_path.read_text(errors="replace")[-3000:]
                time.sleep(0.5)
        yield cluster
    finally:
        node.terminate()
        try:
            node.wait(30)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait()


async def brokers_seen_through(bootstrap: str, creds: Credentials | None) -> list[tuple[str, int]]:
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=10000, **client_options(creds)
    )
    await admin.start()
    try:
        cluster = await admin.describe_cluster()
        return [(b["host"], b["port"]) for b in cluster["brokers"]]
    finally:
        await admin.close()


def refused(bootstrap: str, creds: Credentials | None) -> bool:
    try:
        asyncio.run(brokers_seen_through(bootstrap, creds))
    except (KafkaConnectionError, KafkaError):
        return True
    return False


def test_the_kafka_service_configuration_runs_on_apache_kafka(
    compose_kafka: ComposeKafka, compose_secrets: dict[str, str]
) -> None:
    """Secured as `venn up`'s Kafka: the admin signs in with PLAIN on each listener, which
    hands its clients the address compose advertises (kafka:9092 in the network,
    localhost:29092 on the host); a client without credentials, with a wrong password, or
    a service principal with PLAIN is refused; no access without an ACL; the healthcheck
    signs in with the password of its environment."""
    cluster, admin = compose_kafka, compose_kafka.admin
    internal, host = cluster.ports[9092], cluster.ports[29092]
    assert asyncio.run(brokers_seen_through(cluster.bootstrap, admin)) == [("127.0.0.1", internal)]
    assert asyncio.run(brokers_seen_through(cluster.host_bootstrap, admin)) == [("localhost", host)]
    props = kafka_properties(cluster.env)
    assert props["authorizer.class.name"].endswith(".StandardAuthorizer")
    assert props["super.users"] == "User:admin"
    assert props["allow.everyone.if.no.acl.found"] == "false"

    wrong = Credentials(security.ADMIN, "not-its-password", security.PLAIN)
    scheduler = compose_secrets[security.password_variable("scheduler")]
    for bootstrap in (cluster.bootstrap, cluster.host_bootstrap):
        assert refused(bootstrap, None), f"{bootstrap} let a client without credentials in"
        assert refused(bootstrap, wrong)
    # PLAIN is the admin's alone; SCRAM users exist only once `venn prepare --secure` ran.
    assert refused(cluster.bootstrap, Credentials("scheduler", scheduler, security.PLAIN))
    assert refused(cluster.bootstrap, Credentials("scheduler", scheduler))

    assert cluster.healthy(), "the kafka healthcheck fails"
    assert not cluster.healthy({**cluster.env, "VENN_KAFKA_PASSWORD": "wrong"})

    # A service principal with its SCRAM user, on the host listener (as from the host).
    security.ensure_users(cluster.bootstrap, admin, {"scheduler": scheduler})
    creds = Credentials("scheduler", scheduler)
    assert asyncio.run(brokers_seen_through(cluster.host_bootstrap, creds)) == [("localhost", host)]


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
    compose: Mapping[str, Any],
    broker: str,
    db_url: str,
    tmp_path: Path,
    token: str,
    variables: Mapping[str, str],
) -> dict[str, LocalService]:
    host_env = {k: v for k, v in os.environ.items() if not k.startswith("VENN_")}
    names = "|".join(map(re.escape, compose["services"]))
    # A host:port, not a user:password in a URL (a password may begin with digits).
    leftover = re.compile(rf"(?<![\w.-])({names}):\d+(?![\w@:.-])")
    planned: dict[str, LocalService] = {}
    for name, service in ours(compose).items():
        container_env = {**image_env(), **resolved_environment(service, variables)}
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


def infra_ready(name: str, kafka: ComposeKafka, db_url: str) -> None:
    if name == "kafka":
        assert kafka.healthy(), f"the kafka service is not healthy; see {kafka.log_path}"
    else:
        engine = make_engine(db_url)
        try:
            with engine.connect():
                pass
        finally:
            engine.dispose()


def start_in_order(stack: Mapping[str, LocalService], kafka: ComposeKafka, db_url: str) -> None:
    """Start every service once its depends_on conditions hold, in file order."""
    for svc in stack.values():
        for dep, condition in svc.depends_on.items():
            if dep in INFRA:  # started by the fixtures; kafka's own healthcheck is run
                infra_ready(dep, kafka, db_url)
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


async def produce(bootstrap: str, creds: Credentials, topic: str) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, request_timeout_ms=5000, **client_options(creds)
    )
    try:
        await asyncio.wait_for(producer.start(), 15)
        await asyncio.wait_for(producer.send_and_wait(topic, b"{}"), 15)
    finally:
        await producer.stop()


def kafka_credentials(svc: LocalService) -> Credentials:
    """The credentials a service signs in with, from the environment compose gives it."""
    env = svc.env
    mechanism = env.get("VENN_KAFKA_MECHANISM", security.MECHANISM)
    return Credentials(env["VENN_KAFKA_USER"], env["VENN_KAFKA_PASSWORD"], mechanism)


def test_every_service_runs_as_compose_starts_it(
    compose_kafka: ComposeKafka,
    compose_secrets: dict[str, str],
    compose_db: str,
    tmp_path: Path,
    unique: str,
) -> None:
    compose = load_compose()
    broker = compose_kafka.bootstrap
    stack = plan(compose, broker, compose_db, tmp_path, unique, compose_secrets)
    assert set(stack) == (CORE | DEMO) - INFRA
    gated = {d for s in stack.values() for d, c in s.depends_on.items() if "completed" in c}
    assert gated == ONE_SHOTS
    started = time.monotonic()
    failed = True
    try:
        start_in_order(stack, compose_kafka, compose_db)
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

        # Each service signed in as itself: the gateway (which submits jobs for the job API)
        # may not assign devices, the devices may not write job events.
        refused = {"gateway": topics.ASSIGNMENTS, "devices": topics.JOBS}
        for name, topic in refused.items():
            with pytest.raises(TopicAuthorizationFailedError):
                asyncio.run(produce(broker, kafka_credentials(stack[name]), topic))
        assert kafka_credentials(stack["gateway"]).user == "gateway"

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
