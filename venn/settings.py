"""One settings object for every Venn process, read from environment variables.

The same names are used by the embedded runner and by docker-compose.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from venn.broker.security import MECHANISM, Credentials, client_options
from venn.broker.tuning import ClientTuning, tuning_for
from venn.core.admission import Limits
from venn.core.pace import Pace
from venn.core.tenants import TenantConfig, TenantShare, parse_tenants


def setting(env: str, default: str | int | float | bool, doc: str, secret: bool = False) -> Any:
    """A field read from the environment variable ``env``; the default's own type is the
    type the variable is parsed into (a bool: 1/0, true/false, yes/no, on/off)."""
    return field(default=default, metadata={"env": env, "doc": doc, "secret": secret})


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """The device gateway (`services/gateway`): HTTP for devices, the job API, the dashboard."""

    host: str = setting("VENN_GATEWAY_HOST", "127.0.0.1", "Address the gateway binds.")
    port: int = setting("VENN_GATEWAY_PORT", 8080, "HTTP port of the device gateway.")
    wait_s: float = setting(
        "VENN_GATEWAY_WAIT_S",
        2.0,
        "Longest a check-in waits for the scheduler's answer (an assignment, or the check-in "
        "in a CheckinsDeclined) before retry_after. The answer normally comes in tens of "
        "milliseconds; the bound covers a scheduler that is down, restarting or backlogged.",
    )
    max_inflight: int = setting(
        "VENN_GATEWAY_MAX_INFLIGHT",
        2000,
        "Check-ins in progress beyond which new ones get 429 + retry_after at once.",
    )
    max_lag_s: float = setting(
        "VENN_GATEWAY_MAX_LAG_S",
        0.25,
        "Event-loop lag beyond which new check-ins get 429 + retry_after at once: when the "
        "process is CPU-bound, requests wait before their handler (and its bound) even "
        "starts, so shedding on lag keeps the answers of admitted requests fast.",
    )
    idle_timeout_s: float = setting(
        "VENN_GATEWAY_IDLE_TIMEOUT_S",
        10.0,
        "A connection that has not completed a request's headers in this long (or idles this "
        "long between requests) is closed: a client that never finishes its headers would "
        "hold its connection forever. The body has its own bound, VENN_GATEWAY_WAIT_S.",
    )
    max_body_bytes: int = setting("VENN_GATEWAY_MAX_BODY", 16384, "Largest request body, bytes.")
    retry_after_s: int = setting(
        "VENN_GATEWAY_RETRY_AFTER_S",
        30,
        "Base pace: retry_after of a check-in that got no assignment when the gateway cannot "
        "tell what the open rounds want of the device (its view of demand not read yet); "
        "supply reports count check-ins at this pace (venn/core/pace.py).",
    )
    wanted_retry_after_s: int = setting(
        "VENN_GATEWAY_WANTED_RETRY_AFTER_S",
        10,
        "Pace steering: retry_after (before jitter) of a device that an open round with "
        "remaining demand admits: it comes back sooner while its rounds wait.",
    )
    idle_retry_after_s: int = setting(
        "VENN_GATEWAY_IDLE_RETRY_AFTER_S",
        120,
        "Pace steering: retry_after (before jitter) of a device that no open round admits, "
        "the bound: a fleet no round can use checks in this rarely. Equal to "
        "VENN_GATEWAY_RETRY_AFTER_S and VENN_GATEWAY_WANTED_RETRY_AFTER_S: no steering.",
    )
    wanted_max_age_s: int = setting(
        "VENN_GATEWAY_WANTED_MAX_AGE_S",
        5,
        "How long a device or an HTTP cache may keep `GET /v1/wanted` (what open rounds can "
        "still use) without asking again: its Cache-Control max-age.",
    )
    retry_jitter: float = setting(
        "VENN_GATEWAY_RETRY_JITTER",
        0.2,
        "Each retry_after is its interval times 1 +- up to this share, drawn per answer, so "
        "devices told to come back at one instant do not all come back at one instant.",
    )
    busy_retry_after_s: int = setting(
        "VENN_GATEWAY_BUSY_RETRY_AFTER_S",
        2,
        "retry_after of a check-in refused because the gateway is overloaded or Kafka is down.",
    )
    fast_no: bool = setting(
        "VENN_GATEWAY_FAST_NO",
        True,
        "Answer retry_after at once when no open round with remaining demand admits the "
        "device (the gateway's own view of venn.jobs, venn.rounds and venn.assignments).",
    )
    forward_quota: float = setting(
        "VENN_GATEWAY_FORWARD_QUOTA",
        2.0,
        "A check-in an open round admits is answered at once instead of forwarded when the "
        "gateways together already have this many times that requirement's remaining demand "
        "in check-ins at the scheduler; each holds its share by the live gateway count the "
        "scheduler's status gives (services/gateway/forwarding.py).",
    )
    quota_patience_s: float = setting(
        "VENN_GATEWAY_QUOTA_PATIENCE_S",
        1.0,
        "When a requirement's quota is held by some of the gateways (VENN_GATEWAY_QUOTA_LUMP), "
        "they are alone until its demand has stayed open this long; then every gateway "
        "forwards one (a requirement whose devices are rare is not left to a few gateways).",
    )
    quota_lump: int = setting(
        "VENN_GATEWAY_QUOTA_LUMP",
        8,
        "With many gateways, a requirement's quota goes to few of them (at least 4), about "
        "this many check-ins each, so that what one forwards reaches the scheduler as one "
        "batch rather than one record per check-in (services/gateway/forwarding.py).",
    )
    supply_report_s: float = setting(
        "VENN_SUPPLY_REPORT_S",
        1.0,
        "How often the gateway reports the check-ins it received per attribute set (forwarded "
        "or answered at once): the supply mix the scheduler plans with. With many gateways, "
        "less often (VENN_SUPPLY_REPORTS_PER_S).",
    )
    supply_reports_per_s: float = setting(
        "VENN_SUPPLY_REPORTS_PER_S",
        10.0,
        "Supply reports per second the scheduler reads from all gateways together: with G "
        "live gateways each reports every max(VENN_SUPPLY_REPORT_S, G / this) seconds.",
    )
    linger_ms: int = setting(
        "VENN_GATEWAY_LINGER_MS",
        5,
        "How long the gateway gathers check-ins into one batch event, and its producer's "
        "linger (5 ms: fewer, larger messages under load; docs/notes/performance.md).",
    )
    batch_max: int = setting(
        "VENN_GATEWAY_BATCH_MAX",
        128,
        "Most check-ins in one batch event (a batch also stays under the event size limit).",
    )
    fetch_wait_ms: int = setting(
        "VENN_GATEWAY_FETCH_WAIT_MS",
        0,
        "Longest a gateway fetch of answers waits for data; 0: the broker's profile (on "
        "Tansu an idle consumer sees new records only when its parked fetch expires, so this "
        "adds up to that much latency there).",
    )
    result_window_s: float = setting(
        "VENN_GATEWAY_RESULT_WINDOW_S",
        3600.0,
        "How long after an assignment its device may still upload the round's result (a "
        "restarted gateway reads this much of venn.assignments back).",
    )
    max_enrolments_per_token: int = setting(
        "VENN_GATEWAY_MAX_ENROLMENTS_PER_TOKEN",
        100_000,
        "Most device ids one enrol token may enrol (its first enrolments; enrolling an id it "
        "holds again is free): every gateway keeps every enrolled id for good, so a leaked "
        "enrol token must not add them without bound. An admin token has no limit.",
    )
    max_remembered: int = setting(
        "VENN_GATEWAY_MAX_REMEMBERED",
        500_000,
        "Most assignments the gateway remembers for that check (the oldest are forgotten first).",
    )

    def __post_init__(self) -> None:
        if self.wait_s <= 0:
            raise ValueError("VENN_GATEWAY_WAIT_S must be > 0")
        if self.max_inflight < 1:
            raise ValueError("VENN_GATEWAY_MAX_INFLIGHT must be >= 1")
        if self.idle_timeout_s <= 0:
            raise ValueError("VENN_GATEWAY_IDLE_TIMEOUT_S must be > 0")
        if self.batch_max < 1:
            raise ValueError("VENN_GATEWAY_BATCH_MAX must be >= 1")
        if self.forward_quota <= 0:
            raise ValueError("VENN_GATEWAY_FORWARD_QUOTA must be > 0")
        if self.supply_report_s <= 0:
            raise ValueError("VENN_SUPPLY_REPORT_S must be > 0")
        if self.supply_reports_per_s <= 0:
            raise ValueError("VENN_SUPPLY_REPORTS_PER_S must be > 0")
        if self.quota_patience_s < 0:
            raise ValueError("VENN_GATEWAY_QUOTA_PATIENCE_S must be >= 0")
        if self.quota_lump < 1:
            raise ValueError("VENN_GATEWAY_QUOTA_LUMP must be >= 1")

    @property
    def pace(self) -> Pace:
        """The retry_after of each answer without an assignment (venn/core/pace.py): the
        wanted pace never above the base, the idle one never below it."""
        base = self.retry_after_s
        return Pace(
            base,
            min(self.wanted_retry_after_s, base),
            max(self.idle_retry_after_s, base),
            self.retry_jitter,
        )


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    """The scheduler (`services/scheduler`): the Faust app that decides every check-in. Its
    workers form one consumer group: one decides, the others are hot standbys
    (`services.scheduler.inputs`)."""

    policy: str = setting(
        "VENN_POLICY",
        "venn",
        "Scheduling policy: random, random-order, fifo, srsf, venn, venn-sched, venn-paper, "
        "venn-match.",
    )
    seed: int = setting("VENN_SEED", 0, "Seed of the scheduler's deterministic random draws.")
    web_port: int = setting(
        "VENN_SCHEDULER_WEB_PORT",
        0,
        "Faust web/metrics port of a scheduler worker; 0: a free port, chosen when the worker "
        "starts (every worker needs its own).",
    )
    web_host: str = setting(
        "VENN_SCHEDULER_WEB_HOST",
        "127.0.0.1",
        "Address a scheduler worker's Faust web/metrics server binds (0.0.0.0 in a container).",
    )
    task_url_base: str = setting(
        "VENN_TASK_URL_BASE",
        "http://coordinator.local",
        "Base of the task URL an assignment gives a device (the job's own server).",
    )
    checkin_max_age_s: float = setting(
        "VENN_CHECKIN_MAX_AGE_S",
        10.0,
        "A check-in older than this when the scheduler reads it is dropped, not assigned (its "
        "device was answered long ago: after a restart or an offset reset).",
    )
    job_timeout_s: float = setting(
        "VENN_JOB_TIMEOUT_S",
        600.0,
        "A job whose coordinator sends nothing (not even a heartbeat) for this long is expired "
        "by the scheduler and its demand released; 0: never.",
    )
    dedupe_window: int = setting(
        "VENN_DEDUPE_WINDOW", 100000, "Recent event ids a scheduler worker remembers for dedupe."
    )
    session_timeout_ms: int = setting(
        "VENN_SCHEDULER_SESSION_TIMEOUT_MS",
        0,
        "Consumer-group session of the scheduler workers: how long after the deciding worker "
        "died a standby takes over; 0: the broker's profile (3 s on Kafka, whose "
        "group.min.session.timeout.ms must allow it; 6 s on Tansu).",
    )
    fetch_wait_ms: int = setting(
        "VENN_SCHEDULER_FETCH_WAIT_MS",
        0,
        "Longest a scheduler fetch waits for data; 0: the broker's profile (10 ms on Tansu, "
        "where all of it is latency; 500 ms on Kafka).",
    )
    gather_ms: int = setting(
        "VENN_SCHEDULER_GATHER_MS",
        100,
        "After a scheduler fetch brought records, how long until the next one: what arrives "
        "meanwhile is read in one go. Each wake-up costs the scheduler about 2 ms of CPU (the "
        "Kafka client and Faust) whatever it reads, so this bounds its wake-ups per second "
        "when check-ins trickle in one by one (a small fleet) at the price of at most this "
        "much latency for a record that arrives just after another; the first record after "
        "a quiet spell waits for nothing. 0: fetch again at once.",
    )
    supply_max_rate: float = setting(
        "VENN_SUPPLY_MAX_RATE",
        50000.0,
        "Most check-ins per second one gateway's supply report may count (more is scaled "
        "down to it): a gateway answers no more than this, so a report that claims more is "
        "not a count of devices it saw (docs/security.md, supply reports).",
    )
    decide_together: int = setting(
        "VENN_SCHEDULER_DECIDE_TOGETHER",
        64,
        "Most check-in batches of one fetch decided as one (one decision, one AssignmentBatch "
        "per job; each batch's reply still its own). 1: each batch alone.",
    )

    commit_interval_s: float = setting(
        "VENN_SCHEDULER_COMMIT_INTERVAL_S",
        1.0,
        "How often the deciding worker commits the input offsets it settled (off the "
        "decisions' path; and when it stops). A new decider reads again what came after the "
        "last commit, except the check-ins whose decisions its tables hold.",
    )

    def __post_init__(self) -> None:
        if self.commit_interval_s <= 0:
            raise ValueError("VENN_SCHEDULER_COMMIT_INTERVAL_S must be > 0")
        if self.gather_ms < 0:
            raise ValueError("VENN_SCHEDULER_GATHER_MS must be >= 0")
        if self.decide_together < 1:
            raise ValueError("VENN_SCHEDULER_DECIDE_TOGETHER must be >= 1")
        if not self.supply_max_rate > 0:
            raise ValueError("VENN_SUPPLY_MAX_RATE must be > 0")

    def task_url(self, job_id: str, round_index: int) -> str:
        return f"{self.task_url_base.rstrip('/')}/jobs/{job_id}/rounds/{round_index}/task"


@dataclass(frozen=True, slots=True)
class AdmissionSettings:
    """Admission of submitted jobs (`venn.core.admission`): operator limits, judged by the
    scheduler as it applies a registration (every path a job takes) and early by the job
    API; how much supply must have been seen before a requirement is judged; the admission
    queue's bounds."""

    max_running_jobs: int = setting(
        "VENN_MAX_RUNNING_JOBS",
        0,
        "Most jobs admitted and not ended at once; a submission past it is refused, or queued "
        "with --queue and admitted in order as jobs end. 0: no limit.",
    )
    max_open_demand: int = setting(
        "VENN_MAX_OPEN_DEMAND",
        0,
        "Most devices per round asked by the admitted jobs together (the sum of their "
        "demands); past it as VENN_MAX_RUNNING_JOBS. 0: no limit.",
    )
    min_checkins: int = setting(
        "VENN_ADMISSION_MIN_CHECKINS",
        200,
        "Check-ins the scheduler's supply window must hold before a requirement is judged "
        "against it: with fewer (right after a start) nothing is refused for lack of supply.",
    )
    queue_check_s: float = setting(
        "VENN_ADMISSION_QUEUE_CHECK_S",
        1.0,
        "How often a gateway looks whether a queued job can be admitted.",
    )
    max_queued_jobs: int = setting(
        "VENN_MAX_QUEUED_JOBS",
        1000,
        "Most jobs waiting in the admission queue at once (every owner together); a "
        "submission with --queue past it is refused (queue_full). What a queued job costs "
        "every gateway (its spec in the job view, a look at each queue check) is so bounded.",
    )
    max_queued_per_owner: int = setting(
        "VENN_MAX_QUEUED_PER_OWNER",
        50,
        "Most jobs one owner (a token's subject) may have waiting in the admission queue; past "
        "it their submission with --queue is refused (queue_full), so that one token cannot "
        "fill the queue for everyone.",
    )

    def __post_init__(self) -> None:
        if self.max_queued_jobs < 0 or self.max_queued_per_owner < 0:
            raise ValueError("VENN_MAX_QUEUED_JOBS and VENN_MAX_QUEUED_PER_OWNER must be >= 0")

    def limits(self) -> Limits:
        """The limits `venn.core.admission` judges with."""
        return Limits(self.max_running_jobs, self.max_open_demand, self.min_checkins)


@dataclass(frozen=True, slots=True)
class TenantSettings:
    """Tenants, their shares and priority classes (`venn.core.tenants`), applied by the
    scheduler on top of its policy. A job's tenant is its token's owner; its priority class
    is its spec's ``priority``."""

    tenants: str = setting(
        "VENN_TENANTS",
        "",
        "Tenants and their weights, as name=weight[:max_open_demand] separated by commas "
        "(team-a=3,team-b=1:500). Empty: tenant-blind (the policy alone decides; job "
        "priorities are ignored). A tenant not listed has VENN_TENANT_DEFAULT_WEIGHT.",
    )
    default_weight: float = setting(
        "VENN_TENANT_DEFAULT_WEIGHT", 1.0, "Weight of a tenant VENN_TENANTS does not list."
    )
    half_life_s: float = setting(
        "VENN_TENANT_HALF_LIFE_S",
        86_400.0,
        "Half-life of a tenant's use (the contended devices assigned to its jobs) and of "
        "what it was owed of them, which its standing compares: a device assigned this "
        "long ago counts half.",
    )
    tolerance: float = setting(
        "VENN_TENANT_TOLERANCE",
        0.05,
        "How far (relative) a tenant's use of contended devices may fall under its share "
        "before its jobs go first among those a device's owner section holds, or pass it "
        "before they go last; while every tenant is within it the policy alone orders them.",
    )

    key_exponent: float = setting(
        "VENN_TENANT_KEY_EXPONENT",
        0.0,
        "0: tenants fall in bands by standing (under their share first, over it last). "
        "Above 0: no bands; each job's order key is multiplied by its tenant's standing "
        "(decayed use over what it was owed) to this power.",
    )

    rerank_every: int = setting(
        "VENN_TENANT_RERANK_EVERY",
        32,
        "While tenants contend, a job takes at most this many devices between two rankings "
        "of the tenants' standing (lower: shares follow the weights more closely, at more "
        "table compiles).",
    )

    def config(self) -> TenantConfig | None:
        """The core's tenant configuration; None when no tenant is configured."""
        if not self.tenants.strip():
            return None
        return TenantConfig(
            parse_tenants(self.tenants),
            TenantShare(self.default_weight),
            half_life_s=self.half_life_s,
            tolerance=self.tolerance,
            rerank_every=self.rerank_every,
            key_exponent=self.key_exponent,
        )


@dataclass(frozen=True, slots=True)
class CliSettings:
    """The job commands of the `venn` CLI (`venn job ...`, `venn plan`, `venn devices`)."""

    api_url: str = setting(
        "VENN_API_URL",
        "",
        "The gateway the job commands talk to (their --url); empty: the gateway of the "
        "`venn up` stack in VENN_RUN_DIR, else VENN_GATEWAY_HOST:VENN_GATEWAY_PORT.",
    )
    api_token: str = setting(
        "VENN_API_TOKEN",
        "",
        "The API token the job commands send (their --token); empty: an operator token "
        "minted with VENN_AUTH_SECRET when this process has it (beside `venn up`, from its "
        "run dir).",
        secret=True,
    )


@dataclass(frozen=True, slots=True)
class FlowerSettings:
    """The Venn Flower bridge (`python -m venn.integrations.flower.bridge`): the service beside
    a SuperLink through which its ServerApps (`venn_flower.VennStrategy`) speak to Venn.
    (The node side, `venn-flower-supernode`, reads VENN_GATEWAY_URL and VENN_ENROLL_TOKEN
    itself: it is a separate distribution, without this package.)"""

    bridge_host: str = setting(
        "VENN_FLOWER_BRIDGE_HOST",
        "127.0.0.1",
        "Address the bridge listens on (ServerApps run beside the SuperLink: loopback).",
    )
    bridge_port: int = setting(
        "VENN_FLOWER_BRIDGE_PORT",
        8089,
        "Port of the bridge (ServerApps find it at VENN_FLOWER_BRIDGE, default "
        "http://127.0.0.1:8089).",
    )
    bridge_call_timeout_s: float = setting(
        "VENN_FLOWER_BRIDGE_CALL_TIMEOUT_S",
        3.0,
        "The longest a bridge call waits for the broker before answering 503 (the ServerApp "
        "then samples its own nodes until Venn is back).",
    )
    bridge_idle_s: float = setting(
        "VENN_FLOWER_BRIDGE_IDLE_S",
        120.0,
        "A run's job the bridge heard nothing of for this long is dropped (its heartbeats "
        "stop and Venn expires it): its ServerApp is gone (a running ServerApp calls at "
        "least every 30 s).",
    )


@dataclass(frozen=True, slots=True)
class LoadtestSettings:
    """The Locust load test (`loadtest/locustfile.py`), read in every Locust process."""

    enroll_token: str = setting(
        "VENN_LOADTEST_ENROLL_TOKEN",
        "",
        "Enrol token the HTTP device users enrol their devices with (`venn token enroll`); "
        "empty: minted from VENN_AUTH_SECRET when this process has it (beside `venn up`, from "
        "its run dir), else the devices send no token (a gateway without authentication).",
        secret=True,
    )
    population: int = setting(
        "VENN_LOADTEST_POPULATION",
        5_000_000,
        "Devices the HTTP users draw their check-ins from, uniformly (each enrols on its first "
        "check-in).",
    )
    day_s: float = setting(
        "VENN_LOADTEST_DAY_S", 120.0, "Wall seconds of one compressed day of the diurnal curve."
    )
    start_hour: float = setting(
        "VENN_LOADTEST_START_HOUR", 18.0, "Hour of the compressed day the load test starts at."
    )
    peak_rate: float = setting(
        "VENN_LOADTEST_PEAK_RATE",
        4.0,
        "Check-ins per second of one HTTP device user at the diurnal peak.",
    )
    kafka_peak_rate: float = setting(
        "VENN_LOADTEST_KAFKA_PEAK_RATE",
        200.0,
        "Check-ins per second of one Kafka user at the diurnal peak.",
    )
    kafka_users: int = setting(
        "VENN_LOADTEST_KAFKA_USERS",
        1,
        "Kafka users (check-ins produced straight to venn.checkins) among the Locust users.",
    )
    kafka_eligible: bool = setting(
        "VENN_LOADTEST_KAFKA_ELIGIBLE",
        False,
        "Give the Kafka user's devices profiles a requirement tier admits. Off, they load the "
        "broker and the scheduler's decision path but take no demand from the HTTP devices "
        "(they never upload results, so they would hold every round until its deadline).",
    )


@dataclass(frozen=True, slots=True)
class KafkaPasswords:
    """Passwords `venn prepare --secure` gives each Kafka principal's SCRAM user where the
    passwords are given, not generated (docker-compose; `venn up` makes its own)."""

    admin: str = setting(
        "VENN_KAFKA_PASSWORD_ADMIN", "", "Password of the Kafka admin principal.", secret=True
    )
    scheduler: str = setting(
        "VENN_KAFKA_PASSWORD_SCHEDULER", "", "Password of the scheduler principal.", secret=True
    )
    recorder: str = setting(
        "VENN_KAFKA_PASSWORD_RECORDER", "", "Password of the recorder principal.", secret=True
    )
    gateway: str = setting(
        "VENN_KAFKA_PASSWORD_GATEWAY", "", "Password of the gateway principal.", secret=True
    )
    jobs: str = setting(
        "VENN_KAFKA_PASSWORD_JOBS",
        "",
        "Password of the jobs principal: the only one that writes venn.jobs for the job API; "
        "a gateway that has it (or the run dir's) serves submissions and cancels.",
        secret=True,
    )
    coordinator: str = setting(
        "VENN_KAFKA_PASSWORD_COORDINATOR", "", "Password of the coordinator principal.", secret=True
    )
    devices: str = setting(
        "VENN_KAFKA_PASSWORD_DEVICES", "", "Password of the devices principal.", secret=True
    )

    def of(self, principals: Iterable[str]) -> dict[str, str]:
        """Principal -> password; ValueError naming every variable that is unset or empty."""
        wanted = list(principals)
        fields = {f.name: f.metadata["env"] for f in dataclasses.fields(self)}
        unknown = [p for p in wanted if p not in fields]
        if unknown:
            raise ValueError(f"no password setting for Kafka principal(s) {unknown}")
        missing = [fields[p] for p in wanted if not getattr(self, p)]
        if missing:
            raise ValueError(f"set {', '.join(missing)} (one password per Kafka principal)")
        return {p: str(getattr(self, p)) for p in wanted}


@dataclass(frozen=True, slots=True)
class Settings:
    """Process configuration. Build it with `Settings.from_env()`.

    The top level holds what several processes share; a component's own options are a
    section (a frozen dataclass in a field marked ``{"section": cls}``), each setting
    declared once with its environment variable, default and doc (`setting`)."""

    broker: str = setting(
        "VENN_BROKER",
        "127.0.0.1:9092",
        "Kafka bootstrap servers (host:port[,host:port]); `venn up` listens here.",
    )
    broker_kind: str = setting(
        "VENN_BROKER_KIND",
        "auto",
        "kafka (Apache Kafka from its jars), tansu (in-memory, pip only), external (VENN_BROKER "
        "is a cluster you run), auto (kafka where a JDK 17+ and Maven or the cached jars are "
        "present, else tansu).",
    )
    kafka_nodes: int = setting(
        "VENN_KAFKA_NODES",
        1,
        "Apache Kafka nodes `venn up` starts locally: 1, or 3 (topics replicated 3 times, "
        "min.insync.replicas 2: one node may fail).",
    )
    broker_tuning: str = setting(
        "VENN_BROKER_TUNING",
        "",
        "Kafka client profile (venn/broker/tuning.py): empty follows the broker kind (Tansu's "
        "workarounds on tansu only); kafka or tansu forces one (benchmarks compare them).",
    )
    run_dir: str = setting(
        "VENN_RUN_DIR",
        "./run",
        "Directory for pid files, logs and the local Kafka and Postgres data.",
    )
    cache_dir: str = setting(
        "VENN_CACHE_DIR",
        "",
        "Where Apache Kafka's jars are cached (fetched once by Maven); empty: "
        "$XDG_CACHE_HOME/venn, else ~/.cache/venn.",
    )
    auth_secret: str = setting(
        "VENN_AUTH_SECRET",
        "",
        "Key that signs and checks API tokens (32+ bytes; from the environment, never the "
        "repo). Empty: no authentication (`venn up` and `venn demo` make one per run dir).",
        secret=True,
    )
    job_token: str = setting(
        "VENN_JOB_TOKEN",
        "",
        "The API token coordinators and the SDK example send with job events (`venn token "
        "job`); empty: minted from VENN_AUTH_SECRET when this process has it.",
        secret=True,
    )
    kafka_user: str = setting(
        "VENN_KAFKA_USER",
        "",
        "This process's SASL/SCRAM principal on Kafka; empty: the run dir's for its role "
        "beside `venn up`, else no SASL.",
    )
    kafka_password: str = setting(
        "VENN_KAFKA_PASSWORD", "", "The password of VENN_KAFKA_USER.", secret=True
    )
    kafka_mechanism: str = setting(
        "VENN_KAFKA_MECHANISM",
        "SCRAM-SHA-256",
        "SASL mechanism of VENN_KAFKA_USER: SCRAM-SHA-256 (every service), or PLAIN (the admin "
        "of docker-compose's Kafka).",
    )
    device_token_ttl_s: float = setting(
        "VENN_DEVICE_TOKEN_TTL_S", 30 * 86400.0, "Lifetime of a device token issued at enrolment."
    )
    database_url: str = setting(
        "VENN_DATABASE_URL",
        "",
        "SQLAlchemy URL of the audit DB (Postgres, or sqlite:///PATH); empty: `venn up` and "
        "`venn demo` start an embedded PostgreSQL in the run dir.",
    )
    topic_partitions: int = setting(
        "VENN_TOPIC_PARTITIONS", 4, "Partitions of every Venn topic (and Faust changelogs)."
    )
    app_id: str = setting(
        "VENN_APP_ID",
        "venn-scheduler",
        "The scheduler's Faust app id: its workers' consumer group, the prefix of its "
        "changelog topic names and of the group its decider commits input offsets to "
        "(<app id>-inputs); all named in the Kafka ACLs.",
    )
    speedup: float = setting(
        "VENN_SPEEDUP", 1.0, "Trace time / wall-clock time factor of the device emulator."
    )
    max_event_bytes: int = setting(
        "VENN_MAX_EVENT_BYTES", 65536, "Events larger than this go to the dead-letter topic."
    )
    recorder_group: str = setting(
        "VENN_RECORDER_GROUP", "venn-recorder", "Consumer group id of the audit recorder."
    )
    job_heartbeat_s: float = setting(
        "VENN_JOB_HEARTBEAT_S", 30.0, "How often the SDK tells Venn that a job's coordinator lives."
    )
    recorder_port: int = setting(
        "VENN_RECORDER_PORT", 0, "HTTP port of the recorder's /healthz and /metrics; 0: none."
    )
    recorder_host: str = setting("VENN_RECORDER_HOST", "127.0.0.1", "Address the recorder binds.")
    gateway: GatewaySettings = field(
        default_factory=GatewaySettings, metadata={"section": GatewaySettings}
    )
    scheduler: SchedulerSettings = field(
        default_factory=SchedulerSettings, metadata={"section": SchedulerSettings}
    )
    admission: AdmissionSettings = field(
        default_factory=AdmissionSettings, metadata={"section": AdmissionSettings}
    )
    tenants: TenantSettings = field(
        default_factory=TenantSettings, metadata={"section": TenantSettings}
    )
    cli: CliSettings = field(default_factory=CliSettings, metadata={"section": CliSettings})
    flower: FlowerSettings = field(
        default_factory=FlowerSettings, metadata={"section": FlowerSettings}
    )
    loadtest: LoadtestSettings = field(
        default_factory=LoadtestSettings, metadata={"section": LoadtestSettings}
    )
    kafka_passwords: KafkaPasswords = field(
        default_factory=KafkaPasswords, metadata={"section": KafkaPasswords}
    )

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, running: bool = True
    ) -> Settings:
        """Read every field from `environ` (default `os.environ`), falling back to what the
        stack running in the run dir recorded (its broker, database and secret; not with
        ``running=False``: a process that starts a stack of its own), then to defaults."""
        env = os.environ if environ is None else environ
        values = _read(cls, env)
        run_dir = values.get("run_dir", _DEFAULT_RUN_DIR)
        for name, value in (running_stack(run_dir) if running else {}).items():
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

    def principal_credentials(self, principal: str) -> Credentials | None:
        """Credentials of another Kafka principal this process signs in as for part of its
        work (the gateway's job API as ``jobs``): its VENN_KAFKA_PASSWORD_<PRINCIPAL>, else
        the run dir's; None where this process has no SASL or no such password."""
        if not self.kafka_user:
            return None
        given = getattr(self.kafka_passwords, principal, "")
        password = given or run_dir_kafka_users(self.run_dir).get(principal, "")
        return Credentials(principal, password, MECHANISM) if password else None

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
        return self.scheduler.fetch_wait_ms or self.tuning.fetch_wait_ms

    @property
    def scheduler_session_timeout(self) -> int:
        return self.scheduler.session_timeout_ms or self.tuning.decider_session_timeout_ms

    @property
    def gateway_fetch_wait(self) -> int:
        return self.gateway.fetch_wait_ms or self.tuning.fetch_wait_ms

    def with_gateway(self, **changes: Any) -> Settings:
        """These settings with ``changes`` to the gateway section."""
        return dataclasses.replace(self, gateway=dataclasses.replace(self.gateway, **changes))

    def with_admission(self, **changes: Any) -> Settings:
        """These settings with ``changes`` to the admission section."""
        return dataclasses.replace(self, admission=dataclasses.replace(self.admission, **changes))

    def with_scheduler(self, **changes: Any) -> Settings:
        """These settings with ``changes`` to the scheduler section."""
        return dataclasses.replace(self, scheduler=dataclasses.replace(self.scheduler, **changes))

    def as_env(self) -> dict[str, str]:
        """The settings as environment variables, to pass to child processes."""
        return {d.env: _format(d.value) for d in _walk(self)}


def _read(cls: type[Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The fields of ``cls`` (sections included) that ``env`` sets, parsed."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if "section" in f.metadata:
            found = _read(f.metadata["section"], env)
            if found:
                values[f.name] = f.metadata["section"](**found)
            continue
        raw = env.get(f.metadata["env"])
        if raw is not None:
            values[f.name] = _convert(f.name, f.metadata["env"], raw, type(f.default))
    return values


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


def stack_ports(run_dir: str | Path) -> dict[str, int]:
    """The HTTP ports of the services `venn up` started in ``run_dir`` (gateway: the API;
    scheduler and recorder: /healthz and /metrics)."""
    try:
        ports = json.loads((Path(run_dir) / STACK_FILE).read_text()).get("ports", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(k): int(v) for k, v in ports.items()} if isinstance(ports, dict) else {}


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


def run_dir_database_password(run_dir: str | Path) -> str:
    """The password of the run dir's embedded PostgreSQL (made on first use)."""
    found = _read_secrets(run_dir)
    password = found.get("database_password")
    if isinstance(password, str) and password:
        return password
    password = secrets.token_urlsafe(24)
    _write_secrets(run_dir, {**found, "database_password": password})
    return password


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


def keep_run_dir_kafka_users(run_dir: str | Path, users: Mapping[str, str]) -> None:
    """Keep ``users`` (principal -> password) as the run dir's Kafka users: a run dir beside
    a secured broker someone else made (a test session's), whose clients find their
    credentials there as beside `venn up`'s own."""
    found = _read_secrets(run_dir)
    _write_secrets(run_dir, {**found, "kafka_users": dict(users)})


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value not in _TRUE + _FALSE:
        raise ValueError(raw)
    return value in _TRUE


def _convert(name: str, env: str, raw: str, cast: Callable[[str], Any]) -> Any:
    parse = _parse_bool if cast is bool else cast
    try:
        return parse(raw)
    except ValueError as exc:
        raise ValueError(f"{env}={raw!r} is not a valid {cast.__name__} for {name}") from exc


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


@dataclass(frozen=True, slots=True)
class SettingDoc:
    section: str
    """The section's field name ("" for the top level)."""
    name: str
    env: str
    default: str
    doc: str
    secret: bool
    value: Any = None
    """The value in the Settings described (the default with `describe()`)."""

    @property
    def path(self) -> str:
        """``name``, or ``section.name``: where the setting lives in `Settings`."""
        return f"{self.section}.{self.name}" if self.section else self.name


def _walk(obj: Any, section_name: str = "") -> list[SettingDoc]:
    docs: list[SettingDoc] = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if "section" in f.metadata:
            docs += _walk(value, f.name)
            continue
        docs.append(
            SettingDoc(
                section_name,
                f.name,
                f.metadata["env"],
                _format(f.default),
                f.metadata["doc"],
                f.metadata["secret"],
                value,
            )
        )
    return docs


def env_name(section_name: str, name: str) -> str:
    """The environment variable of a setting (``env_name("flower", "bridge_port")``), for
    a process that passes it to a child it starts."""
    cls = Settings.__dataclass_fields__[section_name].metadata["section"]
    return str(cls.__dataclass_fields__[name].metadata["env"])


def describe(settings: Settings | None = None) -> list[SettingDoc]:
    """Every setting, sections included, with its env var, default, doc and its value in
    ``settings`` (default: the defaults); for docs/configuration.md and `venn config`."""
    return _walk(settings or Settings())


SECTION_TITLES = {
    "": "General",
    "gateway": "Gateway",
    "scheduler": "Scheduler",
    "cli": "Command line",
    "flower": "Flower integration",
    "loadtest": "Load test",
    "kafka_passwords": "Kafka principals' passwords",
}


def sections() -> list[tuple[str, str, str, list[SettingDoc]]]:
    """(field name, title, summary, settings) per section, the top level first."""
    docs = describe()
    names = ["", *(f.name for f in dataclasses.fields(Settings) if "section" in f.metadata)]
    out = []
    for name in names:
        cls = Settings.__dataclass_fields__[name].metadata["section"] if name else None
        summary = " ".join((cls.__doc__ or "").split()) if cls else ""
        title = SECTION_TITLES.get(name, name)
        out.append((name, title, summary, [d for d in docs if d.section == name]))
    return out


def markdown_table(docs: list[SettingDoc] | None = None) -> str:
    rows = ["| Variable | Default | Meaning |", "|---|---|---|"]
    rows += [
        f"| `{d.env}` | {f'`{d.default}`' if d.default else '(empty)'} | {d.doc} |"
        for d in (docs or describe())
    ]
    return "\n".join(rows)


CONFIGURATION_PAGE = "docs/configuration.md"


def configuration_markdown() -> str:
    """docs/configuration.md, generated from the settings object (`venn config --markdown`)."""
    lines = [
        "# Configuration",
        "",
        "<!-- Generated from venn/settings.py by `venn config --markdown > "
        "docs/configuration.md`; tests/pure/test_settings.py keeps it in step. -->",
        "",
        "Every Venn process (the services, the CLI, the SDK example, the load test) reads its "
        "configuration from one settings object, `venn.settings.Settings`, built from these "
        "environment variables: `venn up`, `venn demo` and docker-compose pass the same names "
        "to the services they start. A client started with the same `VENN_RUN_DIR` as "
        "`venn up` takes the stack's broker, database and auth secret from the run dir for "
        "what the environment leaves unset. `venn config` prints the values this process "
        "would use (secrets masked).",
        "",
        "A component's own options are a section of the object (`settings.gateway.wait_s` is "
        "`VENN_GATEWAY_WAIT_S`); to add a setting see "
        "[contributing.md](contributing.md#add-a-setting).",
    ]
    for name, title, summary, docs in sections():
        lines += ["", f"## {title}", ""]
        if name:
            lines += [f"`settings.{name}`: {summary}", ""]
        lines.append(markdown_table(docs))
    return "\n".join(lines) + "\n"


_DEFAULT_RUN_DIR = next(f.default for f in dataclasses.fields(Settings) if f.name == "run_dir")
