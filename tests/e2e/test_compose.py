"""docker-compose.yml: its configuration, and the whole stack under a real Docker engine.

1. `docker-compose config` refuses the file without its secrets (they come from the
   environment), parses it with them (dummy values), with and without the demo profile, and
   resolves the same services, commands and environments as PyYAML plus compose's variable
   interpolation do here (the anchors, the merges, `${VAR:?message}`, `${VAR:-default}`).
2. The file runs the releases the project tests against (Apache Kafka of kafka-pom.xml,
   the embedded Postgres's major version) by default, each image overridable; no secret is
   written in it; it publishes ports on the loopback address only; every Venn service takes
   the shared `x-venn-env`, whose names are all settings of venn/settings.py, plus exactly
   its own Kafka principal (venn.broker.security), and the API secret or the database only
   where it needs them; the kafka service sets every key the apache/kafka image would
   otherwise fill with its own defaults.
3. `make compose-check` (ops/compose/check.py): every image built here, the demo and
   metrics profiles up under a Docker engine, the demo workload finished with one audit row
   per closed round, a device check-in from the host, Kafka's advertised address and ACLs
   from the host, Prometheus scraping, and nothing left after `docker-compose down -v`.
   Parts 1 and 2 check what that run cannot see: the file's refusals and its shape.

Without docker-compose the config test is skipped, and without a running Docker engine,
debootstrap or Maven the engine test, unless VENN_REQUIRE_COMPOSE=1: then they fail instead,
and the engine test starts dockerd (as root) if none runs. .ci/run sets it, and installs
Debian's docker-compose, docker.io and debootstrap.
"""

from __future__ import annotations

import base64
import os
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy.engine import make_url

from devtools.kafka import kafka_version
from ops.compose import engine
from venn.broker import security
from venn.settings import Settings, describe

pytestmark = [pytest.mark.e2e, pytest.mark.own_broker]  # compose runs its own Kafka

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
CORE = {"kafka", "postgres", "migrate", "topics", "scheduler", "recorder", "gateway"}
DEMO = {"coordinator", "devices"}
METRICS = {"prometheus", "grafana"}  # third-party images under the metrics profile
COMPOSE_KAFKA = "kafka:9092"
COMPOSE_CHECK_TIMEOUT = 2400  # every image built from nothing, then the demo


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


IMAGE_VARIABLES = {
    "VENN_PYTHON_IMAGE", "VENN_KAFKA_IMAGE", "VENN_POSTGRES_IMAGE", "VENN_PROMETHEUS_IMAGE",
    "VENN_GRAFANA_IMAGE",
}  # fmt: skip
PORT_VARIABLES = {
    f"VENN_COMPOSE_{s}_PORT" for s in ("KAFKA", "POSTGRES", "GATEWAY", "PROMETHEUS", "GRAFANA")
}
"""Variables with defaults: the images (upstream ones unless set: `make compose-images`
builds stand-ins) and the host ports the stack publishes."""


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

    # What compose resolves is what the tests below read with PyYAML and interpolate.
    resolved = yaml.safe_load(run_compose(compose_cli, dummy, "--profile", "demo", "config"))
    local = load_compose()["services"]
    for name, service in resolved["services"].items():
        assert environment_of(service) == resolved_environment(local[name], dummy), name
        assert service.get("command") == local[name].get("command"), name
        assert conditions(service) == conditions(local[name]), name


# -- 2. the file itself ----------------------------------------------------------------------


def test_compose_runs_the_tested_releases_and_the_shared_settings() -> None:
    from devtools.postgres import server_version

    compose = load_compose()
    services = compose["services"]
    image = {name: interpolate(str(s["image"]), {}) for name, s in services.items() if "image" in s}
    assert image["kafka"] == f"apache/kafka:{kafka_version()}"
    pg_major = image["postgres"].split(":")[1].split(".")[0]
    assert pg_major == server_version().split(".")[0]
    dummy = make_secrets()
    kafka = resolved_environment(services["kafka"], dummy)
    # Secured as `venn up`'s Kafka: no access without an ACL, admin the only super user.
    assert kafka["KAFKA_AUTHORIZER_CLASS_NAME"].endswith(".StandardAuthorizer")
    assert kafka["KAFKA_SUPER_USERS"] == "User:admin"
    assert kafka["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    assert set(IMAGE_DEFAULTED) <= set(kafka), set(IMAGE_DEFAULTED) - set(kafka)
    # The image's start script exits unless KAFKA_OPTS names a JAAS file when an advertised
    # listener's name holds "SASL_" (docker/resources/common-scripts/configure).
    if re.search(r"SASL_.*://", kafka["KAFKA_ADVERTISED_LISTENERS"]):
        assert "java.security.auth.login.config" in kafka.get("KAFKA_OPTS", "")
    assert len(base64.urlsafe_b64decode(kafka["CLUSTER_ID"] + "==")) == 16
    assert kafka["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert kafka["KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"] == "0"
    # The scheduler's short session (a standby takes over from a killed decider in seconds)
    # is one the broker accepts.
    tuning = Settings.from_env({"VENN_BROKER_KIND": "external"}, running=False)
    assert int(kafka["KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS"]) <= tuning.scheduler_session_timeout
    # The host listener advertises the port the host reaches it on.
    assert "HOST://localhost:29092" in kafka["KAFKA_ADVERTISED_LISTENERS"]
    assert interpolate(services["kafka"]["ports"][0], {}) == "127.0.0.1:29092:29092"
    host_port = {**dummy, "VENN_COMPOSE_KAFKA_PORT": "39092"}
    advertised = resolved_environment(services["kafka"], host_port)["KAFKA_ADVERTISED_LISTENERS"]
    assert "HOST://localhost:39092" in advertised
    assert interpolate(services["kafka"]["ports"][0], host_port) == "127.0.0.1:39092:29092"
    # Traffic stays on the machine: every published port is on the loopback address.
    for name, service in services.items():
        for entry in service.get("ports") or []:
            assert interpolate(str(entry), {}).startswith("127.0.0.1:"), f"{name}: {entry}"

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
    assert services["scheduler"]["ports"] == [f"127.0.0.1::{shared['VENN_SCHEDULER_WEB_PORT']}"]
    assert {n for n, s in services.items() if s.get("profiles")} == DEMO | METRICS
    assert all(services[n]["profiles"] == ["metrics"] for n in METRICS)


def test_no_secret_is_written_in_the_file() -> None:
    """Passwords and keys are references to the environment of `docker compose`, each one
    required (`${VAR:?message}`); the only other variables are images and published ports,
    each with its default (`${VAR:-default}`), none of them a Venn setting."""
    text = COMPOSE_FILE.read_text()
    references = [m for m in REFERENCE.finditer(text) if m["name"]]
    required = {m["name"] for m in references if m["op"] == ":?"}
    defaulted = {m["name"] for m in references if m["op"] == ":-" and m["arg"]}
    assert required == SECRET_VARIABLES
    assert defaulted == IMAGE_VARIABLES | PORT_VARIABLES
    assert {m["name"] for m in references} == required | defaulted, [m[0] for m in references]
    assert not defaulted & {d.env for d in describe()}

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


# -- 3. under a Docker engine -----------------------------------------------------------------


def compose_check_unavailable() -> str | None:
    """Why `make compose-check` does not run here, or None. It starts dockerd when no engine
    answers, which a test does only when asked to (VENN_REQUIRE_COMPOSE=1, as in CI)."""
    for tool, package in (("docker-compose", "docker-compose"), ("debootstrap", "debootstrap"),
                          ("mvn", "maven"), ("make", "make")):  # fmt: skip
        if shutil.which(tool) is None:
            return f"no {tool} (apt-get install {package})"
    if os.environ.get("VENN_REQUIRE_COMPOSE") != "1" and not engine.answers():
        return "no Docker engine answers (make compose-check starts one)"
    return engine.unavailable_reason()


@pytest.mark.timeout(COMPOSE_CHECK_TIMEOUT)
def test_the_stack_runs_under_a_docker_engine(tmp_path: Path) -> None:
    """`make compose-check` passes: see ops/compose/check.py for each of its checks."""
    reason = compose_check_unavailable()
    if reason is not None:
        if os.environ.get("VENN_REQUIRE_COMPOSE") == "1":
            pytest.fail(f"{reason}; VENN_REQUIRE_COMPOSE=1 requires the compose check")
        pytest.skip(reason)
    log = tmp_path / "compose-check.log"
    with open(log, "wb") as out:
        done = subprocess.run(
            ["make", "--no-print-directory", "compose-check"],
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if not k.startswith("VENN_")},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=COMPOSE_CHECK_TIMEOUT - 60,
            check=False,
        )
    text = log.read_text(errors="replace")
    print(text[-6000:])
    assert done.returncode == 0, f"make compose-check exited {done.returncode}:\n{text[-20000:]}"
    assert "compose-check passed" in text
