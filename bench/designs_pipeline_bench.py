"""Scale-out designs in the pipeline, side by side in one run: scheduler CPU, gateway CPU and
broker messages per check-in for A (today), B (A with the forward quota off), C (the leased
mode, from commit 97defac) and, with --before, main with every check-in forwarded.

    .venv/bin/python -m bench.designs_pipeline_bench              # about 8 minutes
    .venv/bin/python -m bench.designs_pipeline_bench --no-write   # print, publish nothing

Setups (each a real stack: `loadtest.stack.LoadStack` of its own tree, started in a child
process with that tree on PYTHONPATH: the scheduler worker(s) and one gateway process
(`python -m services.gateway`, HTTP), plus the coordinators in the child):
- A: this tree as it is (gateways forward within the quota, answer the rest at once, send
  SupplyReports; one deciding worker);
- B: this tree with VENN_GATEWAY_FORWARD_QUOTA=1e9 (every check-in an open round with
  demand left admits is forwarded; supply reports still sent);
- C: the tree of BASELINE_COMMIT (the last with the leased mode; a detached git worktree
  the bench adds and removes, or --c-tree), VENN_SCHEDULER_MODE=leased with 2 workers, and
  with 1 (--c-workers);
- before (--before): this tree with VENN_GATEWAY_FAST_NO=0 (every check-in forwarded, the
  design before the gateways answered any at once);
- A-edge (--edge): A from the tree of EDGE_COMMIT, the last whose scheduler read its inputs
  through Faust's stream path with the patch-set around it (issue 32), beside A.

One Apache Kafka broker (this tree's `local_broker("kafka")`) serves the whole run; before
each setup every non-internal topic is deleted and the setup's stack creates its own, with
PARTITIONS partitions. Jobs and demand are the same in every setup: LoadStack's
coordinators, one job per requirement tier of the paper (4 tiers, nested eligibility),
each requesting round after round with demand --demand and deadline --deadline-s (devices
upload no results, so each round closes at its deadline and the next opens at once).

Load: an open-loop HTTP generator in its own process (`loadgen` subcommand: check-in i is
sent at start + i / rate whatever the answers) at --rate check-ins/s from a fleet of
--fleet device ids drawn uniformly at random (seeded, the same sequence in every setup);
device k has the attributes of device profile k mod 959 (venn's device profiles), so
about 4% are eligible for no job and the rest for one to four tiers. After the stack is
ready it idles IDLE_S seconds (idle CPU read), then the load runs --warmup seconds before
the window (the first setup --broker-warmup more: the broker's JVM is fresh) and --window
seconds in it. Over the window: CPU (user + system, from
/proc/<pid>/stat, each process and its descendants) of the scheduler worker(s), the
gateway and the broker; check-ins answered and assigned in the window (by answer time, as
the generator saw them); broker messages = the sum of the end offsets of every partition
of the venn.* topics (and of all topics, changelogs included) after the window less
before. Per check-in figures divide by the check-ins answered in the window; idle figures
are shown beside them (not subtracted).

Writes docs/results/bench/designs_pipeline.json and the table between the
`bench:designs-pipeline` markers of docs/results/designs_pipeline.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

# No project import at module level: the `stack` subcommand runs with another tree on
# PYTHONPATH and must import that tree's code only.
ROOT = Path(__file__).resolve().parents[1]
JSON_OUT = ROOT / "docs" / "results" / "bench" / "designs_pipeline.json"
DOC = ROOT / "docs" / "results" / "designs_pipeline.md"
EDGE_JSON_OUT = ROOT / "docs" / "results" / "bench" / "stream_edge.json"
EDGE_DOC = ROOT / "docs" / "results" / "stream_edge.md"
"""Where a run with --edge writes (this tree's stream edge against EDGE_COMMIT's)."""
BASELINE_COMMIT = "97defac"
EDGE_COMMIT = "7b90043"
"""The last commit with the leased mode (design C)."""
PARTITIONS = 4
IDLE_S = 5.0
SETTLE_S = 3.0
B_QUOTA = "1e9"
"""VENN_GATEWAY_FORWARD_QUOTA of B: a multiple of remaining demand no burst reaches."""
WAIT_S = 2.0


@dataclass(frozen=True)
class Setup:
    name: str
    label: str
    tree: str
    """"main" (this tree), "c" (the BASELINE_COMMIT tree) or "edge" (EDGE_COMMIT's)."""
    workers: int = 1
    mode: str | None = None
    """VENN_SCHEDULER_MODE through StackConfig.scheduler_mode (C only)."""
    gateway_env: dict[str, str] = field(default_factory=dict)


def setups(c_workers: list[int], before: bool, edge: bool = False) -> list[Setup]:
    out = [
        Setup("A", "quota + supply reports, one decider", "main"),
        *(
            [Setup("A-edge", f"A with Faust's stream path ({EDGE_COMMIT})", "edge")]
            if edge
            else []
        ),
        Setup("B", "supply reports, no quota", "main",
              gateway_env={"VENN_GATEWAY_FORWARD_QUOTA": B_QUOTA}),
    ]  # fmt: skip
    out += [
        Setup(f"C{n}", f"leased, {n} worker{'s' * (n > 1)}", "c", n, "leased") for n in c_workers
    ]
    if before:
        out.append(
            Setup("before", "every check-in forwarded", "main",
                  gateway_env={"VENN_GATEWAY_FAST_NO": "0"})
        )  # fmt: skip
    return out


# -- pure helpers (tests/pure/test_designs_pipeline_bench.py) -------------------------------


def window_answers(answers: list[tuple[float, str, float]], t0: float, t1: float) -> dict[str, Any]:
    """Answers (wall time, reason, latency s) with a time in [t0, t1): counts by reason,
    p50/p99 latency of all of them and of the assigned ones (the check-ins the scheduler
    decided)."""
    inside = [a for a in answers if t0 <= a[0] < t1]
    reasons = Counter(a[1] for a in inside)

    def pct(lat: list[float], q: float) -> float:
        if not lat:
            return float("nan")
        return lat[min(len(lat) - 1, max(0, math.ceil(len(lat) * q / 100) - 1))]

    every = sorted(a[2] for a in inside)
    assigned = sorted(a[2] for a in inside if a[1] == "assigned")
    return {
        "answered": len(inside),
        "assigned": reasons.get("assigned", 0),
        "reasons": dict(reasons),
        "p50_ms": round(pct(every, 50) * 1000, 1),
        "p99_ms": round(pct(every, 99) * 1000, 1),
        "assigned_p50_ms": round(pct(assigned, 50) * 1000, 1),
        "assigned_p99_ms": round(pct(assigned, 99) * 1000, 1),
    }


def per_checkin(row: dict[str, Any]) -> dict[str, float]:
    """The window's totals -> per check-in answered (CPU in µs) and per second."""
    n = max(1, row["answers"]["answered"])
    s = row["window_s"]
    return {
        "scheduler_us": round(row["cpu_s"]["scheduler"] / n * 1e6, 1),
        "gateway_us": round(row["cpu_s"]["gateway"] / n * 1e6, 1),
        "broker_us": round(row["cpu_s"]["broker"] / n * 1e6, 1),
        "scheduler_reads": round(row["scheduler_read"] / n, 4),
        "venn_messages": round(row["messages"]["venn"] / n, 4),
        "all_messages": round(row["messages"]["all"] / n, 4),
        "checkins_per_s": round(row["answers"]["answered"] / s, 1),
        "assigned_per_s": round(row["answers"]["assigned"] / s, 2),
    }


# -- load generator (its own process, this tree) --------------------------------------------


def device_bodies(fleet: int) -> list[bytes]:
    """Device k's check-in body: the attributes of device profile k mod the profile count."""
    import msgspec

    from venn.traces.devices import load_device_profiles

    profiles = load_device_profiles()
    attrs = [
        {k: float(v) for k, v in a.items() if k != "speed_ms_per_sample"} for a in profiles.attrs
    ]
    return [
        msgspec.json.encode(
            {
                "device_id": f"dev-{k}",
                "attrs": attrs[k % len(attrs)],
                "speed_ms_per_sample": 60.0,
                "bandwidth_kbps": 12000.0,
            }
        )
        for k in range(fleet)
    ]


async def _loadgen(
    url: str, rate: float, duration: float, fleet: int, seed: int, limit: int
) -> dict[str, Any]:
    import aiohttp
    import msgspec

    bodies = device_bodies(fleet)
    rng = random.Random(seed)
    total = int(rate * duration)
    order = [rng.randrange(fleet) for _ in range(total)]
    answers: list[tuple[float, str, float]] = []
    errors: Counter[str] = Counter()
    skipped = 0
    outstanding = 0
    loop = asyncio.get_running_loop()
    headers = {"Content-Type": "application/json"}

    async def one(session: aiohttp.ClientSession, body: bytes, due: float) -> None:
        nonlocal outstanding
        try:
            async with session.post(f"{url}/v1/checkin", data=body, headers=headers) as r:
                payload = await r.read()
                now = loop.time()
                if r.status != 200:
                    reason = f"http {r.status}"
                else:
                    answer = msgspec.json.decode(payload)
                    reason = "assigned" if answer.get("assigned") else str(answer.get("reason"))
                answers.append((time.time(), reason, now - due))
        except Exception as exc:
            errors[type(exc).__name__] += 1
        finally:
            outstanding -= 1

    connector = aiohttp.TCPConnector(limit=limit)
    timeout = aiohttp.ClientTimeout(total=WAIT_S + 5.0)
    tasks: set[asyncio.Task[None]] = set()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = loop.time() + 0.05
        for i, k in enumerate(order):
            delay = start + i / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if outstanding >= limit * 4:
                skipped += 1  # open loop, but not an unbounded queue
                continue
            outstanding += 1
            task = asyncio.ensure_future(one(session, bodies[k], start + i / rate))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks, timeout=WAIT_S + 10.0)
    return {"sent": total - skipped, "skipped": skipped, "errors": dict(errors),
            "answers": answers}  # fmt: skip


def loadgen_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="designs_pipeline_bench.py loadgen")
    p.add_argument("--url", required=True)
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--fleet", type=int, required=True)
    p.add_argument("--seed", type=int, default=21)
    p.add_argument("--limit", type=int, default=512)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    import uvloop

    result = uvloop.run(_loadgen(a.url, a.rate, a.duration, a.fleet, a.seed, a.limit))
    Path(a.out).write_text(json.dumps(result))
    return 0


# -- a stack of one tree (its own process, that tree on PYTHONPATH) -------------------------


async def _stack(a: argparse.Namespace) -> None:
    from loadtest.stack import LoadStack, StackConfig

    options: dict[str, Any] = {
        "run_dir": Path(a.run_dir), "broker": a.broker, "broker_kind": "kafka",
        "partitions": a.partitions, "demand": a.demand, "deadline_s": a.deadline_s,
        "wait_s": WAIT_S, "workers": a.workers, "gateway_env": json.loads(a.gateway_env),
    }  # fmt: skip
    if a.mode:
        options["scheduler_mode"] = a.mode
    async with LoadStack(StackConfig(**options)) as stack:
        assert stack.gateway is not None and stack.settings is not None
        print(json.dumps({
            "url": stack.url, "gateway_pid": stack.gateway.pid,
            "scheduler_pids": stack.scheduler_pids, "app_id": stack.settings.app_id,
            "web_ports": stack.scheduler_web_ports,
            "jobs": [j.job_id for j in stack.jobs],
        }), flush=True)  # fmt: skip
        # Until the parent closes our stdin.
        await asyncio.to_thread(sys.stdin.read)


def stack_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="designs_pipeline_bench.py stack")
    p.add_argument("--broker", required=True)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--partitions", type=int, default=PARTITIONS)
    p.add_argument("--demand", type=int, required=True)
    p.add_argument("--deadline-s", type=float, required=True)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--mode", default="")
    p.add_argument("--gateway-env", default="{}")
    a = p.parse_args(argv)
    asyncio.run(_stack(a))
    return 0


# -- the run (this tree) ---------------------------------------------------------------------


async def end_offsets(bootstrap: str) -> dict[str, int]:
    """Records per topic (end offsets of every partition summed), internal topics apart."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await admin.start()
    await consumer.start()
    try:
        names = [t for t in await admin.list_topics() if not t.startswith("__")]
        parts = [
            TopicPartition(d["topic"], p["partition"])
            for d in await admin.describe_topics(names)
            for p in d["partitions"]
        ]
        ends = await consumer.end_offsets(parts) if parts else {}
    finally:
        await consumer.stop()
        await admin.close()
    out: dict[str, int] = {}
    for tp, end in ends.items():
        out[tp.topic] = out.get(tp.topic, 0) + end
    return out


async def clear_topics(bootstrap: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    from venn.broker.topics import delete_topics

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if not t.startswith("__")]
    finally:
        await admin.close()
    await delete_topics(bootstrap, names, timeout=60.0)


def metric_total(text: str, name: str) -> float:
    """Sum of a metric's samples (any labels) in a Prometheus text page."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith((name + " ", name + "{")):
            total += float(line.rsplit(" ", 1)[1])
    return total


def get_text(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


@dataclass
class Snapshot:
    wall: float
    cpu: dict[str, float]
    offsets: dict[str, int]
    scheduler_checkins: float
    """Check-ins the scheduler worker(s) read (venn_scheduler_checkins_total, summed)."""
    gateway: dict[str, int]
    """The gateway's counters (/healthz stats)."""


async def snapshot(stack: dict[str, Any], broker_pid: int, bootstrap: str) -> Snapshot:
    # Not at the top: `stack` runs this module with another tree on PYTHONPATH.
    from devtools.procs import process_cpu

    wall = time.time()
    cpu = {
        "scheduler": process_cpu(stack["scheduler_pids"]),
        "gateway": process_cpu([stack["gateway_pid"]]),
        "broker": process_cpu([broker_pid]),
    }
    pages = [
        await asyncio.to_thread(get_text, f"http://127.0.0.1:{port}/metrics")
        for port in stack["web_ports"]
    ]
    read = sum(metric_total(page, "venn_scheduler_checkins_total") for page in pages)
    health = json.loads(await asyncio.to_thread(get_text, f"{stack['url']}/healthz"))
    counters = {k: v for k, v in health.get("stats", {}).items() if isinstance(v, int)}
    return Snapshot(wall, cpu, await end_offsets(bootstrap), read, counters)


def delta_messages(a: dict[str, int], b: dict[str, int]) -> dict[str, Any]:
    topics = {t: b.get(t, 0) - a.get(t, 0) for t in set(a) | set(b)}
    topics = {t: n for t, n in sorted(topics.items()) if n}
    return {
        "venn": sum(n for t, n in topics.items() if t.startswith("venn.")),
        "all": sum(topics.values()),
        "by_topic": topics,
    }


def stack_line(stdout: Any) -> dict[str, Any] | None:
    """The stack child's JSON line (anything else it prints is skipped); None at its end."""
    for raw in stdout:
        try:
            found = json.loads(raw)
        except ValueError:
            continue
        if isinstance(found, dict) and "url" in found:
            return found
    return None


async def run_setup(
    setup: Setup, tree: Path, bootstrap: str, broker_pid: int, args: argparse.Namespace,
    workdir: Path, warmup: float,
) -> dict[str, Any]:  # fmt: skip
    await clear_topics(bootstrap)
    run_dir = workdir / setup.name
    run_dir.mkdir(parents=True)
    command = [
        sys.executable, str(Path(__file__).resolve()), "stack", "--broker", bootstrap,
        "--run-dir", str(run_dir), "--demand", str(args.demand), "--deadline-s",
        str(args.deadline_s), "--workers", str(setup.workers), "--mode", setup.mode or "",
        "--gateway-env", json.dumps(setup.gateway_env),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.monotonic()
    with open(run_dir / "stack.log", "wb") as log:
        child = subprocess.Popen(command, cwd=tree, env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=log)  # fmt: skip
    try:
        assert child.stdout is not None
        stack = await asyncio.wait_for(asyncio.to_thread(stack_line, child.stdout), 240)
        if stack is None:
            raise RuntimeError(f"{setup.name}: the stack did not start; see {run_dir}/stack.log")
        ready_s = time.monotonic() - started
        await asyncio.sleep(SETTLE_S)
        idle0 = await snapshot(stack, broker_pid, bootstrap)
        await asyncio.sleep(IDLE_S)
        idle1 = await snapshot(stack, broker_pid, bootstrap)
        idle_s = idle1.wall - idle0.wall
        out_file = run_dir / "loadgen.json"
        gen = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "loadgen", "--url", stack["url"],
             "--rate", str(args.rate), "--duration", str(warmup + args.window + 2.0),
             "--fleet", str(args.fleet), "--out", str(out_file)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        try:
            await asyncio.sleep(warmup)
            s0 = await snapshot(stack, broker_pid, bootstrap)
            await asyncio.sleep(args.window)
            s1 = await snapshot(stack, broker_pid, bootstrap)
        finally:
            await asyncio.to_thread(gen.wait, warmup + args.window + 60)
        load = json.loads(out_file.read_text())
    finally:
        if child.stdin is not None:
            child.stdin.close()
        try:
            await asyncio.to_thread(child.wait, 90)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
            child.wait()
    answers = [(float(t), str(r), float(lat)) for t, r, lat in load["answers"]]
    window_s = s1.wall - s0.wall
    row: dict[str, Any] = {
        "setup": asdict(setup),
        "ready_s": round(ready_s, 1),
        "window_s": round(window_s, 2),
        "cpu_s": {k: round(s1.cpu[k] - s0.cpu[k], 3) for k in s0.cpu},
        "idle_cores": {k: round((idle1.cpu[k] - idle0.cpu[k]) / idle_s, 4) for k in idle0.cpu},
        "messages": delta_messages(s0.offsets, s1.offsets),
        "idle_messages_per_s": round(
            delta_messages(idle0.offsets, idle1.offsets)["venn"] / idle_s, 1
        ),
        "answers": window_answers(answers, s0.wall, s1.wall),
        "scheduler_read": round(s1.scheduler_checkins - s0.scheduler_checkins),
        "gateway_counters": {k: v - s0.gateway.get(k, 0) for k, v in s1.gateway.items()},
        "loadgen": {k: load[k] for k in ("sent", "skipped", "errors")},
    }
    row["per_checkin"] = per_checkin(row)
    print(f"{setup.name}: {json.dumps({k: row[k] for k in ('per_checkin', 'cpu_s', 'idle_cores')})}"
          f" answers {row['answers']['reasons']}", flush=True)  # fmt: skip
    return row


def commit_tree(commit: str, given: str | None, workdir: Path) -> tuple[Path, bool]:
    """The tree of ``commit`` (``given``, or a worktree added here), and whether this run
    added it (to remove it)."""
    if given:
        return Path(given), False
    path = workdir / f"tree-{commit}"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path),
                    commit], check=True, capture_output=True)  # fmt: skip
    return path, True


async def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from devtools.brokers import local_broker

    once = setups(args.c_workers, args.before, args.edge)
    # Repeats interleaved, so that the machine's load hits every setup alike.
    plan = (
        once
        if args.repeats == 1
        else [replace(s, name=f"{s.name} #{k}") for k in range(1, args.repeats + 1) for s in once]
    )
    trees: dict[str, Path] = {"main": ROOT}
    added: list[Path] = []
    for name, commit, given in (("c", BASELINE_COMMIT, args.c_tree), ("edge", EDGE_COMMIT, None)):
        if any(s.tree == name for s in plan):
            trees[name], new = commit_tree(commit, given, workdir)
            if new:
                added.append(trees[name])
    broker = local_broker("kafka", workdir / "broker").start()
    rows = []
    try:
        pid = broker.pids()[0]
        for i, setup in enumerate(plan):
            tree = trees[setup.tree]
            # The first setup also warms the broker's JVM (it compiles its hot paths).
            warmup = args.warmup + (args.broker_warmup if i == 0 else 0.0)
            row = await run_setup(setup, tree, broker.bootstrap, pid, args, workdir, warmup)
            rows.append(row)
    finally:
        broker.stop()
        for path in added:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(path)], check=False)  # fmt: skip
    return {"rows": rows}


# -- report ----------------------------------------------------------------------------------


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [
        f"Run {meta['date']} ({meta['cores']} cores, shared): `{meta['command']}` "
        f"({meta['seconds']:.0f} s), commit {meta['commit']} (C: {BASELINE_COMMIT}). One "
        f"Apache Kafka node, {PARTITIONS} partitions; 4 jobs (one per paper tier) of demand "
        f"{meta['demand']}, deadline {meta['deadline_s']:g} s, round after round; "
        f"{meta['rate']:,.0f} check-ins/s over HTTP from {meta['fleet']:,} device ids, "
        f"window {meta['window_s']:g} s after {meta['warmup_s']:g} s of warm-up. CPU per "
        "check-in answered in the window (idle cost included; the idle cores are beside it).",
        "",
        "| design | check-ins/s answered | assigned/s | check-ins the scheduler read, per "
        "check-in | **scheduler CPU per check-in, µs** "
        "| **gateway CPU per check-in, µs** | broker CPU per check-in, µs "
        "| **broker messages per check-in** (venn.*) | all topics (changelogs too) "
        "| idle cores: scheduler / gateway / broker | p99 ms | assigned: p50 / p99 ms "
        "| answers in window |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for r in rows:
        s, p, idle = r["setup"], r["per_checkin"], r["idle_cores"]
        reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(r["answers"]["reasons"].items()))
        lines.append(
            f"| {s['name']}: {s['label']} | {p['checkins_per_s']:,.0f} | {p['assigned_per_s']:.1f} "
            f"| {p['scheduler_reads']:.3f} "
            f"| **{p['scheduler_us']:.1f}** | **{p['gateway_us']:.1f}** | {p['broker_us']:.1f} "
            f"| **{p['venn_messages']:.3f}** | {p['all_messages']:.3f} "
            f"| {idle['scheduler']:.3f} / {idle['gateway']:.3f} / {idle['broker']:.3f} "
            f"| {r['answers']['p99_ms']:.0f} "
            f"| {r['answers'].get('assigned_p50_ms', math.nan):.0f} / "
            f"{r['answers'].get('assigned_p99_ms', math.nan):.0f} | {reasons} |"
        )
    lines += ["", "Broker messages in the window by topic:", ""]
    for r in rows:
        by = ", ".join(f"{t} {n:,}" for t, n in r["messages"]["by_topic"].items())
        lines.append(f"- {r['setup']['name']}: {by}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["loadgen"]:
        return loadgen_main(argv[1:])
    if argv[:1] == ["stack"]:
        return stack_main(argv[1:])
    p = argparse.ArgumentParser(prog="python -m bench.designs_pipeline_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--rate", type=float, default=1000.0, help="check-ins/s, open loop")
    p.add_argument("--fleet", type=int, default=100_000, help="device ids drawn from")
    p.add_argument("--warmup", type=float, default=10.0)
    p.add_argument("--window", type=float, default=25.0)
    p.add_argument("--broker-warmup", type=float, default=15.0,
                   help="more warm-up for the first setup (a fresh broker JVM)")  # fmt: skip
    p.add_argument("--demand", type=int, default=50)
    p.add_argument("--deadline-s", type=float, default=5.0)
    p.add_argument("--c-workers", type=int, nargs="*", default=[2, 1])
    p.add_argument("--c-tree", help="a checkout of 97defac (default: a worktree added here)")
    p.add_argument("--before", action="store_true", help="also VENN_GATEWAY_FAST_NO=0")
    p.add_argument("--edge", action="store_true", help=f"also A from {EDGE_COMMIT}'s tree")
    p.add_argument(
        "--repeats", type=int, default=1, help="every setup this many times, interleaved"
    )
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    from bench.common import git_commit, preamble, write_block

    preamble("designs_pipeline_bench")
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="venn-designs-pipe-") as tmp:
        out = asyncio.run(measure(args, Path(tmp)))

    defaults = {"rate": 1000.0, "fleet": 100_000, "warmup": 10.0, "window": 25.0}
    command = (
        "python -m bench.designs_pipeline_bench"
        + "".join(
            f" --{k} {getattr(args, k):g}" for k, d in defaults.items() if getattr(args, k) != d
        )
        + (" --before" if args.before else "")
        + (" --edge" if args.edge else "")
        + (f" --repeats {args.repeats}" if args.repeats != 1 else "")
        + (f" --c-workers {' '.join(map(str, args.c_workers))}" if args.c_workers != [2, 1] else "")
    )
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
        "machine": f"{platform.machine()} {platform.python_implementation()} "
        f"{platform.python_version()}",
        "cores": os.cpu_count(),
        "command": command,
        "commit": git_commit(),
        "rate": args.rate,
        "fleet": args.fleet,
        "demand": args.demand,
        "deadline_s": args.deadline_s,
        "window_s": args.window,
        "warmup_s": args.warmup,
        "seconds": round(time.time() - started, 1),
    }
    text = markdown(meta, out["rows"])
    print(text)
    if not args.no_write:
        json_out, doc, block, title = (
            (
                EDGE_JSON_OUT,
                EDGE_DOC,
                "stream-edge",
                "The scheduler's stream edge, before and after",
            )
            if args.edge
            else (JSON_OUT, DOC, "designs-pipeline", "Scale-out designs in the pipeline")
        )
        json_out.write_text(json.dumps({"meta": meta, "rows": out["rows"]}, indent=1) + "\n")
        write_block(doc, block, text, title)
        print(f"\nwrote {json_out.relative_to(ROOT)} and {doc.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
