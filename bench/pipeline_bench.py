"""Pipeline benchmark: raw broker rates, scheduler check-in -> assignment rate, and the
gateway's HTTP check-in rate and latency at increasing load, in one run.

    .venv/bin/python bench/pipeline_bench.py            # full run, about 7 minutes
    .venv/bin/python bench/pipeline_bench.py --quick    # fewer steps, smaller counts

Everything runs on loopback against a private Tansu broker. Prints a table, writes
docs/bench/pipeline.json and the table + command into docs/performance.md (between the
`<!-- bench:pipeline -->` markers).

1. Raw broker (aiokafka, this process, a broker of its own): produce with `send()` and with
   `create_batch()/send_batch()`, consume with `getmany(max_records=10000)`; messages are
   encoded DeviceCheckin events (~220 bytes) on a 4-partition topic.
2. Pipeline (one scheduler worker): N check-ins produced straight to venn.checkins, one
   per message (the baseline) and as CheckinBatch events (what the gateway and the fleet
   send): (a) no job admits them: decisions/s (from the scheduler's metrics page), and
   (b) every one is eligible and there is demand for all: assignments/s seen on
   venn.assignments. Compared with the raw consume rate of step 1.
3. Gateway (one `python -m services.gateway` process): an open-loop load generator in a
   separate process (`loadgen` subcommand: requests sent at fixed times, latency measured
   from the intended send time, so queueing is not hidden) at increasing rates until
   saturation, then three times at half the saturation rate, each on a fresh broker and
   stack; bounded in count and time. Two paths:
   "instant" (no open round admits the device: answered after the produce) and "assigned"
   (eligible devices, demand available: answered with the scheduler's assignment), the
   latter with the scheduler's default 10 ms consumer fetch wait and, as the baseline,
   Faust's own 1,500 ms (VENN_SCHEDULER_FETCH_WAIT_MS).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import os
import platform
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402

JSON_OUT = ROOT / "docs" / "bench" / "pipeline.json"
DOC = ROOT / "docs" / "performance.md"
MARK_BEGIN = "<!-- bench:pipeline begin -->"
MARK_END = "<!-- bench:pipeline end -->"
WAIT_S = 2.0


# -- load generator (runs in its own process) ---------------------------------------------


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    k = min(len(sorted_values) - 1, max(0, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


async def _loadgen(
    url: str, rate: float, duration: float, attrs: dict[str, float], prefix: str, limit: int
) -> dict[str, Any]:
    import aiohttp

    total = max(1, int(rate * duration))
    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    outstanding = 0
    skipped = 0
    bodies = [
        msgspec.json.encode(
            {
                "device_id": f"{prefix}-{i}",
                "attrs": attrs,
                "speed_ms_per_sample": 60.0,
                "bandwidth_kbps": 12000.0,
            }
        )
        for i in range(total)
    ]
    connector = aiohttp.TCPConnector(limit=limit, force_close=False)
    timeout = aiohttp.ClientTimeout(total=WAIT_S + 5.0)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    finished = 0

    async def one(session: aiohttp.ClientSession, body: bytes, due: float) -> None:
        nonlocal outstanding, finished
        try:
            async with session.post(
                f"{url}/v1/checkin", data=body, headers={"Content-Type": "application/json"}
            ) as r:
                payload = await r.read()
                latencies.append(loop.time() - due)
                statuses[str(r.status)] += 1
                try:
                    answer = msgspec.json.decode(payload)
                    reasons["assigned" if answer.get("assigned") else answer.get("reason")] += 1
                except msgspec.DecodeError:
                    reasons["not json"] += 1
        except Exception as exc:
            errors[type(exc).__name__] += 1
        finally:
            outstanding -= 1
            finished += 1
            if finished == total:
                done.set()

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = loop.time() + 0.05
        tasks = []
        for i, body in enumerate(bodies):
            due = start + i / rate
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if outstanding >= limit * 4:
                skipped += 1  # the generator refuses to queue without bound
                finished += 1
                if finished == total:
                    done.set()
                continue
            outstanding += 1
            tasks.append(asyncio.ensure_future(one(session, body, due)))
        send_end = loop.time()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), WAIT_S + 10.0)
        end = loop.time()
        for t in tasks:
            t.cancel()
    latencies.sort()
    answered = len(latencies)
    return {
        "target_rps": rate,
        "sent": total - skipped,
        "skipped": skipped,
        "answered": answered,
        "send_s": round(send_end - start, 3),
        "elapsed_s": round(end - start, 3),
        "achieved_rps": round(answered / max(end - start, 1e-9), 1),
        "statuses": dict(statuses),
        "reasons": dict(reasons),
        "errors": dict(errors),
        "p50_ms": round(percentile(latencies, 50) * 1000, 1),
        "p95_ms": round(percentile(latencies, 95) * 1000, 1),
        "p99_ms": round(percentile(latencies, 99) * 1000, 1),
        "max_ms": round(latencies[-1] * 1000, 1) if latencies else math.nan,
    }


def loadgen_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pipeline_bench.py loadgen")
    p.add_argument("--url", required=True)
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--attrs", required=True, help="JSON object")
    p.add_argument("--prefix", required=True)
    p.add_argument("--limit", type=int, default=256, help="max connections")
    a = p.parse_args(argv)
    import uvloop

    result = uvloop.run(_loadgen(a.url, a.rate, a.duration, json.loads(a.attrs), a.prefix, a.limit))
    print(json.dumps(result))
    return 0


# -- helpers ------------------------------------------------------------------------------


def proc_cpu(pid: int | None) -> float:
    """User + system CPU seconds of a process (0 if it is gone)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sample_checkin(i: int, attrs: dict[str, float], prefix: str = "raw") -> bytes:
    from venn import events as ev

    return ev.encode(
        ev.DeviceCheckin(
            event_id=f"{prefix}-{i}-{uuid.uuid4().hex[:12]}",
            time=time.time(),
            device_id=f"{prefix}-dev-{i:09d}",
            attrs=attrs,
            speed_ms_per_sample=61.5,
            bandwidth_kbps=11873.25,
        )
    )


PROFILE_ATTRS = {"cpu_f": 6.0, "ram": 8.0, "fp16_mem": 900.0, "android_os": 12.0}


async def produce_batches(bootstrap: str, topic: str, values: list[tuple[bytes, bytes]]) -> float:
    """Produce (key, value) pairs with create_batch()/send_batch(); returns seconds."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, max_batch_size=1 << 20)
    await producer.start()
    try:
        partitions = sorted(await producer.partitions_for(topic))
        start = time.perf_counter()
        futures = []
        batches = {p: producer.create_batch() for p in partitions}
        for i, (key, value) in enumerate(values):
            p = partitions[i % len(partitions)]
            if batches[p].append(key=key, value=value, timestamp=None) is None:
                futures.append(await producer.send_batch(batches[p], topic, partition=p))
                batches[p] = producer.create_batch()
                batches[p].append(key=key, value=value, timestamp=None)
        for p, batch in batches.items():
            if batch.record_count():
                futures.append(await producer.send_batch(batch, topic, partition=p))
        await asyncio.gather(*futures)
        return time.perf_counter() - start
    finally:
        await producer.stop()


# -- 1. raw broker rates -------------------------------------------------------------------


async def raw_rates(bootstrap: str, n_send: int, n_batch: int) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    from venn.broker.topics import delete_topics, ensure_topics

    topic = f"bench.raw.{uuid.uuid4().hex[:6]}"
    await ensure_topics(bootstrap, 4, names=[topic])
    values = [
        (f"raw-dev-{i:09d}".encode(), sample_checkin(i, PROFILE_ATTRS))
        for i in range(max(n_send, n_batch))
    ]
    size = sum(len(v) for _, v in values) / len(values)

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5)
    await producer.start()
    try:
        await producer.send_and_wait(topic, values[0][1], key=values[0][0])  # metadata
        start = time.perf_counter()
        futures = [await producer.send(topic, v, key=k) for k, v in values[:n_send]]
        await asyncio.gather(*futures)
        send_s = time.perf_counter() - start
    finally:
        await producer.stop()
    batch_s = await produce_batches(bootstrap, topic, values[:n_batch])

    expected = n_send + n_batch + 1
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(4)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got = 0
        start = time.perf_counter()
        deadline = start + 120
        while got < expected and time.perf_counter() < deadline:
            batches = await consumer.getmany(timeout_ms=500, max_records=10000)
            got += sum(len(m) for m in batches.values())
        consume_s = time.perf_counter() - start
    finally:
        await consumer.stop()
    await delete_topics(bootstrap, [topic])
    return {
        "message_bytes": round(size),
        "produce_send": {"messages": n_send, "seconds": round(send_s, 3),
                         "rate": round(n_send / send_s)},
        "produce_batch": {"messages": n_batch, "seconds": round(batch_s, 3),
                          "rate": round(n_batch / batch_s)},
        "consume": {"messages": got, "seconds": round(consume_s, 3),
                    "rate": round(got / consume_s)},
    }  # fmt: skip


# -- 2. pipeline rates ---------------------------------------------------------------------


async def wait_metric(
    stack: Any, name: str, topic: str | None, target: float, timeout: float
) -> float | None:
    """Poll a scheduler counter until it reaches `target`; the time it did, or None."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        value = await asyncio.to_thread(stack.scheduler_metric, name, topic)
        if value >= target:
            return time.perf_counter()
        await asyncio.sleep(0.05)
    return None


def as_messages(values: list[tuple[bytes, bytes]], batch: int) -> list[tuple[bytes, bytes]]:
    """Check-ins as Kafka messages: one each (batch 1) or CheckinBatch events of `batch`."""
    from venn import events as ev

    if batch <= 1:
        return values
    out = []
    for start in range(0, len(values), batch):
        batch_id = f"bench-batch-{uuid.uuid4().hex[:12]}"
        items = [v for _, v in values[start : start + batch]]
        out.append((batch_id.encode(), ev.encode_checkin_batch(batch_id, time.time(), items)))
    return out


async def decision_rate(stack: Any, n: int, batch: int, timeout: float) -> dict[str, Any]:
    """(a) n check-ins that no job admits: how fast the scheduler decides them."""
    metric = "venn_scheduler_checkins_total"
    sched = stack.scheduler.pid if stack.scheduler else None
    tok = uuid.uuid4().hex[:6]
    values = [
        (f"none-{tok}-{i}".encode(), sample_checkin(i, {f"none_{tok}": 1.0}, f"none-{tok}"))
        for i in range(n)
    ]
    messages = as_messages(values, batch)
    base = await asyncio.to_thread(stack.scheduler_metric, metric, None)
    cpu0 = proc_cpu(sched)
    start = time.perf_counter()
    produce_s = await produce_batches(stack.bootstrap, "venn.checkins", messages)
    done = await wait_metric(stack, metric, None, base + n, timeout)
    seconds = (done or time.perf_counter()) - start
    return {
        "checkins": n,
        "batch": batch,
        "messages": len(messages),
        "seconds": round(seconds, 3),
        "rate": round(n / seconds) if done else None,
        "produce_s": round(produce_s, 3),
        "scheduler_cpu_us_per_checkin": round((proc_cpu(sched) - cpu0) / n * 1e6, 1),
        "completed": done is not None,
    }


async def assignment_rate(
    stack: Any, n: int, demand: int, batch: int, timeout: float
) -> dict[str, Any]:
    """(b) n eligible check-ins and demand for all of them: assignments/s on the topic."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from loadtest.stack import probe_job
    from venn import events as ev
    from venn.broker import topics

    events_metric = "venn_scheduler_events_total"
    sched = stack.scheduler.pid if stack.scheduler else None
    tok = uuid.uuid4().hex[:6]
    attr = f"bench_{tok}"
    jobs = [probe_job(f"pipe-{tok}-{j}", attr, demand) for j in range(math.ceil(n / demand))]
    jobs_base = await asyncio.to_thread(stack.scheduler_metric, events_metric, topics.JOBS)
    await stack.publish_jobs(jobs)
    await wait_metric(stack, events_metric, topics.JOBS, jobs_base + 2 * len(jobs), 60)
    mine = {j.job_id for j in jobs}
    consumer = AIOKafkaConsumer(bootstrap_servers=stack.bootstrap, group_id=None)
    await consumer.start()
    tps = [TopicPartition(topics.ASSIGNMENTS, p) for p in range(stack.config.partitions)]
    consumer.assign(tps)
    await consumer.seek_to_end(*tps)
    for tp in tps:
        await consumer.position(tp)
    values = [
        (f"elig-{tok}-{i}".encode(), sample_checkin(i, {attr: 2.0}, f"elig-{tok}"))
        for i in range(n)
    ]
    messages = as_messages(values, batch)
    allowed = ev.ALLOWED_ON[topics.ASSIGNMENTS]
    cpu0 = proc_cpu(sched)
    start = time.perf_counter()
    produce_s = await produce_batches(stack.bootstrap, topics.CHECKINS, messages)
    assigned = 0
    last = start
    deadline = start + timeout
    try:
        while assigned < n and time.perf_counter() < deadline:
            for records in (await consumer.getmany(timeout_ms=200, max_records=10000)).values():
                for m in records:
                    for a in ev.assignments_of(ev.decode(m.value, allowed)):
                        if a.job_id in mine:
                            assigned += 1
                            last = time.perf_counter()
    finally:
        await consumer.stop()
    seconds = last - start
    await stack.publish_jobs(jobs, finish=True)
    return {
        "checkins": n,
        "batch": batch,
        "messages": len(messages),
        "jobs": len(jobs),
        "demand_per_job": demand,
        "assigned": assigned,
        "seconds": round(seconds, 3),
        "rate": round(assigned / seconds) if assigned else 0,
        "produce_s": round(produce_s, 3),
        "scheduler_cpu_us_per_assignment": round(
            (proc_cpu(sched) - cpu0) / max(assigned, 1) * 1e6, 1
        ),
        "completed": assigned >= n,
    }


async def pipeline_rates(
    stack: Any, n: int, n_batched: int, demand: int, timeout: float
) -> dict[str, Any]:
    """Decisions and assignments, with one check-in per message (the baseline) and with
    CheckinBatch messages of BATCH check-ins (what the gateway and the fleet send)."""
    out: dict[str, Any] = {}
    for label, count, batch in (("single", n, 1), ("batched", n_batched, BATCH)):
        out[label] = {
            "decisions": await decision_rate(stack, count, batch, timeout),
            "assignments": await assignment_rate(stack, count, demand, batch, timeout),
        }
        print(f"  {label}: {out[label]}", flush=True)
    return out


# -- 3. gateway sweep ----------------------------------------------------------------------


@dataclass
class Step:
    mode: str
    target_rps: float
    result: dict[str, Any]
    cpu_us_per_request: dict[str, float] = field(default_factory=dict)

    @property
    def good(self) -> int:
        reasons = self.result["reasons"]
        if self.mode == "assigned":
            return int(reasons.get("assigned", 0))
        return int(reasons.get("no_open_round", 0))

    @property
    def good_rps(self) -> float:
        """Good answers per second of the sending window (every request is answered
        within the gateway's bound, so a backlog shows in the latency, not here)."""
        return self.good / max(self.result["send_s"], 1e-9)

    @property
    def saturated(self) -> bool:
        r = self.result
        total = max(1, int(self.target_rps * r["send_s"]) + r["skipped"])
        return (
            self.good < 0.95 * total
            or r["p99_ms"] > WAIT_S * 1000
            or bool(r["errors"])
            or any(code != "200" for code in r["statuses"])
        )

    def row(self) -> dict[str, Any]:
        r = self.result
        return {
            "mode": self.mode,
            "target_rps": self.target_rps,
            "answered_rps": r["achieved_rps"],
            "good_rps": round(self.good_rps, 1),
            "p50_ms": r["p50_ms"],
            "p95_ms": r["p95_ms"],
            "p99_ms": r["p99_ms"],
            "max_ms": r["max_ms"],
            "statuses": r["statuses"],
            "reasons": r["reasons"],
            "errors": r["errors"],
            "skipped": r["skipped"],
            "saturated": self.saturated,
            "cpu_us_per_request": self.cpu_us_per_request,
        }


async def gateway_step(
    stack: Any, mode: str, rate: float, duration: float, demand: int, broker_pid: int | None
) -> Step:
    from loadtest.stack import probe_job

    tok = uuid.uuid4().hex[:6]
    attr = f"gw_{tok}"
    jobs = []
    if mode == "assigned":
        jobs = [
            probe_job(f"gw-{tok}-{j}", attr, demand)
            for j in range(math.ceil(rate * duration * 1.2 / demand))
        ]
        await stack.publish_jobs(jobs)
        # Both the gateway's view and the scheduler must have the rounds open.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            health = await asyncio.to_thread(stack.gateway_health)
            if health.get("open_requirements", 0) >= 1:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(2.0)  # an idle stock scheduler reads venn.jobs up to 1.5 s late
    pids = {
        "gateway": stack.gateway.pid if stack.gateway else None,
        "scheduler": stack.scheduler.pid if stack.scheduler else None,
        "broker": broker_pid,
    }
    cpu0 = {k: proc_cpu(p) for k, p in pids.items()}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(Path(__file__).resolve()), "loadgen",
        "--url", stack.url, "--rate", str(rate), "--duration", str(duration),
        "--attrs", json.dumps({attr: 2.0} if mode == "assigned" else {f"none_{tok}": 1.0}),
        "--prefix", f"{mode}-{tok}",
        stdout=asyncio.subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), duration + WAIT_S + 60)
    result = json.loads(out)
    answered = max(result["answered"], 1)
    cpu = {k: round((proc_cpu(p) - cpu0[k]) / answered * 1e6) for k, p in pids.items()}
    if jobs:
        await stack.publish_jobs(jobs, finish=True)
    return Step(mode, rate, result, cpu)


async def gateway_sweep(
    stack: Any,
    mode: str,
    rates: list[float],
    duration: float,
    demand: int,
    broker_pid: int | None,
    fresh_stack: Callable[[], contextlib.AbstractAsyncContextManager[tuple[Any, int]]]
    | None = None,
) -> dict[str, Any]:
    """Steps at increasing rates until saturation, then the half-saturation rate three
    times, each on a fresh broker and stack when ``fresh_stack`` is given (the sweep's
    messages stay in Tansu's memory and slow it down; see run_bench)."""
    steps: list[Step] = []
    await settle(stack, broker_pid)
    for rate in rates:
        step = await gateway_step(stack, mode, rate, duration, demand, broker_pid)
        steps.append(step)
        print(f"  {mode:8} {rate:>6.0f}/s -> {step.good_rps:>7.1f}/s  p50 "
              f"{step.result['p50_ms']:>7.1f}  p99 {step.result['p99_ms']:>7.1f} ms"
              f"{'  saturated' if step.saturated else ''}", flush=True)  # fmt: skip
        if step.saturated:
            break
        await settle(stack, broker_pid)
    ok = [s for s in steps if not s.saturated]
    saturation = max((s.good_rps for s in steps), default=0.0)
    if ok:  # the highest rate that was still served within bounds
        saturation = max(saturation if steps[-1].saturated else 0.0, max(s.good_rps for s in ok))
    half = None
    if saturation > 0:
        # Repeated, median by p99: on a shared 2-core machine one run can land on a burst
        # of another tenant's work.
        repeats = []
        for _ in range(HALF_REPEATS):
            ctx = fresh_stack() if fresh_stack else contextlib.nullcontext((stack, broker_pid))
            async with ctx as (half_stack, half_pid):
                await settle(half_stack, half_pid)
                repeats.append(
                    await gateway_step(
                        half_stack, mode, round(saturation / 2), duration, demand, half_pid
                    )
                )
        repeats.sort(key=lambda s: s.result["p99_ms"])
        half_step = repeats[len(repeats) // 2]
        p99s = [s.result["p99_ms"] for s in repeats]
        print(f"  {mode:8} half-saturation {half_step.target_rps:.0f}/s -> p99 {p99s} ms",
              flush=True)  # fmt: skip
        half = half_step.row()
        half["p99_ms_repeats"] = p99s
    return {
        "steps": [s.row() for s in steps],
        "saturation_rps": round(saturation, 1),
        "half_saturation": half,
        "any_5xx": any(code.startswith("5") for s in steps for code in s.result["statuses"])
        or bool(half and any(c.startswith("5") for c in half["statuses"])),
        "max_ms": max([s.result["max_ms"] for s in steps] + ([half["max_ms"]] if half else [])),
    }


# -- profiles ------------------------------------------------------------------------------


def _package(path: str) -> str:
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0].removesuffix(".py")
    if path.endswith(("asyncio/runners.py", "selectors.py", "asyncio/base_events.py")):
        return "event loop (idle + I/O wait)"
    rel = path.removeprefix(str(ROOT) + "/")
    if rel != path:
        parts = rel.split("/")
        return ".".join(parts[:2]) if parts[0] in ("services", "venn") else parts[0]
    if "/asyncio/" in path:
        return "asyncio"
    return "stdlib"


def profile_summary(path: Path, top: int = 8) -> dict[str, Any] | None:
    """Exclusive time by package, and the functions with the most exclusive time, of a
    pyinstrument session (None if it was not written)."""
    if not path.exists():
        return None
    from pyinstrument.session import Session

    session = Session.load(str(path))
    shares: Counter[str] = Counter()
    functions: Counter[str] = Counter()

    def walk(frame: Any, owner: str, where: str) -> None:
        fp = frame.file_path
        real = bool(fp) and not fp.startswith("<")
        own = _package(fp) if real else owner
        here = f"{frame.function} ({_package(fp)})" if real else where
        if not frame.children:
            shares[own] += frame.time
            functions[here] += frame.time
            return
        for child in frame.children:
            walk(child, own, here)

    root = session.root_frame()
    if root is None:
        return None
    walk(root, "?", "?")
    total = sum(shares.values()) or 1.0
    return {
        "duration_s": round(session.duration, 1),
        "cpu_s": round(session.cpu_time, 1),
        "share_pct": {k: round(v / total * 100, 1) for k, v in shares.most_common(top)},
        "top_functions_pct": {
            k: round(v / total * 100, 1) for k, v in functions.most_common(top + 4)
        },
    }


# -- report --------------------------------------------------------------------------------


def _fmt(value: Any, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float | int):
        return f"{value:,.0f}{unit}" if abs(value) >= 100 else f"{value:,.1f}{unit}"
    return str(value)


def report_markdown(r: dict[str, Any]) -> str:
    raw, pipe = r["raw"], r["pipeline"]
    consume = raw["consume"]["rate"]
    lines = [
        f"Run {r['meta']['date']} on {r['meta']['machine']} ({r['meta']['cpus']} cores, "
        f"load average {r['meta']['loadavg_start']} at start, "
        f"{r['meta']['loadavg_end']} at the end; other processes used "
        f"{r['meta']['other_processes_cpu_cores']} cores on average): "
        f"`{r['meta']['command']}` ({r['meta']['seconds']:.0f} s).",
        "",
        "| Measure | Value |",
        "|---|---|",
        f"| Raw produce, aiokafka `send()` ({raw['message_bytes']} B check-ins) | "
        f"{_fmt(raw['produce_send']['rate'])} msg/s |",
        f"| Raw produce, `create_batch()/send_batch()` | {_fmt(raw['produce_batch']['rate'])} "
        "msg/s |",
        f"| Raw consume, `getmany(max_records=10000)` | {_fmt(consume)} msg/s |",
    ]
    for label, how in (("single", "one check-in per message"),
                       ("batched", f"CheckinBatch of {BATCH} per message")):  # fmt: skip
        d, a = pipe[label]["decisions"], pipe[label]["assignments"]
        lines += [
            f"| Pipeline, {how}: {d['checkins']:,} check-ins no job admits, decided | "
            f"{_fmt(d['rate'])} /s ({d['scheduler_cpu_us_per_checkin']} µs scheduler CPU "
            "each) |",
            f"| Pipeline, {how}: check-in -> assignment ({a['jobs']} jobs x "
            f"{a['demand_per_job']} devices) | {_fmt(a['rate'])} /s "
            f"({a['scheduler_cpu_us_per_assignment']} µs scheduler CPU each) |",
        ]
    lines += [
        f"| Pipeline (batched) / raw consume (goal >= 50%) | "
        f"{_fmt(r['goals']['pipeline_over_consume_pct'], '%')} |",
    ]
    for key, label in (
        ("instant", "Gateway, answered at once (no open round admits the device)"),
        ("assigned", "Gateway, answered with an assignment (scheduler fetch wait 10 ms)"),
        ("assigned_fetch1500", "Gateway, answered with an assignment (Faust's 1,500 ms wait)"),
    ):
        sweep = r["gateway"].get(key)
        if not sweep:
            continue
        half = sweep["half_saturation"] or {}
        repeats = ", ".join(_fmt(p) for p in half.get("p99_ms_repeats", []))
        lines.append(
            f"| {label}: saturation / p99 at half of it (goal < 50 ms) | "
            f"{_fmt(sweep['saturation_rps'])} /s / {_fmt(half.get('p99_ms'), ' ms')} "
            f"(median of {repeats}) |"
        )
    lines += [
        "",
        "Gateway steps (open-loop generator in its own process; latency from the intended "
        "send time; `good` = answers of the expected kind; CPU µs per answered request):",
        "",
        "| Path | Target /s | Good /s | p50 ms | p95 ms | p99 ms | Max ms | HTTP statuses "
        "| Gateway µs | Scheduler µs | Broker µs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, sweep in r["gateway"].items():
        rows = [*sweep["steps"]] + ([sweep["half_saturation"]] if sweep["half_saturation"] else [])
        for i, s in enumerate(rows):
            tag = " (half sat.)" if i == len(rows) - 1 and sweep["half_saturation"] else ""
            tag += " *" if s["saturated"] else ""
            cpu = s["cpu_us_per_request"]
            statuses = ", ".join(f"{k}: {v}" for k, v in sorted(s["statuses"].items()))
            if s["errors"]:
                statuses += "; errors " + ", ".join(f"{k}: {v}" for k, v in s["errors"].items())
            if s["skipped"]:
                statuses += f"; {s['skipped']} not sent (generator queue full)"
            lines.append(
                f"| {key}{tag} | {_fmt(s['target_rps'])} | {_fmt(s['good_rps'])} | "
                f"{_fmt(s['p50_ms'])} | {_fmt(s['p95_ms'])} | {_fmt(s['p99_ms'])} | "
                f"{_fmt(s['max_ms'])} | {statuses} | {cpu.get('gateway')} | "
                f"{cpu.get('scheduler')} | {cpu.get('broker')} |"
            )
    lines.append("")
    lines.append(
        "`*` = saturated (fewer than 95% good answers, a non-200, or p99 over the 2 s bound)."
    )
    if r.get("profiles"):
        lines += ["", "Profiles (pyinstrument, exclusive wall time by package):", ""]
        for name, prof in r["profiles"].items():
            if prof:
                shares = ", ".join(f"{k} {v}%" for k, v in prof["share_pct"].items())
                hot = ", ".join(
                    f"`{k}` {v}%" for k, v in list(prof["top_functions_pct"].items())[:6]
                )
                lines.append(
                    f"- {name} ({prof['cpu_s']} s CPU in {prof['duration_s']} s): {shares}. "
                    f"Top functions: {hot}"
                )
    return "\n".join(lines)


def write_doc(markdown: str) -> None:
    block = f"{MARK_BEGIN}\n{markdown}\n{MARK_END}"
    text = DOC.read_text() if DOC.exists() else ""
    if MARK_BEGIN in text and MARK_END in text:
        head, rest = text.split(MARK_BEGIN, 1)
        _, tail = rest.split(MARK_END, 1)
        text = head + block + tail
    else:
        text = (text.rstrip() + "\n\n" if text else "# Performance\n\n") + block + "\n"
    DOC.write_text(text)


# -- main ----------------------------------------------------------------------------------


def machine_busy_s() -> float:
    """CPU seconds all processes of the machine spent busy (from /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """CPU seconds of this process and of its children that have been waited for."""
    import resource

    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


async def settle(
    stack: Any,
    broker_pid: int | None = None,
    idle_cores: float = 0.15,
    broker_idle_cores: float = 0.4,
    timeout: float = 90.0,
    broker_timeout: float = 15.0,
) -> None:
    """Until, over half a second, the scheduler uses less than `idle_cores` and the broker
    (when its pid is given) less than `broker_idle_cores`, so that a step does not start
    while the broker still works through the previous one. The broker's own idle use
    grows with what it stores (it keeps every message in memory), so its condition is
    given up after `broker_timeout` seconds."""
    pid = stack.scheduler.pid if stack.scheduler else None
    start = time.monotonic()
    while time.monotonic() < start + timeout:
        before, broker_before = proc_cpu(pid), proc_cpu(broker_pid)
        await asyncio.sleep(0.5)
        sched_busy = (proc_cpu(pid) - before) / 0.5
        broker_busy = (proc_cpu(broker_pid) - broker_before) / 0.5 if broker_pid else 0.0
        broker_ok = broker_busy < broker_idle_cores or time.monotonic() > start + broker_timeout
        if sched_busy < idle_cores and broker_ok:
            return


@dataclass(frozen=True)
class Plan:
    raw_send: int
    raw_batch: int
    pipeline_n: int
    pipeline_batched_n: int
    instant_rates: list[float]
    assigned_rates: list[float]
    step_s: float
    profile: bool


FULL = Plan(50_000, 200_000, 5_000, 50_000, [200, 400, 600, 800, 1000, 1200, 1600, 2400],
            [50, 100, 150, 200, 300, 400, 600, 800, 1200, 1600], 5.0, True)  # fmt: skip
QUICK = Plan(20_000, 50_000, 2_000, 20_000, [200, 800, 1600], [50, 200, 400], 3.0, False)

DEMAND = 250
BATCH = 128
"""Check-ins per CheckinBatch, as the gateway (VENN_GATEWAY_BATCH_MAX) and the fleet send."""
HALF_REPEATS = 3
FAUST_FETCH_WAIT_MS = 1500


async def run_bench(plan: Plan, command: str, workdir: Path) -> dict[str, Any]:
    from loadtest.stack import LoadStack, StackConfig
    from venn.broker.tansu import TansuBroker

    started = time.time()
    result: dict[str, Any] = {
        "meta": {
            "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
            "machine": platform.machine() + " " + platform.python_implementation()
            + " " + platform.python_version(),
            "cpus": os.cpu_count(),
            "loadavg_start": round(os.getloadavg()[0], 2),
            "command": command,
            "plan": plan.__dict__,
        },
        "gateway": {},
    }  # fmt: skip

    busy0, own0 = machine_busy_s(), own_cpu_s()
    print("1. raw broker rates", flush=True)
    # A broker of its own: Tansu keeps every message in memory, and the 250,000 raw
    # messages would cost the stack's broker CPU for the rest of the run.
    with TansuBroker(log_path=workdir / "broker-raw.log") as broker:
        result["raw"] = await raw_rates(broker.bootstrap, plan.raw_send, plan.raw_batch)
        print(f"  {result['raw']}", flush=True)
    # Every sweep and the pipeline phase on a fresh broker and stack: Tansu keeps every
    # message in memory with no retention, and after the instant sweep (about 60,000
    # check-ins) its CPU per request had doubled (15.7 ms of broker CPU per assigned
    # request at 50/s, against 8 ms on a fresh broker), which is the broker's state, not
    # the path being measured.
    phases: list[tuple[str, str, int | None]] = [
        ("instant", "2. gateway sweep, answered at once", None),
        ("assigned", "3. gateway sweep, answered with an assignment", None),
        ("pipeline", "4. pipeline", None),
        ("assigned_fetch1500", "5. gateway sweep, Faust's own fetch wait", FAUST_FETCH_WAIT_MS),
    ]

    def stack_factory(
        name: str, fetch_wait: int | None
    ) -> Callable[[], contextlib.AbstractAsyncContextManager[tuple[Any, int]]]:
        runs = itertools.count()

        @contextlib.asynccontextmanager
        async def fresh() -> AsyncIterator[tuple[Any, int]]:
            tag = f"{name}-{next(runs)}"
            with TansuBroker(log_path=workdir / f"broker-{tag}.log") as broker:
                config = StackConfig(
                    run_dir=workdir / tag,
                    broker=broker.bootstrap,
                    coordinators=False,
                    wait_s=WAIT_S,
                    scheduler_fetch_wait_ms=fetch_wait,
                )
                async with LoadStack(config) as stack:
                    yield stack, broker.pid or 0

        return fresh

    for name, title, fetch_wait in phases:
        print(title, flush=True)
        fresh = stack_factory(name, fetch_wait)
        async with fresh() as (stack, broker_pid):
            if name == "pipeline":
                await settle(stack, broker_pid)
                result["pipeline"] = await pipeline_rates(
                    stack, plan.pipeline_n, plan.pipeline_batched_n, DEMAND, 300
                )
                continue
            mode = "instant" if name == "instant" else "assigned"
            rates = plan.instant_rates if mode == "instant" else plan.assigned_rates
            result["gateway"][name] = await gateway_sweep(
                stack, mode, rates, plan.step_s, DEMAND, broker_pid, fresh
            )
    busy1, own1 = machine_busy_s(), own_cpu_s()
    if plan.profile:
        print("6. profiles (pyinstrument; rates under the profiler are not reported)", flush=True)
        prof_dir = workdir / "profiles"
        sat = result["gateway"]["instant"]["saturation_rps"] or 400
        with TansuBroker(log_path=workdir / "broker-c.log") as broker:
            config = StackConfig(run_dir=workdir / "profiled", broker=broker.bootstrap,
                                 coordinators=False, wait_s=WAIT_S,
                                 profile_dir=prof_dir)  # fmt: skip
            async with LoadStack(config) as stack:
                await gateway_step(stack, "instant", round(sat * 0.8), plan.step_s, DEMAND, None)
                await assignment_rate(stack, plan.pipeline_batched_n // 2, DEMAND, BATCH, 300)
        result["profiles"] = {
            "gateway (instant answers at 80% of saturation, then idle during a pipeline run)": (
                profile_summary(prof_dir / "gateway.pyisession")
            ),
            "scheduler (batched check-ins -> assignments)": profile_summary(
                prof_dir / "scheduler.pyisession"
            ),
        }
    measured_s = time.time() - started
    result["meta"]["other_processes_cpu_cores"] = round(
        max(0.0, (busy1 - busy0) - (own1 - own0)) / max(measured_s, 1e-9), 2
    )
    consume = result["raw"]["consume"]["rate"]
    assign = result["pipeline"]["batched"]["assignments"]["rate"] or 0
    halves = {k: (v["half_saturation"] or {}).get("p99_ms") for k, v in result["gateway"].items()}
    result["goals"] = {
        "pipeline_over_consume_pct": round(assign / consume * 100, 2) if consume else None,
        "pipeline_goal_met": bool(consume) and assign >= 0.5 * consume,
        "p99_at_half_saturation_ms": halves,
        "p99_goal_met": {k: v is not None and v < 50 for k, v in halves.items()},
        "any_5xx": any(v["any_5xx"] for v in result["gateway"].values()),
        "max_latency_ms": max(v["max_ms"] for v in result["gateway"].values()),
    }
    result["meta"]["seconds"] = round(time.time() - started, 1)
    result["meta"]["loadavg_end"] = round(os.getloadavg()[0], 2)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/pipeline_bench.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--quick", action="store_true", help="fewer steps, smaller counts")
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args(argv)
    plan = QUICK if args.quick else FULL
    command = "python bench/pipeline_bench.py" + (" --quick" if args.quick else "")
    import uvloop

    with tempfile.TemporaryDirectory(prefix="venn-pipeline-bench-") as tmp:
        result = uvloop.run(run_bench(plan, command, Path(tmp)))
    markdown = report_markdown(result)
    print()
    print(markdown)
    if not args.no_write:
        JSON_OUT.parent.mkdir(parents=True, exist_ok=True)
        JSON_OUT.write_text(json.dumps(result, indent=1) + "\n")
        write_doc(markdown)
        print(f"\nwrote {JSON_OUT.relative_to(ROOT)} and {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "loadgen":
        raise SystemExit(loadgen_main(sys.argv[2:]))
    raise SystemExit(main())
