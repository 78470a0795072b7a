"""The scheduler's cost against the fleet's size: jobs and demand fixed, the emulated fleet
grown from 10 thousand to 10 million devices (goal: the scheduler's CPU per second within
1.5x from the smallest to the largest; only the gateways grow with the fleet).

One real scheduler worker (a `devtools.stack.Stack` of its own) on an embedded
Apache Kafka broker; its CPU is read from /proc/<pid>/stat over each window. The fleet is
emulated at the gateways, since 10 million devices' HTTP cannot run on one machine:
G = ceil(R / --per-gateway) emulated gateways for a check-in rate R = devices x share /
retry_after (the check-in model of docs/notes/scaling.md: 10 million devices -> 100,000
check-ins/s), each a real `services.gateway.app.Gateway` without its HTTP server: its
DemandView folded from the real topics (one fold shared by all, as each real gateway folds
the same records), its ForwardQuota, SupplyCounter and CheckinBatcher, producing real
CheckinBatch and SupplyReport messages. A check-in its quota forwards goes through the
real `Gateway.checkin` (produced in a batch, answered by the scheduler's assignment or
CheckinsDeclined); the others are what the real gateway does for them: counted
(`SupplyCounter.add`, one call per check-in) and answered at once, with the quota's verdict
taken once per run of identical check-ins at one instant (nothing changes between them).
The HTTP part of a gateway's cost is not here: docs/results/pipeline.md measures it.

Jobs: 20 (four requirement groups of five), demand 10 each, a coordinator emulation that
closes each job's round and opens the next every --round-s seconds (staggered), so demand
(assignments per second) is the same at every fleet size. With --baseline, today's design
before the forward quota (every check-in forwarded: VENN_GATEWAY_FAST_NO=0) runs at the
two smallest sizes for contrast.

Writes docs/results/bench/fleet.json and the table of docs/results/fleet.md (between its
markers).

    python -m bench.fleet_bench [--window 20] [--warmup 8] [--baseline] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import platform
import random
import resource
import tempfile
import time
import timeit
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from bench.common import git_commit, preamble, write_block
from devtools.brokers import local_broker
from devtools.procs import proc_cpu_s
from devtools.stack.local import Stack
from devtools.stack.processes import settled_decider, worker_metric
from services.gateway.app import Gateway
from services.gateway.batcher import CheckinBatcher
from services.gateway.demand import DemandView
from services.gateway.forwarding import ForwardQuota, SupplyCounter, Verdict
from services.gateway.models import CheckinRequest
from venn import events as ev
from venn.broker import topics
from venn.broker.prepare import prepare_topics
from venn.core.model import Requirement
from venn.core.status import SchedulerStatus, decode_status
from venn.settings import Settings

ROOT = Path(__file__).resolve().parents[1]

JSON_OUT = ROOT / "docs" / "results" / "bench" / "fleet.json"
DOC = ROOT / "docs" / "results" / "fleet.md"
GOAL_RATIO = 1.5
PARTITIONS = 4
FLEETS = (10_000, 100_000, 1_000_000, 10_000_000)
SHARE = 0.3
"""Share of the fleet allowed to check in at the diurnal peak (docs/notes/scaling.md)."""
RETRY_AFTER_S = 30.0
TICK_S = 0.01
PROFILES: tuple[dict[str, float], ...] = tuple(
    {"cpu_f": float(c), "mem": float(m)} for c in (1, 2, 3, 4) for m in (1, 2, 4, 8)
)
"""The fleet's attribute sets, drawn uniformly."""
GROUPS: tuple[dict[str, float], ...] = (
    {"cpu_f": 2.0},
    {"mem": 4.0},
    {"cpu_f": 3.0, "mem": 2.0},
    {"cpu_f": 4.0},
)
JOBS_PER_GROUP = 5
DEMAND = 10
OURS = "quota + supply reports"
BASELINE = "every check-in forwarded"
UNSHARED = "each gateway the whole quota (before)"
UNGATHERED = "scheduler reads each record at once (before)"
ALONE = "each batch decided alone, quota one apiece, 50 ms gathering (before)"
WORKER_ENV = {
    UNGATHERED: {"VENN_SCHEDULER_GATHER_MS": "0"},
    ALONE: {"VENN_SCHEDULER_GATHER_MS": "50", "VENN_SCHEDULER_DECIDE_TOGETHER": "1"},
}
"""The scheduler worker's settings of a design (restarted for it), above the defaults."""
BATCHES_PER_DECISION = "venn_scheduler_batches_per_decision"


# -- pure helpers (tests/pure/test_fleet_bench.py) ------------------------------------------


def checkin_rate(devices: int, share: float = SHARE, retry_after_s: float = RETRY_AFTER_S) -> float:
    """Peak check-ins per second of a fleet: R = N x f / r."""
    return devices * share / retry_after_s


def gateways_for(rate: float, per_gateway: float) -> int:
    """Gateway processes for a check-in rate, at ``per_gateway`` check-ins/s each."""
    if per_gateway <= 0:
        raise ValueError("per_gateway must be > 0")
    return max(1, math.ceil(rate / per_gateway))


def spread(total: int, cells: int, rng: random.Random) -> list[int]:
    """``total`` check-ins drawn uniformly into ``cells`` (gateway x attribute set)."""
    counts = [0] * cells
    for _ in range(total if total < 4 * cells else 0):
        counts[rng.randrange(cells)] += 1
    if total >= 4 * cells:  # many: even split, the remainder at random
        base, extra = divmod(total, cells)
        counts = [base] * cells
        for i in rng.sample(range(cells), extra):
            counts[i] += 1
    return counts


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares a, b of y = a + b x (b = 0 when every x is the same)."""
    n = len(xs)
    if n == 0 or n != len(ys):
        raise ValueError("need as many ys as xs, at least one")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = 0.0 if sxx == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return my - b * mx, b


def ratio(values: Sequence[float]) -> float:
    """Largest over smallest (inf when the smallest is 0)."""
    low = min(values)
    return math.inf if low <= 0 else max(values) / low


# -- the emulation ---------------------------------------------------------------------------


def scheduler_cpu_s(pid: int) -> float:
    return proc_cpu_s(Path(f"/proc/{pid}/stat").read_text(), os.sysconf("SC_CLK_TCK"))


def own_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@dataclass
class Fleet:
    """The emulated gateways of one fleet size, fed by one tick loop."""

    gateways: list[Gateway]
    rate: float
    rng: random.Random
    checkins: int = 0
    forwarded: int = 0
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    devices: int = 0

    def request(self, attrs: dict[str, float]) -> CheckinRequest:
        return CheckinRequest(
            device_id=f"d{self.rng.randrange(self.devices)}",
            attrs=attrs,
            speed_ms_per_sample=60.0,
            bandwidth_kbps=12000.0,
        )

    def _forward(self, gw: Gateway, attrs: dict[str, float]) -> None:
        deadline = asyncio.get_running_loop().time() + gw.config.wait_s
        task = asyncio.ensure_future(gw.checkin(self.request(attrs), deadline))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        self.forwarded += 1

    async def offer(self, n: int) -> None:
        """``n`` check-ins at this instant, spread over the gateways and attribute sets."""
        cells = spread(n, len(self.gateways) * len(PROFILES), self.rng)
        for cell, k in enumerate(cells):
            if not k:
                continue
            gw = self.gateways[cell // len(PROFILES)]
            attrs = PROFILES[cell % len(PROFILES)]
            self.checkins += k
            if not gw.config.fast_no:  # today's design: every check-in forwarded
                for _ in range(k):
                    self._forward(gw, attrs)
                continue
            while k:
                now = asyncio.get_running_loop().time()
                verdict, _ = gw.quota.verdict(attrs, gw.view.open_demand(), now)
                if verdict is not Verdict.FORWARD:
                    break
                self._forward(gw, attrs)  # Gateway.checkin counts, charges and produces it
                await asyncio.sleep(0)  # ... once its task runs to its first await
                k -= 1
            else:
                continue
            # What Gateway.checkin does for the rest: count, answer at once.
            gw.stats.checkins += k
            if verdict is Verdict.NO_OPEN_ROUND:
                gw.stats.fast_no += k
            else:
                gw.stats.enough_in_flight += k
            for _ in range(k):
                gw.supply.add(attrs)

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        owed = 0.0
        while not stop.is_set():
            await asyncio.sleep(TICK_S)
            now = loop.time()
            owed += self.rate * (now - last)
            last = now
            n = int(owed)
            owed -= n
            if n:
                await self.offer(n)


class Emulation:
    """Shared Kafka clients and demand view of the emulated gateways."""

    def __init__(self, settings: Settings, partitions: int) -> None:
        self.settings = settings
        self.partitions = partitions
        self.view = DemandView()
        self.gateways: list[Gateway] = []
        self.producer = AIOKafkaProducer(
            bootstrap_servers=settings.broker, acks=settings.tuning.acks, linger_ms=0
        )
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.broker, group_id=None, enable_auto_commit=False
        )
        self.task: asyncio.Task[None] | None = None
        self.reports: list[asyncio.Task[None]] = []
        self.last_status: SchedulerStatus | None = None

    async def start(self) -> None:
        await self.producer.start()
        await self.consumer.start()
        follow = [
            TopicPartition(t, p)
            for t in (topics.JOBS, topics.ROUNDS)
            for p in range(self.partitions)
        ]
        answers = [
            TopicPartition(t, p)
            for t in (topics.ASSIGNMENTS, topics.REPLIES)
            for p in range(self.partitions)
        ]
        status = [TopicPartition(topics.STATUS, p) for p in range(self.partitions)]
        self.consumer.assign([*follow, *answers, *status])
        await self.consumer.seek_to_beginning(*follow)
        await self.consumer.seek_to_end(*answers, *status)
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        allowed = {t: ev.ALLOWED_ON[t] for t in ev.ALLOWED_ON}
        while True:
            batches = await self.consumer.getmany(timeout_ms=200, max_records=5000)
            for tp, records in batches.items():
                if tp.topic == topics.STATUS:
                    self._status(records[-1].value)
                    continue
                for record in records:
                    try:
                        event = ev.decode(record.value, allowed[tp.topic])
                    except Exception:
                        continue
                    self._apply(event)

    def _status(self, raw: bytes | None) -> None:
        """The scheduler's snapshot, to each gateway as its StatusFeed would hand it."""
        try:
            status = decode_status(raw)
        except ev.InvalidEvent:
            return
        self.last_status = status
        for gw in self.gateways:
            if gw.status.on_update is not None:
                gw.status.on_update(status)

    def _apply(self, event: ev.Event) -> None:
        if isinstance(event, ev.CheckinsDeclined):
            for gw in self.gateways:
                if gw.id == event.reply_to:
                    gw.on_declined(event)
            return
        for a in ev.assignments_of(event):
            cid = a.event_id[4:].split(":", 1)[0]
            for gw in self.gateways:
                if cid in gw.pending:
                    gw.on_assignment(a)
        self.view.apply(event)

    def open(self, count: int, fast_no: bool, shared: bool, lump: int | None = None) -> None:
        """``count`` emulated gateways (the previous ones retired: they stop reporting).
        ``shared``: they share the quota and the report rate by the live gateway count of
        the scheduler's status, as real gateways do; else each holds the whole quota and
        reports every VENN_SUPPLY_REPORT_S (the design before). ``lump``: instead of
        VENN_GATEWAY_QUOTA_LUMP."""
        self.retire()
        gateway = dataclasses.replace(self.settings.gateway, fast_no=fast_no)
        if lump is not None:
            gateway = dataclasses.replace(gateway, quota_lump=lump)
        settings = dataclasses.replace(self.settings, gateway=gateway)
        for i in range(count):
            gw = Gateway(settings)
            if not shared:
                gw.status.on_update = None
            elif self.last_status is not None:
                gw.on_status(self.last_status)
            gw.view = self.view
            gw.view_ready = True
            gw.broker.grace_s = math.inf  # the shared clients carry on; no probe per gateway
            gw.producer = self.producer
            gw.batcher = CheckinBatcher(
                self.producer,
                self.partitions,
                gw.id,
                gw.config.linger_ms / 1000,
                gw.config.batch_max,
                settings.max_event_bytes,
            )
            gw.supply.since = time.time()
            self.gateways.append(gw)
            self.reports.append(asyncio.create_task(self._report(gw, i / count)))

    async def _report(self, gw: Gateway, phase: float) -> None:
        await asyncio.sleep(phase * gw.config.supply_report_s)
        gw.supply.since = time.time()
        await gw.report_supply()

    def retire(self) -> None:
        for task in self.reports:
            task.cancel()
        self.reports.clear()
        for gw in self.gateways:
            if gw.batcher is not None:
                gw.batcher.flush()
        self.gateways = []

    async def stop(self) -> None:
        self.retire()
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.consumer.stop()
        await self.producer.stop()


class Coordinator:
    """The jobs' coordinators: every job's round closes and the next opens every
    ``round_s`` seconds (staggered), so demand does not depend on the fleet."""

    def __init__(self, producer: AIOKafkaProducer, view: DemandView, round_s: float) -> None:
        self.producer = producer
        self.view = view
        self.round_s = round_s
        self.jobs = [
            (f"fleet-{g}-{j}", requirement)
            for g, requirement in enumerate(GROUPS)
            for j in range(JOBS_PER_GROUP)
        ]
        self.tasks: list[asyncio.Task[None]] = []
        self.rounds = 0
        self.assigned = 0

    async def _send(self, topic: str, event: ev.Event) -> None:
        await self.producer.send_and_wait(topic, ev.encode(event), key=ev.key_of(event))

    async def start(self) -> None:
        now = time.time()
        for job_id, requirement in self.jobs:
            await self._send(
                topics.JOBS,
                ev.JobRegistered(
                    event_id=f"reg-{job_id}", time=now, job_id=job_id, requirement=requirement,
                    demand=DEMAND, rounds=100_000, deadline_s=86_400, workload_s=5,
                ),
            )  # fmt: skip
        for i, (job_id, _) in enumerate(self.jobs):
            phase = self.round_s * i / len(self.jobs)
            self.tasks.append(asyncio.create_task(self._rounds(job_id, phase)))

    async def _rounds(self, job_id: str, phase: float) -> None:
        await asyncio.sleep(phase)
        index = 0
        while True:
            opened = time.time()
            await self._send(
                topics.JOBS,
                ev.RoundRequested(
                    event_id=f"rr-{job_id}-{index}", time=opened, job_id=job_id,
                    round_index=index, demand=DEMAND,
                ),
            )  # fmt: skip
            await asyncio.sleep(self.round_s)
            life = self.view.book.get(job_id)
            assigned = min(self.view.assigned(life), DEMAND)
            self.assigned += assigned
            self.rounds += 1
            now = time.time()
            await self._send(
                topics.ROUNDS,
                ev.RoundClosed(
                    event_id=f"rc-{job_id}-{index}", time=now, job_id=job_id,
                    round_index=index, outcome="succeeded", demand=DEMAND, assigned=assigned,
                    results=assigned, opened_at=opened, closed_at=now, reason="",
                    sched_delay_s=0.0, response_time_s=0.0,
                ),
            )  # fmt: skip
            await self._send(
                topics.JOBS, ev.JobHeartbeat(event_id=f"hb-{job_id}-{index}", time=now,
                                             job_id=job_id),
            )  # fmt: skip
            index += 1

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def broker_records(admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer) -> int:
    """Records in every topic of the broker (end offsets summed): messages produced."""
    names = [t for t in await admin.list_topics() if not t.startswith("__")]
    parts = [
        TopicPartition(d["topic"], p["partition"])
        for d in await admin.describe_topics(names)
        for p in d["partitions"]
    ]
    ends = await consumer.end_offsets(parts)
    return sum(ends.values())


def gateway_decision_us() -> dict[str, float]:
    """CPU of the gateway's decision for a check-in answered at once, per check-in: the
    real SupplyCounter.add and ForwardQuota.verdict against this bench's open demand."""
    counter = SupplyCounter("gw-timing", time.time())
    quota = ForwardQuota(2.0)
    quota.gateways = 50
    full = {Requirement.of(g): 5 for g in GROUPS}
    attrs = PROFILES[5]
    n = 200_000
    add = min(timeit.repeat(lambda: counter.add(attrs), number=n, repeat=3)) / n
    verdict = min(timeit.repeat(lambda: quota.verdict(attrs, full, 0.0), number=n, repeat=3)) / n
    return {"supply_add_us": round(add * 1e6, 2), "verdict_us": round(verdict * 1e6, 2)}


async def measure_size(
    emu: Emulation,
    worker: Worker,
    admin: AIOKafkaAdminClient,
    meter: AIOKafkaConsumer,
    coordinator: Coordinator,
    devices: int,
    per_gateway: float,
    design: str,
    warmup_s: float,
    window_s: float,
    idle_cpu_per_s: float,
) -> dict[str, Any]:
    rate = checkin_rate(devices)
    count = gateways_for(rate, per_gateway)
    emu.open(
        count,
        design != BASELINE,
        shared=design in (OURS, UNGATHERED, ALONE),
        lump=1 if design == ALONE else None,
    )
    fleet = Fleet(emu.gateways, rate, random.Random(devices), devices=devices)
    stop = asyncio.Event()
    feeder = asyncio.create_task(fleet.run(stop))
    try:
        await asyncio.sleep(warmup_s)
        decisions0 = await asyncio.to_thread(worker.decisions)
        sched0, own0, wall0 = scheduler_cpu_s(worker.pid), own_cpu_s(), time.monotonic()
        checkins0, fwd0 = fleet.checkins, fleet.forwarded
        assigned0 = sum(g.stats.assigned for g in emu.gateways)
        msgs0, msgs_t0 = await broker_records(admin, meter), time.monotonic()
        await asyncio.sleep(window_s)
        sched1, own1, wall1 = scheduler_cpu_s(worker.pid), own_cpu_s(), time.monotonic()
        decisions1 = await asyncio.to_thread(worker.decisions)
        checkins1, fwd1 = fleet.checkins, fleet.forwarded
        assigned1 = sum(g.stats.assigned for g in emu.gateways)
        msgs1, msgs_t1 = await broker_records(admin, meter), time.monotonic()
    finally:
        stop.set()
        await feeder
    seconds = wall1 - wall0
    checkins = checkins1 - checkins0
    result = {
        "devices": devices,
        "design": design,
        "gateways": count,
        "offered_per_s": round(rate, 1),
        "checkins_per_s": round(checkins / seconds, 1),
        "forwarded_per_s": round((fwd1 - fwd0) / seconds, 1),
        "assigned_per_s": round((assigned1 - assigned0) / seconds, 2),
        "scheduler_cpu_per_s": round((sched1 - sched0) / seconds, 4),
        "gateway_cpu_us_per_checkin": round(
            max(own1 - own0 - idle_cpu_per_s * seconds, 0.0) / max(checkins, 1) * 1e6, 2
        ),
        "emulator_cpu_per_s": round((own1 - own0) / seconds, 3),
        "broker_msgs_per_s": round((msgs1 - msgs0) / (msgs_t1 - msgs_t0), 1),
        "decisions_per_s": round((decisions1[0] - decisions0[0]) / seconds, 1),
        "batches_per_decision": round(
            (decisions1[1] - decisions0[1]) / max(decisions1[0] - decisions0[0], 1), 2
        ),
        "window_s": round(seconds, 1),
        "gateways_counted": emu.last_status.gateways if emu.last_status is not None else None,
    }
    print(result, flush=True)
    return result


@dataclass
class Worker:
    """The scheduler's one worker: its stack (`devtools.stack.Stack`, no gateway, no
    recorder), its process and its web port (/metrics)."""

    stack: Stack
    process: Any
    port: int

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    def decisions(self) -> tuple[float, float]:
        """(check-in decisions, check-in batches they decided) so far."""
        return (
            worker_metric(self.port, BATCHES_PER_DECISION + "_count") or 0.0,
            worker_metric(self.port, BATCHES_PER_DECISION + "_sum") or 0.0,
        )


async def start_deciding(settings: Settings, env: dict[str, str]) -> Worker:
    """The scheduler's worker with ``env`` on top of ``settings`` (the same app id each
    time: it resumes from what the last one committed), once it decides."""
    stack = Stack(settings, recorder=False, gateway=False, secure=False, extra_env=env)
    await asyncio.to_thread(stack.up)
    port = stack.worker_ports["scheduler"]
    deadline = time.monotonic() + 120
    while await asyncio.to_thread(settled_decider, {"w": port}) is None:
        if time.monotonic() > deadline:
            raise RuntimeError("the scheduler worker did not start deciding in 120 s")
        await asyncio.sleep(0.5)
    return Worker(stack, stack.processes["scheduler"], port)


async def measure(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    broker = local_broker("kafka", run_dir / "broker").start()
    app_id = f"venn-fleet-{os.urandom(4).hex()}"
    settings = Settings(
        broker=broker.bootstrap,
        broker_kind="external",
        broker_tuning="kafka",
        run_dir=str(run_dir / "run"),
        app_id=app_id,
        topic_partitions=PARTITIONS,
    )
    worker: Worker | None = None
    try:
        counts = await prepare_topics(settings)
        worker = await start_deciding(settings, {})
        worker_env: dict[str, str] = {}
        emu = Emulation(settings, counts[topics.CHECKINS])
        await emu.start()
        meter = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
        await meter.start()
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        coordinator = Coordinator(emu.producer, emu.view, args.round_s)
        await coordinator.start()
        rows = []
        try:
            await asyncio.sleep(3)
            # The emulating process's own cost with no fleet (its consumer, the
            # coordinators, the meter): taken off the gateways' CPU per check-in.
            own0, sched0, wall0 = own_cpu_s(), scheduler_cpu_s(worker.pid), time.monotonic()
            await asyncio.sleep(args.warmup)
            idle_s = time.monotonic() - wall0
            idle = (own_cpu_s() - own0) / idle_s
            sched_idle = (scheduler_cpu_s(worker.pid) - sched0) / idle_s
            plan = [(d, OURS) for d in args.fleets]
            if args.baseline:
                plan += [(d, BASELINE) for d in args.fleets[:2]]
            if args.unshared:
                plan += [(d, UNSHARED) for d in args.fleets[-2:]]
            if args.ungathered:
                plan += [(d, UNGATHERED) for d in args.fleets]
            if args.alone:
                plan += [(d, ALONE) for d in args.fleets]
            for devices, design in plan:
                if WORKER_ENV.get(design, {}) != worker_env:
                    await asyncio.to_thread(worker.stack.down)
                    worker_env = WORKER_ENV.get(design, {})
                    worker = await start_deciding(settings, worker_env)
                    await asyncio.sleep(3)
                rows.append(
                    await measure_size(
                        emu, worker, admin, meter, coordinator, devices, args.per_gateway,
                        design, args.warmup, args.window, idle,
                    )
                )  # fmt: skip
        finally:
            await coordinator.stop()
            await emu.stop()
            await meter.stop()
            await admin.close()
        return {
            "rows": rows,
            "rounds_closed": coordinator.rounds,
            "idle_cpu_per_s": idle,
            "scheduler_idle_cpu_per_s": sched_idle,
        }
    finally:
        if worker is not None:
            await asyncio.to_thread(worker.stack.down)
        broker.stop()


def decisions(row: dict[str, Any]) -> str:
    if "decisions_per_s" not in row:  # a run before the scheduler counted them
        return "-"
    return f"{row['decisions_per_s']:.1f} ({row['batches_per_decision']:.2f})"


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]], timing: dict[str, float]) -> str:
    ours = [r for r in rows if r["design"] == OURS]
    sched = [r["scheduler_cpu_per_s"] for r in ours]
    got = ratio(sched) if sched else math.nan
    lines = [
        f"Run {meta['date']} ({meta['cores']} cores, shared): `{meta['command']}` "
        f"({meta['seconds']:.0f} s), commit {meta['commit']}. One scheduler worker (policy "
        f"venn), Apache Kafka 1 node, {meta['partitions']} partitions; {meta['jobs']} jobs of "
        f"demand {meta['demand']}, a round per job every {meta['round_s']:g} s; fleet "
        f"check-in rate N x {SHARE:g} / {RETRY_AFTER_S:g} s; one emulated gateway per "
        f"{meta['per_gateway']:,.0f} check-ins/s; window {meta['window_s']:g} s after "
        f"{meta['warmup_s']:g} s of warm-up. Gateway CPU per check-in: the emulating "
        f"process's CPU (its decisions, batches and reports; no HTTP) less its own cost with "
        f"no fleet ({meta['emulator_idle_cpu_per_s']:.3f} s/s: its consumer, the "
        f"coordinators), over the check-ins.",
        "",
        "| devices | design | gateways (scheduler counted) | check-ins/s offered | achieved "
        "| forwarded/s "
        "| assigned/s | **scheduler CPU, s/s** | gateway CPU per check-in, µs "
        "| broker messages/s | check-in decisions/s (batches each) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['devices']:,} | {r['design']} | {r['gateways']} "
            f"({r.get('gateways_counted', '-')}) | {r['offered_per_s']:,.0f} "
            f"| {r['checkins_per_s']:,.0f} | {r['forwarded_per_s']:,.1f} "
            f"| {r['assigned_per_s']:.1f} | **{r['scheduler_cpu_per_s']:.3f}** "
            f"| {r['gateway_cpu_us_per_checkin']:.1f} | {r['broker_msgs_per_s']:,.0f} "
            f"| {decisions(r)} |"
        )
    by_size = sorted(ours, key=lambda r: r["devices"])
    ends = (
        by_size[-1]["scheduler_cpu_per_s"] / by_size[0]["scheduler_cpu_per_s"]
        if by_size and by_size[0]["scheduler_cpu_per_s"] > 0
        else math.nan
    )
    lines += [
        "",
        f"Scheduler CPU per second, highest over lowest of the sizes: **{got:.2f}x**; "
        f"largest fleet over smallest: **{ends:.2f}x** (goal {GOAL_RATIO:g}x: "
        f"{'met' if max(got, ends) <= GOAL_RATIO else 'not met'}).",
    ]
    for design, name in (
        (UNGATHERED, "A scheduler that reads each record as it arrives"),
        (ALONE, "The design before (" + ALONE.removesuffix(" (before)") + ")"),
    ):
        before = [r["scheduler_cpu_per_s"] for r in rows if r["design"] == design]
        if len(before) >= 2:
            lines.append(f"{name}: highest over lowest **{ratio(before):.2f}x**.")

    def mine_msgs(r: dict[str, Any]) -> float:
        mine = next((o for o in ours if o["devices"] == r["devices"]), None)
        return float(mine["broker_msgs_per_s"]) if mine is not None else math.nan

    if len(by_size) >= 2:
        gws = [float(r["gateways"]) for r in by_size]
        a_s, b_s = fit_line(gws, [r["scheduler_cpu_per_s"] for r in by_size])
        a_m, b_m = fit_line(gws, [r["broker_msgs_per_s"] for r in by_size])
        lines.append(
            f"Fitted over the sizes (G gateways): scheduler CPU = {a_s:.3f} + {b_s * 1000:.2f} "
            f"ms/s x G cores; broker messages = {a_m:.0f} + {b_m:.1f} x G per second. With "
            f"the jobs open and no fleet the scheduler used {meta['scheduler_idle_cpu_per_s']:.3f}"
            " s/s."
        )
    # Each design before, against this one at the same size.
    contrasts = {
        UNSHARED: lambda r, x, fwd: (
            f"At {r['devices']:,} devices, each gateway holding the whole quota and reporting "
            f"every second (the design before) costs the scheduler {x:.1f}x the CPU and "
            f"forwards {fwd:.1f}x the check-ins."
        ),
        UNGATHERED: lambda r, x, fwd: (
            f"At {r['devices']:,} devices, a scheduler that reads each record as it arrives "
            f"costs {x:.2f}x the CPU of one that lets its input gather."
        ),
        ALONE: lambda r, x, fwd: (
            f"At {r['devices']:,} devices, deciding each batch alone with the quota held one "
            f"apiece and 50 ms of gathering (the design before) costs the scheduler {x:.2f}x "
            f"the CPU, with {r['broker_msgs_per_s'] / max(mine_msgs(r), 0.1):.2f}x the broker "
            "messages."
        ),
        BASELINE: lambda r, x, fwd: (
            f"At {r['devices']:,} devices, every check-in forwarded costs the scheduler "
            f"{x:.1f}x the CPU."
        ),
    }
    for design, say in contrasts.items():
        for r in sorted((r for r in rows if r["design"] == design), key=lambda r: r["devices"]):
            mine = next((o for o in ours if o["devices"] == r["devices"]), None)
            if mine is not None and mine["scheduler_cpu_per_s"] > 0:
                x = r["scheduler_cpu_per_s"] / mine["scheduler_cpu_per_s"]
                lines.append(say(r, x, r["forwarded_per_s"] / max(mine["forwarded_per_s"], 0.1)))
    lines += [
        "",
        f"The gateway's decision for a check-in answered at once, timed alone: "
        f"SupplyCounter.add {timing['supply_add_us']:.2f} µs + ForwardQuota.verdict "
        f"{timing['verdict_us']:.2f} µs (the emulation takes the verdict once per run of "
        "identical check-ins, so its CPU per check-in above is a little under this sum at the "
        "largest sizes, and includes the coordinator emulation and the shared consumer).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fleet_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--fleets", type=int, nargs="+", default=list(FLEETS))
    p.add_argument("--window", type=float, default=20.0, help="seconds measured per size")
    p.add_argument("--warmup", type=float, default=8.0, help="seconds before each window")
    p.add_argument("--round-s", type=float, default=10.0, help="each job's round period")
    p.add_argument("--per-gateway", type=float, default=2000.0,
                   help="check-ins/s of one gateway process (sets the gateway count)")  # fmt: skip
    p.add_argument("--baseline", action="store_true",
                   help="also every check-in forwarded, at the two smallest sizes")  # fmt: skip
    p.add_argument("--unshared", action="store_true",
                   help="also, at the two largest sizes, the design before the gateways shared "
                   "the quota and the report rate: each gateway the whole quota, a report a "
                   "second")  # fmt: skip
    p.add_argument("--ungathered", action="store_true",
                   help="also, at every size, a scheduler that reads each record as it arrives "
                   "(VENN_SCHEDULER_GATHER_MS=0, the design before)")  # fmt: skip
    p.add_argument("--alone", action="store_true",
                   help="also, at every size, the design before check-in batches of one fetch "
                   "were decided together and gateways held their quota in lumps (50 ms "
                   "gathering)")  # fmt: skip
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args(argv)
    preamble("fleet_bench")
    started = time.time()
    timing = gateway_decision_us()
    with tempfile.TemporaryDirectory(prefix="venn-fleet-") as tmp:
        out = asyncio.run(measure(args, Path(tmp)))
    command = "python -m bench.fleet_bench" + "".join(
        f" --{k} {v}" for k, v, d in (("window", args.window, 20.0), ("warmup", args.warmup, 8.0))
        if v != d
    ) + (" --baseline" if args.baseline else "") + (
        " --unshared" if args.unshared else "") + (
        " --ungathered" if args.ungathered else "") + (
        " --alone" if args.alone else "")  # fmt: skip
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
        "machine": f"{platform.machine()} {platform.python_implementation()} "
        f"{platform.python_version()}",
        "cores": os.cpu_count(),
        "command": command,
        "commit": git_commit(),
        "partitions": PARTITIONS,
        "jobs": len(GROUPS) * JOBS_PER_GROUP,
        "demand": DEMAND,
        "round_s": args.round_s,
        "per_gateway": args.per_gateway,
        "window_s": args.window,
        "warmup_s": args.warmup,
        "rounds_closed": out["rounds_closed"],
        "emulator_idle_cpu_per_s": round(out["idle_cpu_per_s"], 4),
        "scheduler_idle_cpu_per_s": round(out["scheduler_idle_cpu_per_s"], 4),
        "seconds": round(time.time() - started, 1),
    }
    text = markdown(meta, out["rows"], timing)
    print(text)
    if not args.no_write:
        JSON_OUT.write_text(
            json.dumps({"meta": meta, "timing": timing, "rows": out["rows"]}, indent=1) + "\n"
        )
        write_block(DOC, "fleet", text, "The scheduler's cost against the fleet's size")
        print(f"\nwrote {JSON_OUT.relative_to(ROOT)} and {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
