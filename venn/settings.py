"""One settings object for every Venn process, read from environment variables.

The same names are used by the embedded runner and by docker-compose.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from venn.broker.security import MECHANISM, Credentials, client_options
from venn.broker.tuning import ClientTuning, tuning_for


def _env(name: str, default: str | int | float, doc: str) -> Any:
    # The default's own type is the type the env string is parsed into.
    return field(default=default, metadata={"env": name, "doc": doc})


@dataclass(frozen=True, slots=True)
class Settings:
    """Process configuration. Build it with `Settings.from_env()`."""

    broker: str = _env(
        "VENN_BROKER",
        "127.0.0.1:9092",
        "Kafka bootstrap servers (host:port[,host:port]); `venn up` listens here.",
    )
    broker_kind: str = _env(
        "VENN_BROKER_KIND",
        "auto",
        "kafka (Apache Kafka from its jars), tansu (in-memory, pip only), external (VENN_BROKER "
        "is a cluster you run), auto (kafka where a JDK 17+ and Maven or the cached jars are "
        "present, else tansu).",
    )
    kafka_nodes: int = _env(
        "VENN_KAFKA_NODES",
        1,
        "Apache Kafka nodes `venn up` starts locally: 1, or 3 (topics replicated 3 times, "
        "min.insync.replicas 2: one node may fail).",
    )
    broker_tuning: str = _env(
        "VENN_BROKER_TUNING",
        "",
        "Kafka client profile (venn/broker/tuning.py): empty follows the broker kind (Tansu's "
        "workarounds on tansu only); kafka or tansu forces one (benchmarks compare them).",
    )
    run_dir: str = _env(
        "VENN_RUN_DIR",
        "./run",
        "Directory for pid files, logs and the local Kafka and Postgres data.",
    )
    auth_secret: str = _env(
        "VENN_AUTH_SECRET",
        "",
        "Key that signs and checks API tokens (32+ bytes; from the environment, never the "
        "repo). Empty: no authentication (`venn up` and `venn demo` make one per run dir).",
    )
    job_token: str = _env(
        "VENN_JOB_TOKEN",
        "",
        "The API token coordinators and the SDK example send with job events (`venn token "
        "job`); empty: minted from VENN_AUTH_SECRET when this process has it.",
    )
    kafka_user: str = _env(
        "VENN_KAFKA_USER",
        "",
        "This process's SASL/SCRAM principal on Kafka; empty: the run dir's for its role "
        "beside `venn up`, else no SASL.",
    )
    kafka_password: str = _env("VENN_KAFKA_PASSWORD", "", "The password of VENN_KAFKA_USER.")
    kafka_mechanism: str = _env(
        "VENN_KAFKA_MECHANISM",
        "SCRAM-SHA-256",
        "SASL mechanism of VENN_KAFKA_USER: SCRAM-SHA-256 (every service), or PLAIN (the admin "
        "of docker-compose's Kafka).",
    )
    device_token_ttl_s: float = _env(
        "VENN_DEVICE_TOKEN_TTL_S", 30 * 86400.0, "Lifetime of a device token issued at enrolment."
    )
    database_url: str = _env(
        "VENN_DATABASE_URL",
        "",
        "SQLAlchemy URL of the audit DB (Postgres, or sqlite:///PATH); empty: `venn up` and "
        "`venn demo` start an embedded PostgreSQL in the run dir.",
    )
    topic_partitions: int = _env(
        "VENN_TOPIC_PARTITIONS", 4, "Partitions of every Venn topic (and Faust changelogs)."
    )
    gateway_port: int = _env("VENN_GATEWAY_PORT", 8080, "HTTP port of the device gateway.")
    app_id: str = _env(
        "VENN_APP_ID", "venn-scheduler", "Faust app id; prefixes the changelog topic names."
    )
    speedup: float = _env(
        "VENN_SPEEDUP", 1.0, "Trace time / wall-clock time factor of the device emulator."
    )
    max_event_bytes: int = _env(
        "VENN_MAX_EVENT_BYTES", 65536, "Events larger than this go to the dead-letter topic."
    )
    recorder_group: str = _env(
        "VENN_RECORDER_GROUP", "venn-recorder", "Consumer group id of the audit recorder."
    )
    policy: str = _env(
        "VENN_POLICY",
        "venn",
        "Scheduling policy: random, random-order, fifo, srsf, venn, venn-sched, venn-paper, "
        "venn-match.",
    )
    seed: int = _env("VENN_SEED", 0, "Seed of the scheduler's deterministic random draws.")
    scheduler_web_port: int = _env(
        "VENN_SCHEDULER_WEB_PORT", 0, "Faust web/metrics port of a scheduler worker; 0 = free port."
    )
    scheduler_web_host: str = _env(
        "VENN_SCHEDULER_WEB_HOST",
        "127.0.0.1",
        "Address a scheduler worker's Faust web/metrics server binds (0.0.0.0 in a container).",
    )
    task_url_base: str = _env(
        "VENN_TASK_URL_BASE",
        "http://coordinator.local",
        "Base of the task URL an assignment gives a device (the job's own server).",
    )
    checkin_max_age_s: float = _env(
        "VENN_CHECKIN_MAX_AGE_S",
        10.0,
        "A check-in older than this when the scheduler reads it is dropped, not assigned (its "
        "device was answered long ago: after a restart or an offset reset).",
    )
    job_timeout_s: float = _env(
        "VENN_JOB_TIMEOUT_S",
        600.0,
        "A job whose coordinator sends nothing (not even a heartbeat) for this long is expired "
        "by the scheduler and its demand released; 0: never.",
    )
    job_heartbeat_s: float = _env(
        "VENN_JOB_HEARTBEAT_S", 30.0, "How often the SDK tells Venn that a job's coordinator lives."
    )
    dedupe_window: int = _env(
        "VENN_DEDUPE_WINDOW", 100000, "Recent event ids a scheduler worker remembers for dedupe."
    )
    scheduler_fetch_wait_ms: int = _env(
        "VENN_SCHEDULER_FETCH_WAIT_MS",
        0,
        "Longest a scheduler fetch waits for data; 0: the broker's profile (10 ms on Tansu, "
        "where all of it is latency; 500 ms on Kafka).",
    )
    scheduler_mode: str = _env(
        "VENN_SCHEDULER_MODE",
        "single",
        "single: run one scheduler worker, which owns every partition; leased: any number "
        "of workers share the check-in partitions, each deciding with lease quota "
        "(venn.core.partition, docs/workers.md).",
    )
    recorder_port: int = _env(
        "VENN_RECORDER_PORT", 0, "HTTP port of the recorder's /healthz and /metrics; 0: none."
    )
    recorder_host: str = _env("VENN_RECORDER_HOST", "127.0.0.1", "Address the recorder binds.")
    gateway_host: str = _env("VENN_GATEWAY_HOST", "127.0.0.1", "Address the gateway binds.")
    gateway_wait_s: float = _env(
        "VENN_GATEWAY_WAIT_S", 2.0, "Longest a check-in waits for its answer before retry_after."
    )
    gateway_max_inflight: int = _env(
        "VENN_GATEWAY_MAX_INFLIGHT", 2000, "Check-ins in progress beyond which new ones get 429."
    )
    gateway_max_lag_s: float = _env(
        "VENN_GATEWAY_MAX_LAG_S", 0.25, "Event-loop lag beyond which new check-ins get 429."
    )
    gateway_idle_timeout_s: float = _env(
        "VENN_GATEWAY_IDLE_TIMEOUT_S",
        10.0,
        "A connection that has not completed a request's headers in this long (or idles this "
        "long between requests) is closed.",
    )
    gateway_max_body: int = _env("VENN_GATEWAY_MAX_BODY", 16384, "Largest request body, bytes.")
    gateway_retry_after_s: int = _env(
        "VENN_GATEWAY_RETRY_AFTER_S", 30, "retry_after of a check-in that got no assignment."
    )
    gateway_busy_retry_after_s: int = _env(
        "VENN_GATEWAY_BUSY_RETRY_AFTER_S", 2, "retry_after of a check-in refused on overload."
    )
    gateway_fast_no: int = _env(
        "VENN_GATEWAY_FAST_NO",
        1,
        "1: answer at once when no open round admits the device (the gateway's demand view).",
    )
    gateway_linger_ms: int = _env(
        "VENN_GATEWAY_LINGER_MS",
        5,
        "How long the gateway gathers check-ins into one batch (5 ms: fewer, larger "
        "messages under load; docs/notes/performance.md).",
    )
    gateway_batch_max: int = _env(
        "VENN_GATEWAY_BATCH_MAX", 128, "Most check-ins in one batch event (also capped by size)."
    )
    gateway_fetch_wait_ms: int = _env(
        "VENN_GATEWAY_FETCH_WAIT_MS",
        0,
        "Longest a gateway fetch of answers waits for data; 0: the broker's profile.",
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read every field from `environ` (default `os.environ`), falling back to what the
        stack running in the run dir recorded (its broker and database), then to defaults."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = env.get(f.metadata["env"])
            if raw is not None:
                values[f.name] = _convert(f.name, f.metadata["env"], raw, type(f.default))
        run_dir = values.get("run_dir", _DEFAULT_RUN_DIR)
        for name, value in running_stack(run_dir).items():
            values.setdefault(name, value)
        return cls(**values)

    @property
    def run_path(self) -> Path:
        return Path(self.run_dir)

    def for_role(self, role: str) -> Settings:
        """These settings with the Kafka credentials of ``role`` (a principal of
        venn.broker.security): VENN_KAFKA_USER when set, else the run dir's for that role."""
        if self.kafka_user:
            return self
        users = run_dir_kafka_users(self.run_dir)
        if role not in users:
            return self
        # The run dir's users are SCRAM users, whatever VENN_KAFKA_MECHANISM says.
        return dataclasses.replace(
            self, kafka_user=role, kafka_password=users[role], kafka_mechanism=MECHANISM
        )

    @property
    def kafka_credentials(self) -> Credentials | None:
        if not self.kafka_user:
            return None
        return Credentials(self.kafka_user, self.kafka_password, self.kafka_mechanism)

    @property
    def kafka_options(self) -> dict[str, Any]:
        """Keyword arguments every aiokafka client of this process takes (SASL or none)."""
        return client_options(self.kafka_credentials)

    @property
    def auth_enabled(self) -> bool:
        return bool(self.auth_secret)

    @property
    def tuning(self) -> ClientTuning:
        """Kafka client settings for this broker (venn/broker/tuning.py)."""
        return tuning_for(self.broker_kind, self.broker_tuning)

    @property
    def scheduler_fetch_wait(self) -> int:
        return self.scheduler_fetch_wait_ms or self.tuning.fetch_wait_ms

    @property
    def gateway_fetch_wait(self) -> int:
        return self.gateway_fetch_wait_ms or self.tuning.fetch_wait_ms

    def as_env(self) -> dict[str, str]:
        """The settings as environment variables, to pass to child processes."""
        return {f.metadata["env"]: str(getattr(self, f.name)) for f in dataclasses.fields(self)}


STACK_FILE = "stack.json"
STACK_FIELDS = ("broker", "broker_kind", "database_url")
SECRETS_FILE = "secrets.json"
"""The run dir's own secret (mode 0600), made by `venn up`/`venn demo` when VENN_AUTH_SECRET
is unset; kept across `venn down`/`venn up` so that issued tokens stay valid."""


def running_stack(run_dir: str | Path) -> dict[str, str]:
    """The addresses `venn up` recorded in ``run_dir`` (removed by `venn down`), so that a
    client started in the same directory finds the stack wherever it listens."""
    try:
        record = json.loads((Path(run_dir) / STACK_FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict):
        return {}
    found = {k: str(record[k]) for k in STACK_FIELDS if isinstance(record.get(k), str)}
    secret = run_dir_secret(run_dir)
    if secret:
        found["auth_secret"] = secret
    return found


def _read_secrets(run_dir: str | Path) -> dict[str, Any]:
    try:
        found = json.loads((Path(run_dir) / SECRETS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _write_secrets(run_dir: str | Path, values: dict[str, Any]) -> None:
    path = Path(run_dir) / SECRETS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(values, out)


def run_dir_secret(run_dir: str | Path, create: bool = False) -> str:
    """The run dir's auth secret ("" when none and not ``create``)."""
    found = _read_secrets(run_dir)
    secret = found.get("auth_secret")
    if isinstance(secret, str) and secret:
        return secret
    if not create:
        return ""
    secret = secrets.token_urlsafe(48)
    _write_secrets(run_dir, {**found, "auth_secret": secret})
    return secret


def run_dir_kafka_users(
    run_dir: str | Path, principals: tuple[str, ...] = (), create: bool = False
) -> dict[str, str]:
    """Kafka principal -> password of the run dir's local broker ({} when it has none);
    with ``create``, one is made for each of ``principals`` that lacks one."""
    found = _read_secrets(run_dir)
    users = found.get("kafka_users")
    users = {str(k): str(v) for k, v in users.items()} if isinstance(users, dict) else {}
    missing = [p for p in principals if p not in users]
    if create and missing:
        users.update({p: secrets.token_urlsafe(24) for p in missing})
        _write_secrets(run_dir, {**found, "kafka_users": users})
    return users


def _convert(name: str, env: str, raw: str, cast: Callable[[str], Any]) -> Any:
    try:
        return cast(raw)
    except ValueError as exc:
        raise ValueError(f"{env}={raw!r} is not a valid {cast.__name__} for {name}") from exc


@dataclass(frozen=True, slots=True)
class SettingDoc:
    name: str
    env: str
    default: str
    doc: str


def describe() -> list[SettingDoc]:
    """Every setting with its env var, raw default and doc (for the README / `venn config`)."""
    return [
        SettingDoc(f.name, f.metadata["env"], str(f.default), f.metadata["doc"])
        for f in dataclasses.fields(Settings)
    ]


def markdown_table() -> str:
    rows = ["| Variable | Default | Meaning |", "|---|---|---|"]
    rows += [f"| `{d.env}` | `{d.default}` | {d.doc} |" for d in describe()]
    return "\n".join(rows)


_DEFAULT_RUN_DIR = next(f.default for f in dataclasses.fields(Settings) if f.name == "run_dir")
