"""`venn demo` as a function: a private embedded stack, a device fleet and coordinators.

The scheduler and the recorder run as child processes (as under `venn up`); the fleet and
the coordinators run in this process on one TraceClock, so JCTs come out in trace seconds.
`run_demo` is also the policy-fidelity harness: the same jobs (`DemoResult.jobs`) and trace
can be fed to the simulator.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from devtools.brokers import resolve_kind
from devtools.postgres import server_version
from devtools.stack.capture import read_topics
from devtools.stack.local import Stack
from devtools.stack.processes import (
    worker_metric,
)
from services.coordinator import JobProgress, compress_arrivals, run_coordinator
from services.devices import FleetStats, run_devices, synthetic_source
from venn.audit.db import make_engine
from venn.audit.models import JobAudit, RoundAudit
from venn.broker import security
from venn.core.model import JobSpec
from venn.events import Event
from venn.sdk.clock import TraceClock
from venn.settings import Settings
from venn.workloads import load_workload, resolve_workload


@dataclass(frozen=True)
class DemoConfig:
    """Everything that shapes a demo run. Defaults: about a minute and a half of wall time."""

    workload: str = "demo"
    policy: str = "venn"
    jobs: int = 6
    seed: int | None = None  # workload sampling seed (None: the YAML's RANDOMSEED)
    speedup: float = 12.0
    # 1 check-in per trace second and jobs arriving within a minute of each other: the
    # jobs' overlapping requirements really compete (see docs/notes/benchmarks.md, fidelity).
    rate_per_s: float = 1.0  # synthetic check-ins per trace second
    num_devices: int | None = None
    trace_seed: int = 0
    arrival_scale: float = 0.01  # the paper's 1800 s mean gap -> 18 s
    first_arrival_s: float = 30.0  # trace seconds of device check-ins before the first job
    database_url: str = ""  # empty: an embedded PostgreSQL in the run dir
    broker_kind: str = "auto"  # kafka | tansu | auto | external (see devtools.brokers)
    broker: str = ""  # external: the bootstrap of a broker someone else runs
    broker_tuning: str = ""  # external: its client profile, kafka or tansu (empty: kafka)
    kafka_users: Mapping[str, str] | None = None  # external and secured: its principals
    run_dir: str | None = None  # None: a temporary directory, removed afterwards
    timeout_s: float = 600.0  # wall seconds before unfinished jobs are cancelled
    partitions: int = 4
    capture_topics: tuple[str, ...] = ()  # read back into DemoResult.events before teardown
    workers: int = 1  # scheduler workers: one decides, the others are hot standbys


@dataclass
class DemoResult:
    policy: str
    speedup: float
    jobs: list[JobSpec]
    jct_s: dict[str, float | None]
    rounds_closed: int
    rounds_failed: int
    assignments: int
    wall_s: float
    startup_s: float
    audit_rounds: int
    audit_jobs_finished: int
    fleet: dict[str, Any] = field(default_factory=dict)
    extra_assignments: int = 0
    attempts: dict[str, int] = field(default_factory=dict)
    events: dict[str, list[Event]] = field(default_factory=dict)
    database_url: str = ""
    broker: str = ""  # "Apache Kafka 4.1.1 on 127.0.0.1:PORT"
    database: str = ""  # "PostgreSQL 18.6", or the URL given
    workers: dict[str, int] = field(default_factory=dict)
    """Scheduler worker -> check-ins it decided (read from its /metrics at the end; -1
    if it was no longer running)."""

    @property
    def jobs_total(self) -> int:
        return len(self.jobs)

    @property
    def jobs_finished(self) -> int:
        return sum(v is not None for v in self.jct_s.values())

    @property
    def avg_jct_s(self) -> float | None:
        done = [v for v in self.jct_s.values() if v is not None]
        return sum(done) / len(done) if done else None

    def summary(self) -> dict[str, Any]:
        """The `--json` object."""
        return {
            "policy": self.policy,
            "jobs_total": self.jobs_total,
            "jobs_finished": self.jobs_finished,
            "avg_jct_s": self.avg_jct_s,
            "rounds_closed": self.rounds_closed,
            "rounds_failed": self.rounds_failed,
            "assignments": self.assignments,
            "speedup": self.speedup,
            "wall_s": round(self.wall_s, 1),
            "startup_s": round(self.startup_s, 1),
            "audit_rounds": self.audit_rounds,
            "jct_s": self.jct_s,
            "fleet": self.fleet,
            "broker": self.broker,
            "database": self.database,
            "workers": self.workers,
        }


@dataclass
class DemoHandles:
    """Live objects a progress display may read while the demo runs."""

    progress: dict[str, JobProgress] = field(default_factory=dict)
    fleet: FleetStats | None = None
    clock: TraceClock | None = None
    phase: str = "starting"
    settings: Settings | None = None  # the stack's, once it runs
    run_dir: Path | None = None
    worker_ports: dict[str, int] = field(default_factory=dict)  # worker -> its web port
    before_teardown: Callable[[Settings], Awaitable[None]] | None = None
    """Awaited once the jobs are done and recorded, while the stack still runs (a test's
    look at the broker's offsets)."""


def _audit_counts(url: str) -> tuple[int, int]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rounds = conn.execute(select(func.count()).select_from(RoundAudit)).scalar_one()
            finished = conn.execute(
                select(func.count()).select_from(JobAudit).where(JobAudit.finished_at.is_not(None))
            ).scalar_one()
    finally:
        engine.dispose()
    return int(rounds), int(finished)


async def _wait_recorded(url: str, rounds: int, finished: int, timeout: float) -> tuple[int, int]:
    deadline = time.monotonic() + timeout
    counts = (0, 0)
    while time.monotonic() < deadline:
        counts = await asyncio.to_thread(_audit_counts, url)
        if counts[0] >= rounds and counts[1] >= finished:
            break
        await asyncio.sleep(0.3)
    return counts


def _checkins_decided(port: int) -> int:
    """venn_scheduler_checkins_total of the worker on ``port``; -1 if it does not answer."""
    decided = worker_metric(port, "venn_scheduler_checkins_total")
    return -1 if decided is None else int(decided)


def demo_stack(config: DemoConfig, run: Path) -> Stack:
    """The stack a demo runs on: a scheduler (``config.workers`` workers) and a recorder, no
    gateway (the fleet talks to Kafka), attached, secured as `venn up` is; on a broker of
    its own, or beside others on the one given (then with its own app id and group)."""
    kind = resolve_kind(config.broker_kind)
    if kind == "external" and not config.broker:
        raise ValueError("a demo on an external broker needs its address (DemoConfig.broker)")
    base = Settings.from_env({})
    settings = dataclasses.replace(
        base,
        broker=config.broker or base.broker,
        broker_kind=kind,
        broker_tuning=config.broker_tuning,
        run_dir=str(run),
        database_url=config.database_url,
        topic_partitions=config.partitions,
        speedup=config.speedup,
    )
    return Stack(
        settings,
        workers=config.workers,
        policy=config.policy,
        seed=config.trace_seed,
        gateway=False,
        unique=kind == "external",
        kafka_users=config.kafka_users,
    )


async def run_demo(
    config: DemoConfig = DemoConfig(),
    handles: DemoHandles | None = None,
    on_progress: Callable[[JobProgress], None] | None = None,
) -> DemoResult:
    """Run a workload through a private stack (or a stack of its own on the broker given);
    tear it all down afterwards."""
    handles = handles or DemoHandles()
    started = time.monotonic()
    workload = load_workload(resolve_workload(config.workload), config.jobs, config.seed)
    jobs = compress_arrivals(workload.jobs, config.arrival_scale, config.first_arrival_s)
    own_dir = config.run_dir is None
    run = Path(config.run_dir or tempfile.mkdtemp(prefix="venn-demo-")).resolve()
    run.mkdir(parents=True, exist_ok=True)
    stack = demo_stack(config, run)
    try:
        handles.phase = f"starting {stack.settings.broker_kind}"
        info = await asyncio.to_thread(stack.up)
        settings = stack.settings
        db_url = settings.database_url
        database_description = (
            "given by URL" if config.database_url else f"PostgreSQL {server_version()} (embedded)"
        )
        handles.settings, handles.run_dir = settings, run
        handles.worker_ports.update(stack.worker_ports)
        startup_s = time.monotonic() - started

        clock = TraceClock(speedup=config.speedup)
        fleet = FleetStats()
        handles.fleet, handles.clock, handles.phase = fleet, clock, "running"

        def progress(p: JobProgress) -> None:
            handles.progress[p.job_id] = p
            if on_progress is not None:
                on_progress(p)

        source = synthetic_source(config.rate_per_s, config.num_devices, config.trace_seed)
        stop_fleet, stop_jobs = asyncio.Event(), asyncio.Event()
        fleet_task = asyncio.create_task(
            run_devices(
                settings.for_role("devices"),
                source,
                config.speedup,
                stop_fleet,
                clock=clock,
                stats=fleet,
            )
        )
        loop = asyncio.get_running_loop()
        timer = loop.call_later(config.timeout_s, stop_jobs.set)
        try:
            outcomes = await run_coordinator(
                settings.for_role("coordinator"),
                jobs,
                config.speedup,
                stop_jobs,
                progress,
                clock=clock,
            )
        finally:
            timer.cancel()
            stop_fleet.set()
            await fleet_task
        wall_s = time.monotonic() - started - startup_s
        handles.phase = "recording"
        closed = sum(o.attempts for o in outcomes.values())
        finished = sum(o.finished for o in outcomes.values())
        audit_rounds, audit_finished = await _wait_recorded(db_url, closed, finished, 20.0)
        if handles.before_teardown is not None:
            await handles.before_teardown(settings)
        workers = {
            name: await asyncio.to_thread(_checkins_decided, port)
            for name, port in handles.worker_ports.items()
        }
        admin = settings.for_role(security.ADMIN)
        captured = await read_topics(
            settings.broker, config.capture_topics, options=admin.kafka_options
        )
        return DemoResult(
            policy=config.policy,
            speedup=config.speedup,
            jobs=jobs,
            jct_s={j.job_id: outcomes[j.job_id].jct_s for j in jobs},
            rounds_closed=closed,
            rounds_failed=sum(c.outcome == "failed" for o in outcomes.values() for c in o.closed),
            assignments=sum(c.assigned for o in outcomes.values() for c in o.closed),
            wall_s=wall_s,
            startup_s=startup_s,
            audit_rounds=audit_rounds,
            audit_jobs_finished=audit_finished,
            fleet=dataclasses.asdict(fleet),
            extra_assignments=sum(o.extra_assignments for o in outcomes.values()),
            attempts={job_id: o.attempts for job_id, o in outcomes.items()},
            events=captured,
            database_url=db_url,
            broker=info.broker_description,
            database=database_description,
            workers=workers,
        )
    finally:
        handles.phase = "stopping"
        await asyncio.to_thread(stack.down)
        if own_dir:
            with contextlib.suppress(OSError):
                shutil.rmtree(run)
