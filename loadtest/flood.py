"""A hostile flood against a secured stack (issue 34): devices enrol and check in as fast as
the gateway answers them, while one job token floods the admission queue, another submits
jobs with ``finish_by`` (a completion estimate each) and an operator keeps the dashboard
open; then every round's assignments are counted from venn.assignments.

    .venv/bin/python loadtest/flood.py --devices 50000 --duration 120

The first ``--enrol-http`` devices enrol through ``POST /v1/devices``; the others get
their device tokens as ``venn token device`` makes them (the flood is of check-ins).

`loadtest.stack.LoadStack` secured as under `venn up` (API tokens; on Apache Kafka a
SASL/SCRAM principal per service), with its coordinators: one job per requirement tier
asking round after round of demand ``--demand``. A device that gets an assignment uploads
its result a second later. Prints one JSON object: the check-ins' answers by status and
reason, their latency as the client saw it and as the gateway measured it (answers past
the bound, VENN_GATEWAY_WAIT_S: a check-in with no decision is answered when its bound's
timer fires, so past it means past the next bucket, bound + 0.5 s), the floods' answers,
each round's assignments (rounds with exactly the demand, any over it), the gateway's
counters and the machine's load. Exit 0 iff no check-in passed its bound, no answer was a
5xx and no round got more than its demand.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
from aiokafka import AIOKafkaConsumer, TopicPartition

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, git_commit, write_block  # noqa: E402
from loadtest.stack import LoadStack, StackConfig  # noqa: E402
from venn import events as ev  # noqa: E402
from venn.auth import Tokens  # noqa: E402
from venn.broker import topics  # noqa: E402
from venn.traces.devices import load_device_profiles  # noqa: E402

LATENCY_BUCKETS = (0.5, 1.0, 2.0, 2.5, 5.0)
PAGE = RESULTS / "flood.md"
RUNS = RESULTS / "bench" / "flood.json"
RUNS_KEPT = 12
"""The newest runs the page lists (each run is a row; the machine is shared, so a figure
is read beside its load and the CPU the rest of the machine took)."""


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu_s(pid: int) -> float:
    """The process's CPU time (user + system) from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def machine_cpu_s() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    ticks = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / ticks, sum(fields) / ticks


class LoopLag:
    """This process's own event-loop stalls (the load generator shares the machine): a
    check-in it times across a stall is late as the device sees it, not at the gateway."""

    PERIOD_S = 0.02
    STALL_S = 0.25

    def __init__(self) -> None:
        self.max_s = 0.0
        self.stalls = 0
        self.stalled_s = 0.0

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            start = loop.time()
            await asyncio.sleep(self.PERIOD_S)
            late = loop.time() - start - self.PERIOD_S
            self.max_s = max(self.max_s, late)
            if late > self.STALL_S:
                self.stalls += 1
                self.stalled_s += late


class Flood:
    def __init__(self, stack: LoadStack, args: argparse.Namespace) -> None:
        assert stack.settings is not None
        self.stack = stack
        self.args = args
        self.url = stack.url
        self.tokens = Tokens(stack.settings.auth_secret)
        self.answers: Counter[str] = Counter()
        self.latencies: list[float] = []
        self.floods: Counter[str] = Counter()
        self.stop = asyncio.Event()
        profiles = load_device_profiles()
        self.attrs = [
            {k: v for k, v in a.items() if k != "speed_ms_per_sample"} for a in profiles.attrs
        ]

    async def enrol(self, http: aiohttp.ClientSession, ids: list[str]) -> dict[str, str]:
        enroll = self.stack.enroll_token()
        tokens: dict[str, str] = {}
        queue = list(ids)

        async def worker() -> None:
            while queue:
                device = queue.pop()
                headers = {"Authorization": f"Bearer {enroll}"}
                async with http.post(
                    f"{self.url}/v1/devices", json={"device_id": device}, headers=headers
                ) as r:
                    body = await r.json(content_type=None)
                if r.status == 201:
                    tokens[device] = body["token"]
                else:
                    queue.append(device)  # busy: again
                    await asyncio.sleep(0.2)

        await asyncio.gather(*(worker() for _ in range(self.args.concurrency)))
        return tokens

    async def checkins(self, http: aiohttp.ClientSession, tokens: dict[str, str]) -> None:
        ids = list(tokens)
        bound = aiohttp.ClientTimeout(total=self.args.wait_s + 10)
        results: set[asyncio.Task[None]] = set()

        async def result(device: str, job: str, round_index: int) -> None:
            await asyncio.sleep(1.0)
            body = {"device_id": device, "job_id": job, "round_index": round_index,
                    "ok": True, "response_time_s": 1.0}  # fmt: skip
            headers = {"Authorization": f"Bearer {tokens[device]}"}
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with http.post(f"{self.url}/v1/results", json=body, headers=headers) as r:
                    self.answers[f"result {r.status}"] += 1

        async def worker(start: int) -> None:
            i = start
            while not self.stop.is_set():
                device = ids[i % len(ids)]
                i += self.args.concurrency
                attrs = self.attrs[hash(device) % len(self.attrs)]
                body = {"device_id": device, "attrs": attrs, "speed_ms_per_sample": 50.0,
                        "bandwidth_kbps": 5000.0}  # fmt: skip
                headers = {"Authorization": f"Bearer {tokens[device]}"}
                began = time.monotonic()
                try:
                    async with http.post(
                        f"{self.url}/v1/checkin", json=body, headers=headers, timeout=bound
                    ) as r:
                        got = await r.json(content_type=None)
                        self.latencies.append(time.monotonic() - began)
                        reason = "assigned" if got.get("assigned") else got.get("reason")
                        reason = reason or got.get("error")
                        self.answers[f"{r.status} {reason}"] += 1
                        if got.get("assigned"):
                            task = asyncio.create_task(
                                result(device, got["job_id"], got["round_index"])
                            )
                            results.add(task)
                            task.add_done_callback(results.discard)
                except (aiohttp.ClientError, TimeoutError) as exc:
                    self.answers[f"error {type(exc).__name__}"] += 1

        await asyncio.gather(*(worker(i) for i in range(self.args.concurrency)))
        await asyncio.gather(*results, return_exceptions=True)

    async def submit(self, http: aiohttp.ClientSession, kind: str, path: str, job: str,
                     requirement: dict[str, float], token: str) -> None:  # fmt: skip
        spec = {"job_id": job, "requirement": requirement, "demand": 20, "rounds": 50,
                "deadline_s": 600}  # fmt: skip
        headers = {"Authorization": f"Bearer {token}"}
        try:
            async with http.post(f"{self.url}{path}", json=spec, headers=headers) as r:
                got = await r.json(content_type=None)
                self.floods[f"{kind} {r.status} {got.get('error') or got.get('state') or ''}"] += 1
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.floods[f"{kind} error {type(exc).__name__}"] += 1

    async def queue_flood(self, http: aiohttp.ClientSession, task: int) -> None:
        """Queue jobs no device can run, from enough owners to fill the whole admission
        queue (VENN_MAX_QUEUED_JOBS), not just one owner's share of it."""
        owners = [f"mallory-{task}-{k}" for k in range(self.args.queue_owners)]
        tokens = [self.tokens.issue("job", o, jobs=["flood-*"], ttl_s=3600) for o in owners]
        n = 0
        while not self.stop.is_set():
            job = f"flood-{uuid.uuid4().hex[:12]}"
            token = tokens[n % len(tokens)]
            n += 1
            await self.submit(http, "queue", "/v1/jobs?queue=true", job, {"gpu": 1.0}, token)

    async def finish_by_flood(self, http: aiohttp.ClientSession) -> None:
        token = self.tokens.issue("job", "oscar", jobs=["late-*"], ttl_s=3600)
        while not self.stop.is_set():
            path = f"/v1/jobs?finish_by={time.time() + 60:.0f}"
            job = f"late-{uuid.uuid4().hex[:12]}"
            await self.submit(http, "finish_by", path, job, {"ram": 2.0}, token)

    async def dashboard(self, http: aiohttp.ClientSession) -> None:
        admin = self.tokens.issue("admin", "ops", ttl_s=3600)
        headers = {"Authorization": f"Bearer {admin}"}
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with http.get(f"{self.url}/v1/events/dashboard", headers=headers) as r:
                async for _ in r.content:
                    self.floods["dashboard events"] += 1
                    if self.stop.is_set():
                        return

    async def rounds(self) -> dict[str, Any]:
        """Assignments per (job, round) on venn.assignments, and each job's demand."""
        assert self.stack.settings is not None
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.stack.bootstrap, enable_auto_commit=False,
            **self.stack.admin_options,
        )  # fmt: skip
        await consumer.start()
        held: dict[tuple[str, int], set[str]] = {}
        try:
            parts = [
                TopicPartition(topics.ASSIGNMENTS, p)
                for p in range(self.stack.settings.topic_partitions)
            ]
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            ends = await consumer.end_offsets(parts)
            while True:
                positions = [await consumer.position(tp) for tp in parts]
                if all(at >= ends[tp] for tp, at in zip(parts, positions, strict=True)):
                    break
                for messages in (await consumer.getmany(timeout_ms=1000)).values():
                    for m in messages:
                        with contextlib.suppress(ev.InvalidEvent):
                            for a in ev.assignments_of(ev.decode(m.value)):
                                held.setdefault((a.job_id, a.round_index), set()).add(a.device_id)
        finally:
            await consumer.stop()
        demand = {job.job_id: job.demand for job in self.stack.jobs}
        counted = {key: len(devices) for key, devices in held.items() if key[0] in demand}
        last = {job: max((r for j, r in counted if j == job), default=-1) for job in demand}
        # Each job's last round was still filling when the flood stopped.
        ended = {(j, r): n for (j, r), n in counted.items() if r < last[j]}
        return {
            "rounds": len(counted),
            "rounds_open_at_the_end": len(counted) - len(ended),
            "ended_rounds": len(ended),
            "exactly_demand": sum(n == demand[j] for (j, _), n in ended.items()),
            "under_demand": sum(n < demand[j] for (j, _), n in ended.items()),
            "over_demand": sum(n > demand[j] for (j, _), n in counted.items()),
            "most": max(counted.values(), default=0),
            "demand": sorted(set(demand.values())),
        }


async def gateway_histogram(url: str) -> dict[str, float]:
    """The gateway's own latency histogram of check-ins: answers within each bucket."""
    out: dict[str, float] = {}
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as r:
        text = await r.text()
    for line in text.splitlines():
        if line.startswith("venn_gateway_request_seconds_bucket") and "/v1/checkin" in line:
            le = line.split('le="')[1].split('"')[0]
            status = line.split('status="')[1].split('"')[0]
            key = f"{status} le={le}"
            out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


async def main(args: argparse.Namespace) -> int:
    load_before = loadavg()
    cpu_before = os.times()
    with tempfile.TemporaryDirectory(prefix="venn-flood-") as tmp:
        config = StackConfig(
            Path(tmp), secure=True, demand=args.demand, deadline_s=args.deadline_s,
            wait_s=args.wait_s, ready_timeout_s=300.0,
        )  # fmt: skip
        async with LoadStack(config) as stack:
            flood = Flood(stack, args)
            limits = aiohttp.TCPConnector(limit=args.concurrency + 32)
            timeout = aiohttp.ClientTimeout(total=120)
            async with aiohttp.ClientSession(connector=limits, timeout=timeout) as http:
                ids = [f"flood-dev-{i:06d}" for i in range(args.devices)]
                started = time.monotonic()
                tokens = await flood.enrol(http, ids[: args.enrol_http])
                # The rest get their device tokens as an operator's `venn token device`
                # makes them: enrolling 50,000 through HTTP takes minutes on a busy machine.
                tokens.update(
                    (d, flood.tokens.issue("device", d, ttl_s=3600)) for d in ids[args.enrol_http :]
                )
                enrolled_s = time.monotonic() - started
                side = [] if args.baseline else [
                    *(asyncio.create_task(flood.queue_flood(http, i)) for i in range(4)),
                    *(asyncio.create_task(flood.finish_by_flood(http)) for _ in range(3)),
                    asyncio.create_task(flood.dashboard(http)),
                ]  # fmt: skip
                assert stack.gateway is not None
                pids = {"gateway": [stack.gateway.pid], "scheduler": stack.scheduler_pids,
                        "broker": stack.broker_pids}  # fmt: skip
                cpu_before_flood = {k: sum(cpu_s(p) for p in v) for k, v in pids.items()}
                client_before, machine_before = os.times(), machine_cpu_s()
                gateway_cpu = cpu_s(stack.gateway.pid)
                lag = LoopLag()
                lagging = asyncio.create_task(lag.run(flood.stop))
                checkins = asyncio.create_task(flood.checkins(http, tokens))
                await asyncio.sleep(args.duration)
                flood.stop.set()
                await checkins
                await asyncio.gather(*side, return_exceptions=True)
                gateway_cpu = cpu_s(stack.gateway.pid) - gateway_cpu
                await lagging
                cpu = {k: sum(cpu_s(p) for p in v) - cpu_before_flood[k] for k, v in pids.items()}
                cpu["load generator"] = sum(os.times()[:2]) - sum(client_before[:2])
                busy, total = (b - a for a, b in zip(machine_before, machine_cpu_s(), strict=True))
                cpu["everything else on the machine"] = busy - sum(cpu.values())
                machine = {
                    "cores": os.cpu_count(),
                    "busy_fraction": round(busy / total, 3) if total else 0.0,
                    "cpu_s_during_flood": {k: round(v, 1) for k, v in cpu.items()},
                }
            histogram = await gateway_histogram(stack.url)
            await asyncio.sleep(2.0)  # the last results and assignments reach the topics
            rounds = await flood.rounds()
            health = stack.gateway_health()
    latencies = flood.latencies
    # The gateway answers a check-in it has no decision for when its bound's timer fires,
    # so such an answer is measured a little over the bound: past it means past the next
    # bucket (2.5 s for the default bound of 2 s).
    total = sum(v for k, v in histogram.items() if k.endswith("le=+Inf"))
    within_bound = sum(v for k, v in histogram.items() if k.endswith(f"le={args.wait_s}"))
    over = total - sum(v for k, v in histogram.items() if k.endswith(f"le={args.wait_s + 0.5}"))
    server_5xx = sum(n for k, n in flood.answers.items() if k[:1] == "5")
    flood_5xx = sum(n for k, n in flood.floods.items() if k.split()[1][:1] == "5")
    report = {
        "devices": args.devices,
        "enrolled_in_s": round(enrolled_s, 1),
        "duration_s": args.duration,
        "checkins": sum(n for k, n in flood.answers.items() if not k.startswith("result")),
        "answers": dict(sorted(flood.answers.items())),
        "client_latency_s": {
            "p50": round(percentile(latencies, 0.5), 3),
            "p99": round(percentile(latencies, 0.99), 3),
            "max": round(max(latencies, default=0.0), 3),
            "past_bound": sum(v > args.wait_s for v in latencies),
            "past_bound_plus_0.5s": sum(v > args.wait_s + 0.5 for v in latencies),
            "past_bound_plus_1s": sum(v > args.wait_s + 1 for v in latencies),
        },
        "load_generator_loop": {
            "max_stall_s": round(lag.max_s, 3),
            f"stalls_over_{LoopLag.STALL_S}s": lag.stalls,
            "stalled_s": round(lag.stalled_s, 1),
        },
        "gateway_answers_past_bound_plus_0.5s": over,
        "gateway_answers_at_bound_timer": total - within_bound - over,
        "gateway_histogram": histogram,
        "floods": dict(sorted(flood.floods.items())),
        "rounds": rounds,
        "gateway_stats": health.get("stats", {}),
        "load_before": load_before,
        "load_after": loadavg(),
        "gateway_cpu_s": round(gateway_cpu, 1),
        "baseline": args.baseline,
        "client_cpu_s": round(sum(os.times()[:2]) - sum(cpu_before[:2]), 1),
        "machine": machine,
    }
    print(json.dumps(report, indent=1))
    if args.page:
        publish(report, args)
    ok = over == 0 and server_5xx == 0 and flood_5xx == 0 and rounds["over_demand"] == 0
    return 0 if ok else 1


def publish(report: dict[str, Any], args: argparse.Namespace) -> None:
    """Add the run to docs/results/bench/flood.json and regenerate docs/results/flood.md."""
    run = {
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "commit": git_commit(),
        "command": "python loadtest/flood.py " + " ".join(sys.argv[1:]),
        **report,
    }
    runs = json.loads(RUNS.read_text()) if RUNS.exists() else []
    runs = [*runs, run][-RUNS_KEPT:]
    RUNS.write_text(json.dumps(runs, indent=1) + "\n")
    rows = [
        "| run | commit | side floods | load (start -> end) | check-ins | 429 overloaded "
        "| device p99 / max s | device past 2 s / 2.5 s | gateway past 2.5 s | 5xx "
        "| rounds exactly D / ended (over D) | CPU s: gateway, generator, rest of machine "
        "| generator's loop stalled s (max) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in reversed(runs):
        c, rounds = r["client_latency_s"], r["rounds"]
        cpu = r.get("machine", {}).get("cpu_s_during_flood", {})
        lag = r.get("load_generator_loop", {})
        fives = sum(n for k, n in r["answers"].items() if k[:1] == "5")
        fives += sum(n for k, n in r["floods"].items() if k.split()[1][:1] == "5")
        rows.append(
            f"| {r['date']} | {r['commit']} | {'no' if r['baseline'] else 'yes'} "
            f"| {r['load_before'][0]:g} -> {r['load_after'][0]:g} | {r['checkins']:,} "
            f"| {r['answers'].get('429 overloaded', 0):,} | {c['p99']:.2f} / {c['max']:.2f} "
            f"| {c.get('past_bound', '-')} / {c.get('past_bound_plus_0.5s', '-')} "
            f"| {r['gateway_answers_past_bound_plus_0.5s']:.0f} | {fives} "
            f"| {rounds['exactly_demand']} / {rounds['ended_rounds']} ({rounds['over_demand']}) "
            f"| {cpu.get('gateway', r['gateway_cpu_s'])}, {cpu.get('load generator', '-')}, "
            f"{cpu.get('everything else on the machine', '-')} "
            f"| {lag.get('stalled_s', '-')} ({lag.get('max_stall_s', '-')}) |"
        )
    text = (
        f"The newest {RUNS_KEPT} runs, newest first (raw: [bench/flood.json](bench/flood.json)); "
        f"{args.devices:,} devices, {args.duration:g} s, bound {args.wait_s:g} s, 2 cores "
        "shared with the rest of the machine. *Device*: as the load generator timed each "
        "check-in (its own loop stalls included); *gateway*: from the arrival to the answer "
        "as the gateway measured it.\n\n" + "\n".join(rows)
    )
    write_block(PAGE, "flood", text, "The hostile flood: latest runs (generated)")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=50_000)
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--demand", type=int, default=100)
    parser.add_argument("--deadline-s", type=float, default=10.0)
    parser.add_argument("--wait-s", type=float, default=2.0)
    parser.add_argument(
        "--enrol-http", type=int, default=2000, help="devices enrolled through POST /v1/devices"
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="the check-ins alone: no queue, finish_by or dashboard",
    )
    parser.add_argument("--queue-owners", type=int, default=10, help="owners per queue flooder")
    parser.add_argument(
        "--page", action="store_true", help="add the run to docs/results/flood.md and its JSON"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
