"""Failover of the scheduler: seconds from SIGKILL of the deciding worker to the first
assignment its successor makes (goal: 5 s), on Apache Kafka.

Each run starts a fresh group of scheduler workers (default 3: one decider, two hot
standbys) on one embedded Kafka broker and opens two jobs of the same requirement: *live*,
whose coordinator keeps sending heartbeats, with a round of `DEMAND` devices, and
*silent*, which sends none and is expired by the decider after `JOB_TIMEOUT_S`. Eligible
check-ins (each from a new device) come at a steady rate. Once *silent* has expired and
the decider has made `WARM_ASSIGNMENTS`, it is SIGKILLed; the run reports when a standby's
`venn_scheduler_deciding` turned 1 (polled every 0.1 s) and when the first assignment
decided after the kill was made (its decision time) and seen on venn.assignments. Workers
run with the broker's profile (`venn/broker/tuning.py`: a 3 s session on Kafka), so the
dead decider's session expiry is most of the figure.

Each run also checks the invariants of design.md on what venn.assignments and venn.jobs
carried: no device holds two assignments, the round gets no more than its demand, and no
job gets an assignment after its expiry was decided (the predecessor's decision; the
successor restores its tombstone).

Writes docs/results/bench/failover.json and the table of docs/results/failover.md (between
its markers).

    python -m bench.failover_bench [--runs 5] [--workers 3] [--rate 20] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from bench.common import git_commit, preamble, write_block
from devtools.brokers import local_broker
from devtools.stack.local import Stack
from devtools.stack.processes import DECIDING, settled_decider, worker_metric
from venn import events as ev
from venn.broker import topics
from venn.settings import Settings

ROOT = Path(__file__).resolve().parents[1]

JSON_OUT = ROOT / "docs" / "results" / "bench" / "failover.json"
DOC = ROOT / "docs" / "results" / "failover.md"
GOAL_S = 5.0
PARTITIONS = 4
WARM_ASSIGNMENTS = 20
"""Assignments the decider makes before it is killed (at least)."""
DEMAND = 200
"""The live job's round: more than the decider makes before the kill, filled after it."""
JOB_TIMEOUT_S = 4.0
TIMEOUT_S = 120.0


class Assignments:
    """Every assignment published on venn.assignments from now on, and when it was seen."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = AIOKafkaConsumer(
            topics.ASSIGNMENTS, bootstrap_servers=bootstrap, auto_offset_reset="latest"
        )
        self.seen: dict[str, tuple[ev.Assignment, float]] = {}
        self.expired: dict[str, float] = {}
        """Job -> the decision time of its first JobExpired on venn.jobs."""
        self.jobs = AIOKafkaConsumer(
            topics.JOBS, bootstrap_servers=bootstrap, auto_offset_reset="latest"
        )
        self.task: asyncio.Task[None] | None = None
        self.jobs_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        for consumer in (self.consumer, self.jobs):
            await consumer.start()
            while not consumer.assignment():  # subscribed: positions at the end from here
                await asyncio.sleep(0.05)
            for tp in consumer.assignment():
                await consumer.position(tp)
        self.task = asyncio.create_task(self._read())
        self.jobs_task = asyncio.create_task(self._read_jobs())

    async def _read_jobs(self) -> None:
        async for msg in self.jobs:
            try:
                event = ev.decode(msg.value, ev.ALLOWED_ON[topics.JOBS])
            except ev.InvalidEvent:
                continue
            if isinstance(event, ev.JobExpired):
                self.expired.setdefault(event.job_id, event.time)

    def violations(self) -> dict[str, int]:
        """Counts of what the invariants forbid, over every assignment seen."""
        made = [a for a, _ in self.seen.values()]
        devices = [a.device_id for a in made]
        per_round: dict[tuple[str, int], int] = {}
        for a in made:
            per_round[(a.job_id, a.round_index)] = per_round.get((a.job_id, a.round_index), 0) + 1
        return {
            "devices_twice": len(devices) - len(set(devices)),
            "over_demand": sum(max(0, n - DEMAND) for n in per_round.values()),
            "after_expiry": sum(
                a.time > self.expired[a.job_id] for a in made if a.job_id in self.expired
            ),
        }

    async def _read(self) -> None:
        allowed = ev.ALLOWED_ON[topics.ASSIGNMENTS]
        async for msg in self.consumer:
            now = time.time()
            for a in ev.assignments_of(ev.decode(msg.value, allowed)):
                self.seen.setdefault(a.event_id, (a, now))

    async def stop(self) -> None:
        for task in (self.task, self.jobs_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.consumer.stop()
        await self.jobs.stop()


async def feed(
    producer: AIOKafkaProducer, attr: str, rate: float, stop: asyncio.Event, on: asyncio.Event
) -> None:
    """Eligible check-ins, each from a new device, at ``rate`` per second while ``on``."""
    n = 0
    while not stop.is_set():
        await on.wait()
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


async def heartbeats(producer: AIOKafkaProducer, job_id: str, stop: asyncio.Event) -> None:
    """The live job's coordinator: a heartbeat every second."""
    while not stop.is_set():
        beat = ev.JobHeartbeat(event_id=f"hb-{uuid.uuid4().hex}", time=time.time(), job_id=job_id)
        await producer.send(topics.JOBS, ev.encode(beat), key=ev.key_of(beat))
        await asyncio.sleep(1.0)


def metrics_text(port: int) -> str:
    """A worker's /metrics page (the venn_ lines), or why there is none."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5.0) as resp:
            body: str = resp.read().decode()
    except OSError as e:
        return f"no answer: {e}"
    return "\n".join(line for line in body.splitlines() if line.startswith("venn_"))


LOG_MARKS = {
    "rejoin": "(Re-)joining group",
    "assigned": "deciding",
    "caught_up": "caught up:",
}
"""The successor's own log lines that time its steps: aiokafka's rejoin (it learnt of the
rebalance), its decider's loop starting (the group gave it the decider's partition), and
the end of its catch-up read (`services/scheduler/inputs.py`)."""


def timeline(log: Path, since: float) -> dict[str, float | None]:
    """Seconds from ``since`` to the first line after it of each of `LOG_MARKS` in a worker's
    log (Faust's and logging's ``[YYYY-mm-dd HH:MM:SS,mmm]`` stamps, local time)."""
    found: dict[str, float | None] = dict.fromkeys(LOG_MARKS)
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return found
    for line in text.splitlines():
        if not line.startswith("[") or "]" not in line:
            continue
        try:
            stamp = time.mktime(time.strptime(line[1:20], "%Y-%m-%d %H:%M:%S"))
            at = stamp + int(line[21:24]) / 1000
        except ValueError:
            continue
        if at < since:
            continue
        for key, mark in LOG_MARKS.items():
            if found[key] is None and mark in line:
                found[key] = round(at - since, 2)
    return found


async def deciding(ports: dict[str, int]) -> list[str]:
    states = {n: await asyncio.to_thread(worker_metric, p, DECIDING) for n, p in ports.items()}
    return [n for n, s in states.items() if s == 1.0]


async def one_run(bootstrap: str, run_dir: Path, workers: int, rate: float) -> dict[str, Any]:
    settings = Settings(
        broker=bootstrap,
        broker_kind="external",
        broker_tuning="kafka",
        run_dir=str(run_dir / f"run-{uuid.uuid4().hex[:8]}"),
        topic_partitions=PARTITIONS,
        app_id="venn-failover",
    )
    # The scheduler's workers only: one decides, the others are hot standbys.
    stack = Stack(
        settings,
        workers=workers,
        recorder=False,
        gateway=False,
        secure=False,
        unique=True,
        extra_env={"VENN_JOB_TIMEOUT_S": str(JOB_TIMEOUT_S)},
    )
    await asyncio.to_thread(stack.up)
    ports, procs = stack.worker_ports, stack.processes
    app_id = stack.settings.app_id  # unique=True: venn-failover-<suffix>
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    seen = Assignments(bootstrap)
    await seen.start()
    stop = asyncio.Event()
    feeder: asyncio.Task[None] | None = None
    beats: asyncio.Task[None] | None = None
    loop = asyncio.get_running_loop()
    decider: str | None = None
    live = ""
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
        live, silent = f"live-{attr}", f"silent-{attr}"
        now = time.time()
        for job_id in (live, silent):
            for event in (
                ev.JobRegistered(
                    event_id=f"reg-{job_id}", time=now, job_id=job_id, requirement={attr: 1.0},
                    demand=DEMAND, rounds=1, deadline_s=3600, workload_s=5,
                ),
                ev.RoundRequested(
                    event_id=f"rr-{job_id}", time=now, job_id=job_id, round_index=0, demand=DEMAND
                ),
            ):  # fmt: skip
                await producer.send_and_wait(topics.JOBS, ev.encode(event), key=ev.key_of(event))
        beats = asyncio.create_task(heartbeats(producer, live, stop))
        feeding = asyncio.Event()
        feeding.set()
        feeder = asyncio.create_task(feed(producer, attr, rate, stop, feeding))
        while len(seen.seen) < WARM_ASSIGNMENTS or silent not in seen.expired:
            if len(seen.seen) >= WARM_ASSIGNMENTS:
                # No new devices until the kill: a decider behind on a loaded machine
                # otherwise filled the whole round from its backlog before it (no room left
                # for its successor: runs 18 and 19 at 47639fb).
                feeding.clear()
            if loop.time() > deadline + TIMEOUT_S:
                raise RuntimeError(f"{len(seen.seen)} assignments, expired: {sorted(seen.expired)}")
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # what the decider still had to decide is seen
        if sum(a.job_id == live for a, _ in seen.seen.values()) >= DEMAND:
            raise RuntimeError("the round was full before the kill (a set-up failure)")
        killed_at = time.time()
        procs[decider].kill()  # SIGKILL
        feeding.set()
        load = float(Path("/proc/loadavg").read_text().split()[0])
        rest = {n: p for n, p in ports.items() if n != decider}
        promoted_s: float | None = None
        successor = ""
        first: tuple[ev.Assignment, float] | None = None
        while first is None or promoted_s is None:
            if time.time() - killed_at > TIMEOUT_S:
                raise RuntimeError("no assignment after the kill")
            if promoted_s is None and (now_deciding := await deciding(rest)):
                promoted_s = time.time() - killed_at
                successor = now_deciding[0]
            after = [(a, t) for a, t in seen.seen.values() if a.time > killed_at]
            if after and first is None:
                first = min(after, key=lambda at: at[0].time)
            await asyncio.sleep(0.1)
        # The successor fills the live round; then room for an assignment too many.
        while sum(a.job_id == live for a, _ in seen.seen.values()) < DEMAND:
            if time.time() - killed_at > TIMEOUT_S:
                raise RuntimeError("the successor does not fill the round")
            await asyncio.sleep(0.2)
        await asyncio.sleep(2.0)
        return {
            "app_id": app_id,
            "load": load,
            "decided_s": round(first[0].time - killed_at, 2),
            "seen_s": round(first[1] - killed_at, 2),
            "deciding_metric_s": round(promoted_s, 2),
            "successor_log_s": timeline(
                Path(stack.settings.run_dir) / f"{successor}.log", killed_at
            ),
            "before_kill": sum(a.time <= killed_at for a, _ in seen.seen.values()),
            **seen.violations(),
        }
    except RuntimeError as e:
        evidence = run_dir / f"{app_id}-evidence.txt"
        with evidence.open("w") as out:
            out.write(f"{e}\nkilled decider: {decider}\n")
            for name, port in ports.items():
                out.write(f"\n== {name} /metrics\n{await asyncio.to_thread(metrics_text, port)}\n")
            live_n = sum(a.job_id == live for a, _ in seen.seen.values())
            out.write(f"\nassignments seen: {len(seen.seen)}, to the live job: {live_n}\n")
        return {"app_id": app_id, "failed": str(e), "evidence": str(run_dir), **seen.violations()}
    finally:
        stop.set()
        for task in (feeder, beats):
            if task is not None:
                await asyncio.gather(task, return_exceptions=True)
        await seen.stop()
        await producer.stop()
        await asyncio.to_thread(stack.down)


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


def steps(marks: dict[str, float | None]) -> str:
    return " / ".join("-" if marks.get(k) is None else f"{marks[k]:.2f}" for k in LOG_MARKS)


def markdown(meta: dict[str, Any], results: list[dict[str, Any]]) -> str:
    done = [r for r in results if "failed" not in r]
    decided = [r["decided_s"] for r in done]
    lines = [
        f"Run {meta['date']} ({meta['cores']} cores): `{meta['command']}` "
        f"({meta['seconds']:.0f} s), commit {meta['commit']}. {meta['workers']} workers "
        f"(one decider, {meta['workers'] - 1} standbys), {meta['rate']:g} eligible "
        f"check-ins/s, Apache Kafka {meta['partitions']} partitions, scheduler session "
        f"{meta['session_s']:g} s.",
        "",
        "| run | SIGKILL -> first assignment decided, s | -> seen on venn.assignments, s "
        "| -> successor reports deciding, s | assigned before the kill | load at the kill "
        "| successor's log: rejoining / deciding / caught up, s "
        "| devices assigned twice | over demand | after the expiry |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i, r in enumerate(results, 1):
        if "failed" in r:
            lines.append(
                f"| {i} | **failed: {r['failed']}** | | | | | | {r['devices_twice']} | "
                f"{r['over_demand']} | {r['after_expiry']} |"
            )
            continue
        lines.append(
            f"| {i} | **{r['decided_s']:.2f}** | {r['seen_s']:.2f} | "
            f"{r['deciding_metric_s']:.2f} | {r['before_kill']} | {r.get('load', 0):.1f} | "
            f"{steps(r.get('successor_log_s', {}))} | {r['devices_twice']} | "
            f"{r['over_demand']} | {r['after_expiry']} |"
        )
    broken = sum(r["devices_twice"] + r["over_demand"] + r["after_expiry"] for r in results)
    failed = len(results) - len(done)
    summary = (
        f"Median {statistics.median(decided):.2f} s, worst {max(decided):.2f} s; goal "
        f"{GOAL_S:g} s: met in {sum(d <= GOAL_S for d in decided)} of {len(results)} runs. "
        if decided
        else ""
    )
    lines += [
        "",
        summary
        + (f"{failed} runs failed (see the note of the run). " if failed else "")
        + f"Invariants (no device twice, no round over its demand of {DEMAND}, nothing to a "
        f"job after its expiry): "
        + ("held in every run." if not broken else f"{broken} violations."),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.failover_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--rate", type=float, default=20.0, help="eligible check-ins per second")
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args(argv)
    preamble("failover_bench")
    if args.workers < 2:
        p.error("--workers: at least 2 (a decider and a standby)")
    started = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="venn-failover-"))
    results = asyncio.run(measure(args.runs, args.workers, args.rate, tmp))
    if any("failed" in r for r in results):
        print(f"evidence of the failed runs (worker logs, metrics) kept in {tmp}", flush=True)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    tuning = Settings(broker_kind="kafka")
    command = "python -m bench.failover_bench" + "".join(
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
