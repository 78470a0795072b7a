"""Failover of the scheduler: seconds from SIGKILL of the deciding worker to the first
assignment its successor makes (goal: 5 s), on Apache Kafka.

Each run starts a fresh group of scheduler workers (default 3: one decider, two hot
standbys) on one embedded Kafka broker, opens a round of a large demand and feeds it
eligible check-ins (each from a new device) at a steady rate. Once assignments flow, the
decider is SIGKILLed; the run reports when a standby's `venn_scheduler_deciding` turned 1
(polled every 0.1 s) and when the first assignment decided after the kill was made (its
decision time) and seen on venn.assignments. Workers run with the broker's profile
(`venn/broker/tuning.py`: a 3 s session on Kafka), so the dead decider's session expiry is
most of the figure.

Writes docs/results/bench/failover.json and the table of docs/results/failover.md (between
its markers).

    python bench/failover_bench.py [--runs 5] [--workers 3] [--rate 20] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.scheduler.process import kill_worker, start_worker, stop_worker  # noqa: E402
from venn import events as ev  # noqa: E402
from venn.broker import topics  # noqa: E402
from venn.broker.local import local_broker  # noqa: E402
from venn.broker.process import free_port  # noqa: E402
from venn.report.provenance import git_commit  # noqa: E402
from venn.report.results_page import write_block  # noqa: E402
from venn.settings import Settings  # noqa: E402
from venn.stack.processes import DECIDING, settled_decider, worker_metric  # noqa: E402

JSON_OUT = ROOT / "docs" / "results" / "bench" / "failover.json"
DOC = ROOT / "docs" / "results" / "failover.md"
GOAL_S = 5.0
PARTITIONS = 4
WARM_ASSIGNMENTS = 20
"""Assignments the decider makes before it is killed."""
TIMEOUT_S = 120.0


class Assignments:
    """Every assignment published on venn.assignments from now on, and when it was seen."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = AIOKafkaConsumer(
            topics.ASSIGNMENTS, bootstrap_servers=bootstrap, auto_offset_reset="latest"
        )
        self.seen: dict[str, tuple[ev.Assignment, float]] = {}
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        while not self.consumer.assignment():  # subscribed: positions at the end from here
            await asyncio.sleep(0.05)
        for tp in self.consumer.assignment():
            await self.consumer.position(tp)
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        allowed = ev.ALLOWED_ON[topics.ASSIGNMENTS]
        async for msg in self.consumer:
            now = time.time()
            for a in ev.assignments_of(ev.decode(msg.value, allowed)):
                self.seen.setdefault(a.event_id, (a, now))

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.consumer.stop()


async def feed(producer: AIOKafkaProducer, attr: str, rate: float, stop: asyncio.Event) -> None:
    """Eligible check-ins, each from a new device, at ``rate`` per second."""
    n = 0
    while not stop.is_set():
        checkin = ev.DeviceCheckin(
            event_id=f"ci-{uuid.uuid4().hex}",
            time=time.time(),
            device_id=f"{attr}-dev{n}",
            attrs={attr: 3.0},
            speed_ms_per_sample=60.0,
            bandwidth_kbps=12000.0,
        )
        n += 1
        await producer.send(topics.CHECKINS, ev.encode(checkin), key=ev.key_of(checkin))
        await asyncio.sleep(1.0 / rate)


async def deciding(ports: dict[str, int]) -> list[str]:
    states = {n: await asyncio.to_thread(worker_metric, p, DECIDING) for n, p in ports.items()}
    return [n for n, s in states.items() if s == 1.0]


async def one_run(bootstrap: str, run_dir: Path, workers: int, rate: float) -> dict[str, Any]:
    app_id = f"venn-failover-{uuid.uuid4().hex[:8]}"
    settings = Settings(broker=bootstrap, app_id=app_id, topic_partitions=PARTITIONS)
    await topics.prepare_topics(settings)
    env = {
        "VENN_BROKER": bootstrap,
        "VENN_BROKER_KIND": "kafka",
        "VENN_APP_ID": app_id,
        "VENN_TOPIC_PARTITIONS": str(PARTITIONS),
        "VENN_RUN_DIR": str(run_dir),
        "VENN_POLICY": "venn",
    }
    ports = {f"w{i}": free_port() for i in range(workers)}
    procs = {}
    for name, port in ports.items():
        with open(run_dir / f"{app_id}-{name}.log", "ab") as log:
            procs[name] = start_worker({**env, "VENN_SCHEDULER_WEB_PORT": str(port)}, log)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    seen = Assignments(bootstrap)
    await seen.start()
    stop = asyncio.Event()
    feeder: asyncio.Task[None] | None = None
    loop = asyncio.get_running_loop()
    try:
        deadline = loop.time() + TIMEOUT_S
        while True:  # every worker answers and exactly one decides
            decider = await asyncio.to_thread(settled_decider, ports)
            if decider is not None:
                break
            if loop.time() > deadline:
                raise RuntimeError(f"no settled group of {workers} in {TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.5)
        attr = f"fo_{uuid.uuid4().hex[:8]}"
        job_id = f"failover-{attr}"
        now = time.time()
        for event in (
            ev.JobRegistered(
                event_id=f"reg-{job_id}", time=now, job_id=job_id, requirement={attr: 1.0},
                demand=100_000, rounds=1, deadline_s=3600, workload_s=5,
            ),
            ev.RoundRequested(
                event_id=f"rr-{job_id}", time=now, job_id=job_id, round_index=0, demand=100_000
            ),
        ):  # fmt: skip
            await producer.send_and_wait(topics.JOBS, ev.encode(event), key=ev.key_of(event))
        feeder = asyncio.create_task(feed(producer, attr, rate, stop))
        while len(seen.seen) < WARM_ASSIGNMENTS:
            if loop.time() > deadline + TIMEOUT_S:
                raise RuntimeError("the decider does not assign")
            await asyncio.sleep(0.1)
        killed_at = time.time()
        kill_worker(procs[decider])
        rest = {n: p for n, p in ports.items() if n != decider}
        promoted_s: float | None = None
        first: tuple[ev.Assignment, float] | None = None
        while first is None or promoted_s is None:
            if time.time() - killed_at > TIMEOUT_S:
                raise RuntimeError("no assignment after the kill")
            if promoted_s is None and await deciding(rest):
                promoted_s = time.time() - killed_at
            after = [(a, t) for a, t in seen.seen.values() if a.time > killed_at]
            if after and first is None:
                first = min(after, key=lambda at: at[0].time)
            await asyncio.sleep(0.1)
        return {
            "decided_s": round(first[0].time - killed_at, 2),
            "seen_s": round(first[1] - killed_at, 2),
            "deciding_metric_s": round(promoted_s, 2),
        }
    finally:
        stop.set()
        if feeder is not None:
            await asyncio.gather(feeder, return_exceptions=True)
        await seen.stop()
        await producer.stop()
        for proc in procs.values():
            await asyncio.to_thread(stop_worker, proc, 10.0)


async def measure(runs: int, workers: int, rate: float, run_dir: Path) -> list[dict[str, Any]]:
    broker = local_broker("kafka", run_dir / "broker").start()
    try:
        out = []
        for i in range(runs):
            result = await one_run(broker.bootstrap, run_dir, workers, rate)
            print(f"run {i + 1}: {result}", flush=True)
            out.append(result)
        return out
    finally:
        broker.stop()


def markdown(meta: dict[str, Any], results: list[dict[str, Any]]) -> str:
    decided = [r["decided_s"] for r in results]
    lines = [
        f"Run {meta['date']} ({meta['cores']} cores): `{meta['command']}` "
        f"({meta['seconds']:.0f} s), commit {meta['commit']}. {meta['workers']} workers "
        f"(one decider, {meta['workers'] - 1} standbys), {meta['rate']:g} eligible "
        f"check-ins/s, Apache Kafka {meta['partitions']} partitions, scheduler session "
        f"{meta['session_s']:g} s.",
        "",
        "| run | SIGKILL -> first assignment decided, s | -> seen on venn.assignments, s "
        "| -> successor reports deciding, s |",
        "| --- | --- | --- | --- |",
    ]
    for i, r in enumerate(results, 1):
        lines.append(
            f"| {i} | **{r['decided_s']:.2f}** | {r['seen_s']:.2f} | {r['deciding_metric_s']:.2f} |"
        )
    lines += [
        "",
        f"Median {statistics.median(decided):.2f} s, worst {max(decided):.2f} s; goal "
        f"{GOAL_S:g} s: {'met' if max(decided) <= GOAL_S else 'not met'} in "
        f"{sum(d <= GOAL_S for d in decided)} of {len(decided)} runs.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/failover_bench.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--rate", type=float, default=20.0, help="eligible check-ins per second")
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args(argv)
    if args.workers < 2:
        p.error("--workers: at least 2 (a decider and a standby)")
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="venn-failover-") as tmp:
        results = asyncio.run(measure(args.runs, args.workers, args.rate, Path(tmp)))
    tuning = Settings(broker_kind="kafka")
    command = "python bench/failover_bench.py" + "".join(
        f" --{k} {v:g}" if isinstance(v, float) else f" --{k} {v}"
        for k, v, d in (
            ("runs", args.runs, 5),
            ("workers", args.workers, 3),
            ("rate", args.rate, 20.0),
        )
        if v != d
    )
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
        "machine": f"{platform.machine()} {platform.python_implementation()} "
        f"{platform.python_version()}",
        "cores": os.cpu_count(),
        "command": command,
        "commit": git_commit(),
        "workers": args.workers,
        "rate": args.rate,
        "partitions": PARTITIONS,
        "session_s": tuning.scheduler_session_timeout / 1000,
        "goal_s": GOAL_S,
        "seconds": round(time.time() - started, 1),
    }
    text = markdown(meta, results)
    print(text)
    if not args.no_write:
        JSON_OUT.write_text(json.dumps({"meta": meta, "runs": results}, indent=1) + "\n")
        write_block(DOC, "failover", text, "Failover of the deciding scheduler worker")
        print(f"\nwrote {JSON_OUT.relative_to(ROOT)} and {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
