"""Pipeline benchmark: raw broker rates, scheduler check-in -> assignment rate and latency,
and the gateway's HTTP check-in rate and latency at increasing load, on Apache Kafka and on
Tansu, in one run.

    .venv/bin/python -m bench.pipeline_bench                  # full run, about 15 minutes
    .venv/bin/python -m bench.pipeline_bench --quick          # fewer steps, smaller counts
    .venv/bin/python -m bench.pipeline_bench --broker kafka   # one broker only (also tansu)

Everything runs on loopback; every phase starts a broker of its own (Apache Kafka 4.x from
its jars in a fresh temp dir, or Tansu in memory). Prints a table, writes
docs/results/bench/pipeline.json and the tables + command into docs/results/pipeline.md (between the
`<!-- bench:pipeline -->` markers).

1. Raw broker, on Kafka and on Tansu (aiokafka, this process): produce with `send()` (acks=1
   and acks=all) and with `create_batch()/send_batch()`, consume with
   `getmany(max_records=10000)`; encoded DeviceCheckin events (~260 bytes) on a 4-partition
   topic, after a warm-up pass (the JVM compiles its hot paths in the first seconds). The
   broker's CPU per message is read from /proc.
2. Pipeline, on three setups, each a fresh broker and stack (one scheduler worker, one
   gateway): Apache Kafka with its client profile (venn/broker/tuning.py, "settings on"),
   Apache Kafka with the Tansu profile forced (VENN_BROKER_TUNING=tansu, "settings off"),
   and Tansu with its profile. On each: the idle CPU of broker, scheduler and gateway; N
   check-ins produced straight to venn.checkins, one per message (the baseline) and as
   CheckinBatch events (what the gateway and the fleet send): (a) no job admits them:
   decisions/s (from the scheduler's metrics page), (b) every one is eligible and there is
   demand for all: assignments/s seen on venn.assignments; (c) latency at a modest rate:
   single check-ins produced at fixed times, the time until each one's assignment is seen
   on venn.assignments; (d) the gateway's assigned path at the same rate (p50/p99).
3. Gateway (one `python -m services.gateway` process), on Apache Kafka and on Tansu, each
   with its own profile: an open-loop load generator in a separate process
   (`loadgen` subcommand: requests sent at fixed times, latency measured from the intended
   send time, so queueing is not hidden) at increasing rates until saturation, then
   repeated at half the saturation rate. Two paths: "instant" (no open round admits the
   device: answered after the produce) and "assigned" (eligible devices, demand available:
   answered with the scheduler's assignment).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import math
import os
import platform
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import git_commit, preamble, write_block
from bench.gateway_load import (
    DEMAND,
    SETUPS,
    Setup,
    gateway_step,
    gateway_sweep,
    idle_cpu,
    machine_busy_s,
    open_jobs,
    own_cpu_s,
    percentile,
    profile_summary,
    schedulers_cpu,
    settle,
    stack_factory,
    wait_metric,
)
from devtools.procs import proc_cpu

ROOT = Path(__file__).resolve().parents[1]

JSON_OUT = ROOT / "docs" / "results" / "bench" / "pipeline.json"
DOC = ROOT / "docs" / "results" / "pipeline.md"


# -- load generator (runs in its own process) ---------------------------------------------


# -- helpers ------------------------------------------------------------------------------


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


async def _produce_send(
    bootstrap: str, topic: str, values: list[tuple[bytes, bytes]], acks: int | str
) -> float:
    """Produce with one `send()` per message; returns seconds."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=acks, linger_ms=5)
    await producer.start()
    try:
        await producer.send_and_wait(topic, values[0][1], key=values[0][0])  # metadata
        start = time.perf_counter()
        futures = [await producer.send(topic, v, key=k) for k, v in values]
        await asyncio.gather(*futures)
        return time.perf_counter() - start
    finally:
        await producer.stop()


async def _consume_all(
    bootstrap: str, topic: str, expected: int, partitions: int = 4
) -> tuple[int, float]:
    """Read a topic from the beginning with getmany; (messages, seconds)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got = 0
        start = time.perf_counter()
        deadline = start + 120
        while got < expected and time.perf_counter() < deadline:
            batches = await consumer.getmany(timeout_ms=500, max_records=10000)
            got += sum(len(m) for m in batches.values())
        return got, time.perf_counter() - start
    finally:
        await consumer.stop()


async def raw_rates(
    bootstrap: str, n_send: int, n_batch: int, broker_pid: int | None
) -> dict[str, Any]:
    """Produce and consume rates of one broker, and its CPU per message, after a warm-up."""
    from venn.broker.topics import delete_topics, ensure_topics

    tok = uuid.uuid4().hex[:6]
    topic, warm = f"bench.raw.{tok}", f"bench.warm.{tok}"
    await ensure_topics(bootstrap, 4, names=[topic, warm])
    values = [
        (f"raw-dev-{i:09d}".encode(), sample_checkin(i, PROFILE_ATTRS))
        for i in range(max(n_send, n_batch))
    ]
    size = sum(len(v) for _, v in values) / len(values)
    # Warm-up on a topic of its own: a fresh JVM interprets, then compiles, its hot paths.
    await _produce_send(bootstrap, warm, values[: n_send // 4], 1)
    await produce_batches(bootstrap, warm, values[: n_batch // 4])
    await _consume_all(bootstrap, warm, n_send // 4 + n_batch // 4 + 1)

    def measured(messages: int, seconds: float, cpu: float) -> dict[str, Any]:
        return {"messages": messages, "seconds": round(seconds, 3),
                "rate": round(messages / seconds),
                "broker_cpu_us_per_msg": round(cpu / max(messages, 1) * 1e6, 2)}  # fmt: skip

    out: dict[str, Any] = {"message_bytes": round(size)}
    for key, acks in (("produce_send", 1), ("produce_send_acks_all", "all")):
        cpu0 = proc_cpu(broker_pid)
        seconds = await _produce_send(bootstrap, topic, values[:n_send], acks)
        out[key] = measured(n_send, seconds, proc_cpu(broker_pid) - cpu0)
    cpu0 = proc_cpu(broker_pid)
    seconds = await produce_batches(bootstrap, topic, values[:n_batch])
    out["produce_batch"] = measured(n_batch, seconds, proc_cpu(broker_pid) - cpu0)
    cpu0 = proc_cpu(broker_pid)
    got, seconds = await _consume_all(bootstrap, topic, 2 * n_send + n_batch + 2)
    out["consume"] = measured(got, seconds, proc_cpu(broker_pid) - cpu0)
    await delete_topics(bootstrap, [topic, warm])
    return out


# -- 2. pipeline rates ---------------------------------------------------------------------


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
    stack: Any,
    n: int,
    demand: int,
    batch: int,
    timeout: float,
    headroom: float = 1.0,
    quiet_s: float = 0.0,
    before_produce: Callable[[], Any] | None = None,
    seed_supply: int = 0,
) -> dict[str, Any]:
    """(b) n eligible check-ins and demand for all of them (`headroom` x n in all):
    assignments/s on the topic. With `quiet_s`, stops once no assignment came for that
    long (a leased partition may pass over a check-in, so fewer than n may come);
    `before_produce()` is awaited once the jobs are open. With `seed_supply`, that many
    check-ins of the same devices' kind are decided before the jobs register (a plan
    made before any of its devices was seen has no supply for them until the next plan
    event)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from loadtest.stack import probe_job
    from venn import events as ev
    from venn.broker import topics

    tok = uuid.uuid4().hex[:6]
    attr = f"bench_{tok}"
    count = math.ceil(n * headroom / demand)
    jobs = [probe_job(f"pipe-{tok}-{j}", attr, demand) for j in range(count)]
    if seed_supply:
        seed = [
            (f"seed-{tok}-{i}".encode(), sample_checkin(i, {attr: 2.0}, f"seed-{tok}"))
            for i in range(seed_supply)
        ]
        metric = "venn_scheduler_checkins_total"
        base = await asyncio.to_thread(stack.scheduler_metric, metric, None)
        await produce_batches(stack.bootstrap, topics.CHECKINS, as_messages(seed, batch))
        await wait_metric(stack, metric, None, base + seed_supply, 60)
    await open_jobs(stack, jobs)
    if before_produce is not None:
        await before_produce()
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
    cpu0 = schedulers_cpu(stack)
    start = time.perf_counter()
    produce_s = await produce_batches(stack.bootstrap, topics.CHECKINS, messages)
    assigned = 0
    last = start
    deadline = start + timeout
    try:
        while assigned < n and time.perf_counter() < deadline:
            if quiet_s and time.perf_counter() - last > quiet_s:
                break
            for records in (await consumer.getmany(timeout_ms=200, max_records=10000)).values():
                for m in records:
                    for a in ev.assignments_of(ev.decode(m.value, allowed)):
                        if a.job_id in mine:
                            assigned += 1
                            last = time.perf_counter()
    finally:
        await consumer.stop()
    cpu = schedulers_cpu(stack) - cpu0
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
        "scheduler_cpu_us_per_assignment": round(cpu / max(assigned, 1) * 1e6, 1),
        "scheduler_cpu_us_per_checkin": round(cpu / n * 1e6, 1),
        "completed": assigned >= n,
    }


async def pipeline_rates(
    stack: Any,
    n: int,
    n_batched: int,
    demand: int,
    timeout: float,
    repeats: int = 1,
    between: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Decisions and assignments, with one check-in per message (the baseline) and with
    CheckinBatch messages of BATCH check-ins (what the gateway and the fleet send); each
    measure `repeats` times (awaiting `between()` before each), the run with the median
    rate kept, every rate listed."""
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for _ in range(repeats):
        for label, count, batch in (("single", n, 1), ("batched", n_batched, BATCH)):
            if between is not None:
                await between()
            d = await decision_rate(stack, count, batch, timeout)
            a = await assignment_rate(stack, count, demand, batch, timeout)
            runs.setdefault((label, "decisions"), []).append(d)
            runs.setdefault((label, "assignments"), []).append(a)
            print(f"  {label}: decisions {d['rate']}/s ({d['scheduler_cpu_us_per_checkin']} "
                  f"µs), assignments {a['rate']}/s ({a['scheduler_cpu_us_per_assignment']} "
                  "µs)", flush=True)  # fmt: skip
    out: dict[str, Any] = {}
    for (label, part), results in runs.items():
        ranked = sorted(results, key=lambda r: r["rate"] or 0)
        out.setdefault(label, {})[part] = {
            **ranked[len(ranked) // 2],
            "rate_repeats": [r["rate"] for r in results],
        }
    return out


async def assignment_latency(
    stack: Any, rate: float, seconds: float, demand: int, broker_pid: int | None
) -> dict[str, Any]:
    """(c) Single eligible check-ins produced at fixed times (open loop, `rate` per second):
    the time from each produce call to its assignment seen on venn.assignments by a side
    consumer in this process (5 ms fetch wait, so the probe's own poll adds little on
    either broker)."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    from loadtest.stack import probe_job
    from venn import events as ev
    from venn.broker import topics

    n = max(1, int(rate * seconds))
    tok = uuid.uuid4().hex[:6]
    attr = f"lat_{tok}"
    jobs = [probe_job(f"lat-{tok}-{j}", attr, demand) for j in range(math.ceil(n / demand))]
    await open_jobs(stack, jobs)
    mine = {j.job_id for j in jobs}
    consumer = AIOKafkaConsumer(
        bootstrap_servers=stack.bootstrap, group_id=None, fetch_max_wait_ms=5
    )
    producer = AIOKafkaProducer(bootstrap_servers=stack.bootstrap, acks=1, linger_ms=0)
    await consumer.start()
    await producer.start()
    tps = [TopicPartition(topics.ASSIGNMENTS, p) for p in range(stack.config.partitions)]
    consumer.assign(tps)
    await consumer.seek_to_end(*tps)
    for tp in tps:
        await consumer.position(tp)
    values = [
        (f"lat-{tok}-dev-{i:09d}".encode(), sample_checkin(i, {attr: 2.0}, f"lat-{tok}"))
        for i in range(n)
    ]
    await producer.partitions_for(topics.CHECKINS)
    sent: dict[str, float] = {}
    seen: dict[str, float] = {}
    allowed = ev.ALLOWED_ON[topics.ASSIGNMENTS]
    sending = True

    async def watch() -> None:
        while sending or len(seen) < n:
            for records in (await consumer.getmany(timeout_ms=50, max_records=5000)).values():
                now = time.perf_counter()
                for m in records:
                    for a in ev.assignments_of(ev.decode(m.value, allowed)):
                        if a.job_id in mine:
                            seen.setdefault(a.device_id, now)

    sched = stack.scheduler.pid if stack.scheduler else None
    cpu0 = {"scheduler": proc_cpu(sched), "broker": proc_cpu(broker_pid)}
    watcher = asyncio.ensure_future(watch())
    try:
        start = time.perf_counter() + 0.05
        for i, (key, value) in enumerate(values):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent[key.decode()] = time.perf_counter()
            await producer.send(topics.CHECKINS, value, key=key)
        await producer.flush()
        sending = False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(watcher), 10.0)
    finally:
        sending = False
        watcher.cancel()
        with contextlib.suppress(BaseException):
            await watcher
        await producer.stop()
        await consumer.stop()
    cpu = {
        "scheduler": proc_cpu(sched) - cpu0["scheduler"],
        "broker": proc_cpu(broker_pid) - cpu0["broker"],
    }
    await stack.publish_jobs(jobs, finish=True)
    latencies = sorted(seen[d] - sent[d] for d in seen if d in sent)
    return {
        "rate": rate,
        "checkins": n,
        "assigned": len(latencies),
        "p50_ms": round(percentile(latencies, 50) * 1000, 1),
        "p95_ms": round(percentile(latencies, 95) * 1000, 1),
        "p99_ms": round(percentile(latencies, 99) * 1000, 1),
        "max_ms": round(latencies[-1] * 1000, 1) if latencies else math.nan,
        "cpu_us_per_checkin": {k: round(v / n * 1e6) for k, v in cpu.items()},
    }


# -- 3. gateway sweep ----------------------------------------------------------------------


# -- profiles ------------------------------------------------------------------------------


# -- report --------------------------------------------------------------------------------


def _fmt(value: Any, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float | int):
        return f"{value:,.0f}{unit}" if abs(value) >= 100 else f"{value:,.1f}{unit}"
    return str(value)


def _ratio(a: Any, b: Any) -> str:
    if not isinstance(a, int | float) or not isinstance(b, int | float) or not b:
        return ""
    if math.isnan(a) or math.isnan(b):
        return ""
    return f"{a / b:.2f}x"


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def _profile_text(tuning: str) -> str:
    from venn.broker.tuning import PROFILES

    t = PROFILES[tuning]
    batch = "one record" if t.faust_producer_max_batch_size <= 1 else (
        f"up to {t.faust_producer_max_batch_size:,} B")  # fmt: skip
    return (
        f"acks={t.acks}, Faust producer batches of {batch}, fetch wait {t.fetch_wait_ms} ms, "
        f"group session/rebalance/heartbeat {t.session_timeout_ms / 1000:g}/"
        f"{t.rebalance_timeout_ms / 1000:g}/{t.heartbeat_interval_ms / 1000:g} s"
    )


def report_markdown(r: dict[str, Any]) -> str:
    meta = r["meta"]
    names = meta["broker_names"]
    lines = [
        f"Run {meta['date']} on {meta['machine']} ({meta['cpus']} cores, load average "
        f"{meta['loadavg_start']} at start, {meta['loadavg_end']} at the end; other processes "
        f"used {meta['other_processes_cpu_cores']} cores on average): `{meta['command']}` "
        f"({meta['seconds']:.0f} s), commit {meta['commit']}.",
    ]
    for rerun in meta.get("reruns", []):
        lines.append(
            f"Rerun {rerun['date']} (load average {rerun['loadavg_start']} -> "
            f"{rerun['loadavg_end']}): {', '.join(rerun['phases'])}."
        )
    lines += [
        "",
        "Each phase: seconds, load average at its start -> end, cores other processes used "
        f"meanwhile (of {meta['cpus']}): "
        + "; ".join(
            f"{name} {p['seconds']:.0f} s, {p['loadavg_start']} -> {p['loadavg_end']}, "
            f"{p.get('other_processes_cpu_cores', 'n/a')}"
            for name, p in meta["phases"].items()
        )
        + ".",
    ]
    raw = r.get("raw", {})
    if raw:
        kinds = [k for k in ("kafka", "tansu") if k in raw]
        both = len(kinds) == 2
        lines += [
            "",
            f"**Raw broker** (aiokafka in the bench process, {next(iter(raw.values()))['message_bytes']} B "  # noqa: E501
            "check-ins, 4 partitions, after a warm-up pass; the broker's CPU per message in "
            "brackets):",
            "",
            "| Measure | "
            + " | ".join(names[k] for k in kinds)
            + (" | Kafka / Tansu |" if both else " |"),
            "|---" * (len(kinds) + 1 + both) + "|",
        ]
        for key, label in (
            ("produce_send", "Produce, `send()`, acks=1"),
            ("produce_send_acks_all", "Produce, `send()`, acks=all"),
            ("produce_batch", "Produce, `create_batch()/send_batch()`, acks=1"),
            ("consume", "Consume, `getmany(max_records=10000)`"),
        ):
            cells = [
                f"{_fmt(raw[k][key]['rate'])} msg/s ({raw[k][key]['broker_cpu_us_per_msg']} µs)"
                for k in kinds
            ]
            ratio = [_ratio(raw["kafka"][key]["rate"], raw["tansu"][key]["rate"])] if both else []
            lines.append(f"| {label} | " + " | ".join(cells + ratio) + " |")
    setups = r.get("setups", {})
    if setups:
        keys = [k for k in SETUP_KEYS if k in setups]
        on, off, tansu = (setups.get(k) for k in SETUP_KEYS[:3])
        lines += [
            "",
            "**Pipeline** (one scheduler worker and one gateway; each column a fresh broker "
            "and stack; µs = scheduler CPU per check-in; rates are the median of the "
            "repeats, their range after the semicolon). Client profiles "
            "(venn/broker/tuning.py): *Kafka*: "
            + _profile_text("kafka")
            + "; *Tansu*: "
            + _profile_text("tansu")
            + ".",
            "",
            "| Measure | "
            + " | ".join(setups[k]["label"] for k in keys)
            + " | on / off | Kafka on / Tansu |",
            "|---" * (len(keys) + 3) + "|",
        ]

        def row(label: str, value: Callable[[dict[str, Any]], Any],
                cell: Callable[[dict[str, Any]], str], ratios: bool = True) -> None:  # fmt: skip
            vals = {k: value(setups[k]) for k in keys}
            cells = [cell(setups[k]) if vals[k] is not None else "n/a" for k in keys]
            r1 = _ratio(value(on), value(off)) if ratios and on and off else ""
            r2 = _ratio(value(on), value(tansu)) if ratios and on and tansu else ""
            lines.append(f"| {label} | " + " | ".join([*cells, r1, r2]) + " |")

        row("Stack start, to the first assignment through the gateway", lambda s: s["ready_s"],
            lambda s: f"{s['ready_s']:.1f} s")  # fmt: skip
        row("Idle CPU, broker / scheduler / gateway (cores)",
            lambda s: sum(s["idle_cores"].values()),
            lambda s: " / ".join(f"{v:.2f}" for v in s["idle_cores"].values()))  # fmt: skip
        for label, how in (("single", "one check-in per message"),
                           ("batched", f"CheckinBatch of {BATCH}")):  # fmt: skip
            for part, what, cpu in (
                ("decisions", "no job admits them, decided", "scheduler_cpu_us_per_checkin"),
                ("assignments", "check-in -> assignment", "scheduler_cpu_us_per_assignment"),
            ):

                def cell(s: dict[str, Any], label: str = label, part: str = part,
                         cpu: str = cpu) -> str:  # fmt: skip
                    d = s["pipeline"][label][part]
                    done = "" if d["completed"] else " (incomplete)"
                    rates = [r for r in d.get("rate_repeats", []) if r]
                    spread = f"; {_fmt(min(rates))}-{_fmt(max(rates))}" if len(rates) > 1 else ""
                    return f"{_fmt(d['rate'])} /s ({d[cpu]} µs{spread}){done}"

                def rate(s: dict[str, Any], label: str = label, part: str = part) -> Any:
                    return s["pipeline"][label][part]["rate"]

                n = next(iter(setups.values()))["pipeline"][label][part]["checkins"]
                row(f"Pipeline, {how}: {n:,} check-ins, {what}", rate, cell)
        row("Pipeline (batched assignments) / raw consume of the same broker (goal >= 50%)",
            lambda s: s.get("pipeline_over_consume_pct"),
            lambda s: _fmt(s.get("pipeline_over_consume_pct"), "%"), ratios=False)  # fmt: skip
        lat_rate = _fmt(next(iter(setups.values()))["latency"]["rate"])
        row(
            f"Check-in produced -> assignment seen, {lat_rate}/s single check-ins: p50",
            lambda s: s["latency"]["p50_ms"],
            lambda s: f"{_fmt(s['latency']['p50_ms'])} ms",
        )
        row(
            "... p99 / max",
            lambda s: s["latency"]["p99_ms"],
            lambda s: f"{_fmt(s['latency']['p99_ms'])} / {_fmt(s['latency']['max_ms'])} ms",
        )
        row("... scheduler / broker CPU per check-in",
            lambda s: s["latency"]["cpu_us_per_checkin"]["broker"],
            lambda s: " / ".join(f"{v:,} µs" for v in s["latency"]["cpu_us_per_checkin"].values()),
            ratios=False)  # fmt: skip
        g = "gateway_assigned"
        row(
            f"Gateway, answered with an assignment at {lat_rate}/s: p50",
            lambda s: s[g]["p50_ms"],
            lambda s: f"{_fmt(s[g]['p50_ms'])} ms",
        )
        row("... p99 (median of the repeats by p99)",
            lambda s: s[g]["p99_ms"],
            lambda s: f"{_fmt(s[g]['p99_ms'])} ms ("
            + ", ".join(_fmt(v) for v in s[g]["p99_ms_repeats"]) + ")")  # fmt: skip
        row("... gateway / scheduler / broker CPU per request",
            lambda s: s[g]["cpu_us_per_request"]["broker"],
            lambda s: " / ".join(f"{v:,} µs" for v in s[g]["cpu_us_per_request"].values()),
            ratios=False)  # fmt: skip
    gateway = dict(r.get("gateway", {}))
    order = [f"{k}_{mode}" for k, mode in SWEEPS]
    gateway = {
        k: gateway[k]
        for k in sorted(
            gateway, key=lambda k: (k not in order, order.index(k) if k in order else 0)
        )
    }
    if gateway:
        lines += [
            "",
            "**Gateway sweeps** (open-loop generator in its own process; latency from the "
            "intended send time):",
            "",
            "| Sweep | Saturation (highest good step) | p99 at half of it (goal < 50 ms) |",
            "|---|---|---|",
        ]
        for sweep in gateway.values():
            half = sweep["half_saturation"] or {}
            repeats = ", ".join(_fmt(p) for p in half.get("p99_ms_repeats", []))
            last = sweep["steps"][-1] if sweep["steps"] else None
            sat = _fmt(sweep["saturation_rps"]) + " /s"
            if last is not None and not last["saturated"]:
                sat += " (not reached: the last step passed)"
            lines.append(
                f"| {sweep['label']} | {sat} | {_fmt(half.get('p99_ms'), ' ms')} at "
                f"{_fmt(half.get('target_rps'))}/s (repeats {repeats}) |"
            )
        lines += [
            "",
            "Gateway steps (`good` = answers of the expected kind; CPU µs per answered request):",
            "",
            "| Sweep | Target /s | Good /s | p50 ms | p95 ms | p99 ms | Max ms | HTTP statuses "
            "| Gateway µs | Scheduler µs | Broker µs |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for sweep in gateway.values():
            rows = [*sweep["steps"]] + (
                [sweep["half_saturation"]] if sweep["half_saturation"] else []
            )
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
                    f"| {sweep['label']}{tag} | {_fmt(s['target_rps'])} | {_fmt(s['good_rps'])} | "
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


# -- main ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    raw_send: int
    raw_batch: int
    pipeline_n: int
    pipeline_batched_n: int
    pipeline_repeats: int
    latency_rate: float
    latency_s: float
    gateway_repeats: int
    """Repeats of the gateway's assigned path at `latency_rate` on each setup."""
    instant_rates: list[float]
    assigned_rates: list[float]
    step_s: float
    half_repeats: int
    profile: bool


FULL = Plan(50_000, 200_000, 5_000, 50_000, 3, 200, 15.0, 3,
            [200, 400, 800, 1200, 1600, 2400],
            [50, 100, 200, 400, 600, 800, 1200, 1600], 5.0, 3, True)  # fmt: skip
QUICK = Plan(20_000, 50_000, 2_000, 20_000, 1, 200, 5.0, 1, [200, 800, 1600], [50, 200, 400],
             3.0, 1, False)  # fmt: skip

BATCH = 128
"""Check-ins per CheckinBatch, as the gateway (VENN_GATEWAY_BATCH_MAX) and the fleet send."""


SETUP_KEYS = tuple(s.key for s in SETUPS)
"""The first three are the comparison (on, off, Tansu); the fourth changes only the fetch
wait of the Kafka profile, to tell its share of the difference from the rest."""
SWEEPS = (("kafka", "instant"), ("kafka", "assigned"), ("tansu", "instant"), ("tansu", "assigned"))
"""Gateway sweeps: both paths on each broker, each with the broker kind's own profile."""


def broker_name(kind: str) -> str:
    from devtools.kafka import kafka_version
    from devtools.tansu import VERSION

    return f"Apache Kafka {kafka_version()}" if kind == "kafka" else f"Tansu {VERSION}"


async def raw_phase(kind: str, plan: Plan, workdir: Path) -> dict[str, Any]:
    from devtools.brokers import local_broker

    # A broker of its own: Tansu keeps every message in memory, and the raw messages
    # would cost a stack's broker CPU for the rest of the run.
    broker = local_broker(kind, workdir / f"raw-{kind}").start()
    try:
        return await raw_rates(broker.bootstrap, plan.raw_send, plan.raw_batch, broker.pids()[0])
    finally:
        broker.stop()


async def setup_phase(setup: Setup, plan: Plan, workdir: Path) -> dict[str, Any]:
    """Pipeline rates, check-in -> assignment latency and the gateway's assigned path at a
    modest rate, on one fresh broker and stack."""
    from venn.broker.tuning import PROFILES

    started = time.monotonic()
    fresh = stack_factory(setup, f"setup-{setup.key}", workdir, **setup.stack_options())
    async with fresh() as (stack, broker_pid):
        out: dict[str, Any] = {
            "label": setup.label,
            "broker": setup.broker,
            "tuning": setup.profile,
            "profile": dataclasses.asdict(PROFILES[setup.profile]),
            "ready_s": round(time.monotonic() - started, 1),
        }
        await settle(stack, broker_pid)
        out["idle_cores"] = await idle_cpu(stack, broker_pid)
        print(f"  ready in {out['ready_s']} s; idle cores {out['idle_cores']}", flush=True)
        busy = out["idle_cores"]["broker"] + 0.25
        await settle(stack, broker_pid, busy)
        out["pipeline"] = await pipeline_rates(
            stack, plan.pipeline_n, plan.pipeline_batched_n, DEMAND, 300,
            plan.pipeline_repeats, lambda: settle(stack, broker_pid, busy),
        )  # fmt: skip
        await settle(stack, broker_pid, busy)
        out["latency"] = await assignment_latency(
            stack, plan.latency_rate, plan.latency_s, DEMAND, broker_pid
        )
        print(f"  latency: {out['latency']}", flush=True)
        runs = []
        for _ in range(plan.gateway_repeats):
            await settle(stack, broker_pid, busy)
            runs.append(
                await gateway_step(
                    stack, "assigned", plan.latency_rate, plan.step_s, DEMAND, broker_pid
                )
            )
        runs.sort(key=lambda s: s.result["p99_ms"])
        out["gateway_assigned"] = {
            **runs[len(runs) // 2].row(),
            "p99_ms_repeats": [s.result["p99_ms"] for s in runs],
        }
        print(f"  gateway assigned at {plan.latency_rate}/s: p50 "
              f"{out['gateway_assigned']['p50_ms']} ms, p99 repeats "
              f"{out['gateway_assigned']['p99_ms_repeats']} ms", flush=True)  # fmt: skip
    return out


async def sweep_phase(setup: Setup, mode: str, plan: Plan, workdir: Path) -> dict[str, Any]:
    name = f"sweep-{setup.key}-{mode}"
    fresh = stack_factory(setup, name, workdir)
    rates = plan.instant_rates if mode == "instant" else plan.assigned_rates
    async with fresh() as (stack, broker_pid):
        await settle(stack, broker_pid)
        idle = await idle_cpu(stack, broker_pid, 2.0)
        # Tansu's CPU per request grows with what it holds (every message, in memory):
        # each half-saturation repeat gets a fresh broker and stack there. Kafka keeps its
        # log on disk and its cost does not grow, so its repeats reuse the sweep's stack.
        sweep = await gateway_sweep(
            stack, mode, rates, plan.step_s, DEMAND, broker_pid, plan.half_repeats,
            broker_idle_cores=idle["broker"] + 0.25,
            fresh_stack=fresh if setup.broker == "tansu" else None,
        )  # fmt: skip
    label = f"{'Kafka' if setup.broker == 'kafka' else 'Tansu'} {mode}"
    return {"label": label, "broker": setup.broker, "tuning": setup.profile, **sweep}


async def profile_phase(setup: Setup, plan: Plan, workdir: Path, sat: float) -> dict[str, Any]:
    prof_dir = workdir / "profiles"
    fresh = stack_factory(setup, "profiled", workdir, profile_dir=prof_dir)
    async with fresh() as (stack, broker_pid):
        await settle(stack, broker_pid)
        await gateway_step(stack, "instant", round(sat * 0.8), plan.step_s, DEMAND, None)
        await assignment_rate(stack, plan.pipeline_batched_n // 2, DEMAND, BATCH, 300)
    name = broker_name(setup.broker)
    return {
        f"gateway on {name} (instant answers at 80% of saturation, then idle during a "
        "pipeline run)": profile_summary(prof_dir / "gateway.pyisession"),
        f"scheduler on {name} (batched check-ins -> assignments)": profile_summary(
            prof_dir / "scheduler.pyisession"
        ),
    }


def phase_names(brokers: list[str], plan: Plan) -> list[str]:
    """Every phase of a run on `brokers`, in order: raw:<kind>, setup:<key>,
    sweep:<key>:<mode>, profiles."""
    names = [f"raw:{k}" for k in brokers]
    names += [f"setup:{s.key}" for s in SETUPS if s.broker in brokers]
    names += [f"sweep:{k}:{mode}" for k, mode in SWEEPS if k in brokers]
    if plan.profile:
        names.append("profiles")
    return names


async def run_phases(names: list[str], plan: Plan, workdir: Path, result: dict[str, Any]) -> None:
    """Run the named phases, storing each one's figures in `result` (replacing what a
    previous run stored under the same name)."""
    by_key = {s.key: s for s in SETUPS}
    for name in names:
        print(name, flush=True)
        t0, load0 = time.monotonic(), round(os.getloadavg()[0], 2)
        busy0, own0 = machine_busy_s(), own_cpu_s()
        kind, _, rest = name.partition(":")
        if kind == "raw":
            result.setdefault("raw", {})[rest] = await raw_phase(rest, plan, workdir)
            print(f"  {result['raw'][rest]}", flush=True)
        elif kind == "setup":
            result.setdefault("setups", {})[rest] = await setup_phase(by_key[rest], plan, workdir)
        elif kind == "sweep":
            key, _, mode = rest.partition(":")
            result.setdefault("gateway", {})[f"{key}_{mode}"] = await sweep_phase(
                by_key[key], mode, plan, workdir
            )
        elif kind == "profiles":
            key = "kafka" if "kafka" in result.get("setups", {}) else "tansu"
            sat = _get(result, "gateway", f"{key}_instant", "saturation_rps") or 400
            result["profiles"] = await profile_phase(by_key[key], plan, workdir, sat)
        else:
            raise ValueError(f"unknown phase {name!r}")
        seconds = time.monotonic() - t0
        # Every child of the phase (broker, stack, load generator) has been waited for by
        # now, so own_cpu_s() includes them: the rest is other tenants' work.
        other = max(0.0, (machine_busy_s() - busy0) - (own_cpu_s() - own0)) / seconds
        result["meta"].setdefault("phases", {})[name] = {
            "seconds": round(seconds, 1),
            "loadavg_start": load0,
            "loadavg_end": round(os.getloadavg()[0], 2),
            "other_processes_cpu_cores": round(other, 2),
        }


def summarise(result: dict[str, Any]) -> None:
    """The goals of issue 5 from the figures in `result`."""
    raw, setups, gateway = (
        result.get("raw", {}),
        result.get("setups", {}),
        result.get("gateway", {}),
    )
    for s in setups.values():
        consume = _get(raw, s["broker"], "consume", "rate")
        assign = _get(s, "pipeline", "batched", "assignments", "rate") or 0
        s["pipeline_over_consume_pct"] = round(assign / consume * 100, 2) if consume else None
    main_key = "kafka" if "kafka" in setups else "tansu"
    pct = _get(setups, main_key, "pipeline_over_consume_pct")
    halves = {k: (v["half_saturation"] or {}).get("p99_ms") for k, v in gateway.items()}
    result["goals"] = {
        "measured_on": main_key,
        "pipeline_over_consume_pct": pct,
        "pipeline_goal_met": pct is not None and pct >= 50,
        "p99_at_half_saturation_ms": halves,
        "p99_goal_met": {k: v is not None and v < 50 for k, v in halves.items()},
        "any_5xx": any(v["any_5xx"] for v in gateway.values()),
        "max_latency_ms": max((v["max_ms"] for v in gateway.values()), default=None),
    }


async def run_bench(
    plan: Plan, command: str, workdir: Path, names: list[str], previous: dict[str, Any] | None
) -> dict[str, Any]:
    started = time.time()
    load0 = round(os.getloadavg()[0], 2)
    busy0, own0 = machine_busy_s(), own_cpu_s()
    if previous is None:
        result: dict[str, Any] = {
            "meta": {
                "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
                "machine": platform.machine() + " " + platform.python_implementation()
                + " " + platform.python_version(),
                "cpus": os.cpu_count(),
                "loadavg_start": load0,
                "command": command,
                "commit": git_commit(),
                "plan": plan.__dict__,
                "broker_names": {k: broker_name(k) for k in ("kafka", "tansu")},
            },
        }  # fmt: skip
    else:
        result = previous
    await run_phases(names, plan, workdir, result)
    seconds = time.time() - started
    other = round(max(0.0, (machine_busy_s() - busy0) - (own_cpu_s() - own0)) / seconds, 2)
    if previous is None:
        result["meta"]["other_processes_cpu_cores"] = other
        result["meta"]["seconds"] = round(seconds, 1)
        result["meta"]["loadavg_end"] = round(os.getloadavg()[0], 2)
    else:
        result["meta"].setdefault("reruns", []).append({
            "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
            "command": command, "phases": names, "seconds": round(seconds, 1),
            "loadavg_start": load0, "loadavg_end": round(os.getloadavg()[0], 2),
            "other_processes_cpu_cores": other, "commit": git_commit(),
        })  # fmt: skip
    summarise(result)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pipeline_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--quick", action="store_true", help="fewer steps, smaller counts")
    p.add_argument("--broker", choices=("both", "kafka", "tansu"), default="both",
                   help="which brokers to measure (default: both, side by side)")  # fmt: skip
    p.add_argument("--rerun", nargs="+", metavar="PHASE",
                   help="rerun these phases of the last run (e.g. setup:kafka "
                   "sweep:kafka:assigned raw:tansu) and merge them into its JSON and table; "
                   "the table notes the rerun")  # fmt: skip
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args(argv)
    preamble("pipeline_bench")
    plan = QUICK if args.quick else FULL
    brokers = ["kafka", "tansu"] if args.broker == "both" else [args.broker]
    command = "python -m bench.pipeline_bench" + (" --quick" if args.quick else "")
    command += f" --broker {args.broker}" if args.broker != "both" else ""
    previous = None
    names = phase_names(brokers, plan)
    if args.rerun:
        previous = json.loads(JSON_OUT.read_text())
        if previous["meta"]["plan"] != plan.__dict__:
            p.error(f"{JSON_OUT.name} was made with another plan (--quick or not)")
        names = args.rerun
        command += " --rerun " + " ".join(names)
    import uvloop

    with tempfile.TemporaryDirectory(prefix="venn-pipeline-bench-") as tmp:
        result = uvloop.run(run_bench(plan, command, Path(tmp), names, previous))
    markdown = report_markdown(result)
    print()
    print(markdown)
    if not args.no_write:
        JSON_OUT.parent.mkdir(parents=True, exist_ok=True)
        JSON_OUT.write_text(json.dumps(result, indent=1) + "\n")
        write_block(DOC, "pipeline", markdown, "Pipeline benchmark: latest run (generated)")
        print(f"\nwrote {JSON_OUT.relative_to(ROOT)} and {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
