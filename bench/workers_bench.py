"""Scheduler workers benchmark (issue 13, Must show): the raw broker consume rate of
check-ins, and check-in -> assignment throughput with scheduler CPU per check-in for the
single mode (1 worker, the baseline) and the leased mode with 1, 2 and 3 workers, in one
run on one Apache Kafka broker.

    .venv/bin/python bench/workers_bench.py            # about 6 minutes
    .venv/bin/python bench/workers_bench.py --quick    # smaller counts, one repeat

One Apache Kafka broker (from its jars, as bench/pipeline_bench.py starts it) serves the
whole run; every topic has 12 partitions, so that 1, 2 and 3 workers share them evenly.

1. Raw consume: check-ins encoded as the pipeline encodes them, packed into CheckinBatch
   messages of 128 (what the gateway and the fleet send; pipeline_bench's BATCH),
   produced to a 12-partition topic and read back from the beginning with aiokafka's
   `getmany` in this process (after a warm-up pass on a topic of its own); also the same
   check-ins one per message, as pipeline_bench measures it.
2. For each setup (single mode with 1 worker; leased mode with 1, 2, 3 workers): the Venn
   topics are deleted and created again (a new app would read the previous setup's
   check-ins from the beginning), then a LoadStack (loadtest/stack.py: the workers, one
   gateway, no coordinators) starts on the same broker; it is ready once the scheduler's
   consumer group is stable with all the workers and a probe device was assigned through
   the gateway. Each repeat registers jobs that every check-in is eligible for, with
   demand for 1.5x the check-ins (a leased partition without quota for a job passes a
   check-in over), waits until the workers are idle (grants delivered), produces the
   check-ins as CheckinBatch messages straight to venn.checkins and counts the
   assignments on venn.assignments until all came or none came for 3 s. Rate: assignments
   / (time of the last one - start of the produce). CPU: user + system time of every
   worker process from /proc, over the same window, divided by the check-ins produced.
   The repeat with the median rate is kept; every repeat is listed.

Writes docs/results/bench/workers.json and a section of docs/results/workers.md (between the
`<!-- bench:workers -->` markers).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.pipeline_bench import (  # noqa: E402
    BATCH,
    DEMAND,
    PROFILE_ATTRS,
    WAIT_S,
    _consume_all,
    as_messages,
    assignment_rate,
    broker_name,
    git_commit,
    machine_busy_s,
    own_cpu_s,
    proc_cpu,
    produce_batches,
    sample_checkin,
    schedulers_cpu,
    settle,
    write_doc,
)

JSON_OUT = ROOT / "docs" / "results" / "bench" / "workers.json"
DOC = ROOT / "docs" / "results" / "workers.md"
MARK_BEGIN = "<!-- bench:workers begin -->"
MARK_END = "<!-- bench:workers end -->"
PARTITIONS = 12
HEADROOM = 1.5
QUIET_S = 3.0
SEED = 1000
"""Check-ins of the bench's devices decided before its jobs register (pipeline_bench
assignment_rate)."""
RAW_BATCH_MESSAGES = 6000
SETUPS = (("single", 1), ("leased", 1), ("leased", 2), ("leased", 3))


@dataclass(frozen=True)
class Plan:
    raw_checkins: int
    checkins: int
    repeats: int


FULL = Plan(256_000, 15_000, 3)
QUICK = Plan(64_000, 10_000, 1)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def metric_sum(port: int, prefix: str) -> float:
    """Sum of every sample of a metric family on one worker's /metrics page (any labels)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(prefix + " ") or line.startswith(prefix + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


WORKER_METRICS = {
    "checkins": "venn_scheduler_checkins_total",
    "assignments": "venn_scheduler_assignments_total",
    "declined": "venn_scheduler_declined_total",
    "stale": "venn_scheduler_stale_checkins_total",
    "lease_messages": "venn_scheduler_lease_messages_total",
}


async def worker_counters(stack: Any) -> list[dict[str, float]]:
    return [
        {k: await asyncio.to_thread(metric_sum, port, m) for k, m in WORKER_METRICS.items()}
        for port in stack.scheduler_web_ports
    ]


async def decline_rate(stack: Any, broker_pid: int, n: int, idle_limit: float) -> dict[str, Any]:
    """n check-ins that no job admits (most check-ins of a large fleet), in CheckinBatch
    messages: check-ins/s until every worker counted them, and CPU of all workers."""
    await settle(stack, broker_pid, idle_cores=idle_limit)
    tok = uuid.uuid4().hex[:6]
    attrs = {f"none_{tok}": 1.0}
    values = [
        (f"none-{tok}-{i}".encode(), sample_checkin(i, attrs, f"none-{tok}")) for i in range(n)
    ]
    messages = as_messages(values, BATCH)

    async def counted() -> float:
        return sum(c["checkins"] for c in await worker_counters(stack))

    base = await counted()
    cpu0 = schedulers_cpu(stack)
    start = time.perf_counter()
    await produce_batches(stack.bootstrap, "venn.checkins", messages)
    done = None
    while time.perf_counter() - start < 120:
        if await counted() >= base + n:
            done = time.perf_counter()
            break
        await asyncio.sleep(0.05)
    seconds = (done or time.perf_counter()) - start
    return {
        "checkins": n,
        "rate": round(n / seconds) if done else None,
        "cpu_us_per_checkin": round((schedulers_cpu(stack) - cpu0) / n * 1e6, 1),
        "completed": done is not None,
    }


# -- profile -------------------------------------------------------------------------------


OWN_CODE = ("venn/", "services/", "aiokafka/", "faust/", "msgspec")
"""Frames counted for "anywhere on the stack" (the others are on nearly every stack)."""
ENTRY_FRAMES = ("__main__", "faust/cli", "faust/app/base.py")
"""The worker's entry point: on every stack."""


def profile_summary(raw: str, top: int = 14) -> dict[str, list[tuple[str, float]]]:
    """py-spy's raw (collapsed) output -> the functions with the most samples at the top of
    the stack (self) and anywhere on it (total; Venn's, Faust's, aiokafka's and msgspec's
    frames only, the worker's entry point left out), as shares of all samples."""
    self_n: dict[str, int] = {}
    total_n: dict[str, int] = {}
    samples = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        samples += n
        frames = stack.split(";")
        leaf = frames[-1]
        self_n[leaf] = self_n.get(leaf, 0) + n
        for frame in set(frames):
            mine = any(k in frame for k in OWN_CODE)
            if mine and not any(k in frame for k in ENTRY_FRAMES):
                total_n[frame] = total_n.get(frame, 0) + n

    def ranked(counts: dict[str, int]) -> list[tuple[str, float]]:
        best = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
        return [(name, round(c / max(samples, 1) * 100, 1)) for name, c in best]

    return {"samples": [("all", float(samples))], "self": ranked(self_n),
            "total": ranked(total_n)}  # fmt: skip


async def profiled_run(
    stack: Any, broker_pid: int, workdir: Path, idle: float, n: int, keep: Path | None
) -> dict[str, Any]:
    """One more repeat (not counted) with py-spy sampling every worker; `keep`: a
    directory to copy the raw profiles to."""
    import shutil
    import signal
    import subprocess

    spy = Path(sys.executable).with_name("py-spy")
    tok = uuid.uuid4().hex[:6]
    outs = [workdir / f"profile-{tok}-worker{i + 1}.txt" for i in range(len(stack.scheduler_pids))]
    procs = [
        subprocess.Popen(
            [
                str(spy),
                "record",
                "-p",
                str(pid),
                "-r",
                "100",
                "-f",
                "raw",
                "-o",
                str(out),
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid, out in zip(stack.scheduler_pids, outs, strict=True)
    ]
    try:
        await asyncio.sleep(1.0)
        run = await assignment_rate(
            stack, n, DEMAND, BATCH, 180, headroom=HEADROOM, quiet_s=QUIET_S,
            before_produce=lambda: settle(stack, broker_pid, idle_cores=idle),
            seed_supply=SEED,
        )  # fmt: skip
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        for proc in procs:
            proc.wait(30)
    summaries = [profile_summary(out.read_text()) if out.exists() else {} for out in outs]
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        for out in outs:
            if out.exists():
                shutil.copy(out, keep / out.name)
    return {"run": run, "py_spy": summaries[0], "py_spy_workers": summaries}


# -- 1. raw consume ------------------------------------------------------------------------


async def raw_consume(bootstrap: str, broker_pid: int, n: int) -> dict[str, Any]:
    """Consume rates of check-ins, in CheckinBatch messages of BATCH and one per message."""
    from venn.broker.topics import delete_topics, ensure_topics

    tok = uuid.uuid4().hex[:6]
    names = {k: f"bench.{k}.{tok}" for k in ("batched", "single", "warm")}
    await ensure_topics(bootstrap, PARTITIONS, names=list(names.values()))
    values = [(f"raw-dev-{i:09d}".encode(), sample_checkin(i, PROFILE_ATTRS)) for i in range(n)]
    # The same messages several times over (the broker does not look inside), so that a
    # read takes long enough to time.
    batched = as_messages(values, BATCH)
    batched *= max(1, RAW_BATCH_MESSAGES // len(batched))
    # Warm-up on a topic of its own: a fresh JVM interprets, then compiles, its hot paths.
    await produce_batches(bootstrap, names["warm"], batched[: len(batched) // 4])
    await produce_batches(bootstrap, names["warm"], values[: n // 4])
    await _consume_all(bootstrap, names["warm"], len(batched) // 4 + n // 4, PARTITIONS)
    out: dict[str, Any] = {}
    for key, messages, per in (("batched", batched, BATCH), ("single", values, 1)):
        await produce_batches(bootstrap, names[key], messages)
        runs = []
        for _ in range(3):
            cpu0, mine0 = proc_cpu(broker_pid), own_cpu_s()
            got, seconds = await _consume_all(bootstrap, names[key], len(messages), PARTITIONS)
            cpu, mine = proc_cpu(broker_pid) - cpu0, own_cpu_s() - mine0
            runs.append({
                "messages": got,
                "seconds": round(seconds, 3),
                "messages_per_s": round(got / seconds),
                "checkins_per_s": round(got * per / seconds) if per > 1 else round(got / seconds),
                "broker_cpu_us_per_msg": round(cpu / max(got, 1) * 1e6, 2),
                "consumer_cpu_us_per_msg": round(mine / max(got, 1) * 1e6, 2),
            })  # fmt: skip
        runs.sort(key=lambda r: r["checkins_per_s"])
        out[key] = {
            **runs[1],
            "checkins_per_message": per,
            "message_bytes": round(sum(len(v) for _, v in messages) / len(messages)),
            "checkins_per_s_repeats": [r["checkins_per_s"] for r in runs],
        }
        print(f"  raw consume, {key}: {out[key]}", flush=True)
    await delete_topics(bootstrap, list(names.values()))
    return out


# -- 2. the setups -------------------------------------------------------------------------


async def fresh_topics(bootstrap: str, extra: list[str]) -> None:
    from venn.broker.topics import ALL_TOPICS, delete_topics

    await delete_topics(bootstrap, [*ALL_TOPICS, *extra], timeout=60.0)


async def setup_phase(
    mode: str,
    workers: int,
    bootstrap: str,
    broker_pid: int,
    workdir: Path,
    plan: Plan,
    profile: bool = False,
    profile_checkins: int = 0,
    keep: Path | None = None,
) -> dict[str, Any]:
    from loadtest.stack import LoadStack, StackConfig
    from venn.broker import topics

    started = time.monotonic()
    config = StackConfig(
        run_dir=workdir / f"{mode}-{workers}",
        broker=bootstrap,
        broker_kind="kafka",
        partitions=PARTITIONS,
        coordinators=False,
        wait_s=WAIT_S,
        scheduler_mode=mode,
        workers=workers,
    )
    idle_limit = 0.1 + 0.05 * workers
    async with LoadStack(config) as stack:
        out: dict[str, Any] = {
            "mode": mode,
            "workers": workers,
            "ready_s": round(time.monotonic() - started, 1),
        }
        await settle(stack, broker_pid, idle_cores=idle_limit)
        cpu0 = schedulers_cpu(stack)
        await asyncio.sleep(3.0)
        out["idle_cores"] = round((schedulers_cpu(stack) - cpu0) / 3.0, 3)
        print(f"  ready in {out['ready_s']} s; workers idle at {out['idle_cores']} cores",
              flush=True)  # fmt: skip
        before = await worker_counters(stack)
        runs = []
        for _ in range(plan.repeats):
            await settle(stack, broker_pid, idle_cores=idle_limit)
            counters0 = await worker_counters(stack)
            run = await assignment_rate(
                stack, plan.checkins, DEMAND, BATCH, 180, headroom=HEADROOM, quiet_s=QUIET_S,
                seed_supply=SEED,
                before_produce=lambda: settle(stack, broker_pid, idle_cores=idle_limit),
            )  # fmt: skip
            counters1 = await worker_counters(stack)
            run["per_worker"] = [
                {k: round(c1[k] - c0[k]) for k in WORKER_METRICS}
                for c0, c1 in zip(counters0, counters1, strict=True)
            ]
            runs.append(run)
            print(f"  {run['rate']} assignments/s ({run['assigned']} of {run['checkins']}), "
                  f"{run['scheduler_cpu_us_per_checkin']} µs CPU per check-in; per worker "
                  f"{run['per_worker']}", flush=True)  # fmt: skip
        after = await worker_counters(stack)
        out["declined"] = await decline_rate(stack, broker_pid, plan.checkins, idle_limit)
        print(f"  declined: {out['declined']}", flush=True)
        if profile:
            await settle(stack, broker_pid, idle_cores=idle_limit)
            out["profile"] = await profiled_run(
                stack, broker_pid, workdir, idle_limit, profile_checkins or plan.checkins, keep
            )
            print(f"  profiled: {out['profile']}", flush=True)
        out["worker_totals"] = [
            {k: round(a[k] - b[k]) for k in WORKER_METRICS}
            for b, a in zip(before, after, strict=True)
        ]
        assert stack.settings is not None
        changelogs = topics.scheduler_changelogs(stack.settings.app_id)
    ranked = sorted(runs, key=lambda r: r["rate"])
    out["run"] = ranked[len(ranked) // 2]
    out["rate_repeats"] = [r["rate"] for r in runs]
    out["cpu_us_per_checkin_repeats"] = [r["scheduler_cpu_us_per_checkin"] for r in runs]
    await fresh_topics(bootstrap, changelogs)
    return out


# -- report --------------------------------------------------------------------------------


def summarise(result: dict[str, Any]) -> None:
    raw = result["raw"]["batched"]["checkins_per_s"]
    rows = result["setups"]
    base = rows.get("single-1", {}).get("run")
    leased1 = rows.get("leased-1", {}).get("run")
    for row in rows.values():
        r = row["run"]
        row["over_raw_pct"] = round(r["rate"] / raw * 100, 2)
        if base:
            row["rate_vs_single"] = round(r["rate"] / base["rate"], 2)
            row["cpu_vs_single"] = round(
                r["scheduler_cpu_us_per_checkin"] / base["scheduler_cpu_us_per_checkin"], 2
            )
        if leased1:
            row["cpu_vs_leased_1"] = round(
                r["scheduler_cpu_us_per_checkin"] / leased1["scheduler_cpu_us_per_checkin"], 2
            )
    two = rows.get("leased-2", {})
    result["goals"] = {
        "cpu_2_workers_over_1": two.get("cpu_vs_leased_1"),
        "cpu_goal_met": (two.get("cpu_vs_leased_1") or 99) <= 1.2,
        "one_worker_over_raw_pct": rows.get("single-1", {}).get("over_raw_pct"),
        "leased_one_worker_over_raw_pct": rows.get("leased-1", {}).get("over_raw_pct"),
        "raw_goal_met": (rows.get("single-1", {}).get("over_raw_pct") or 0) >= 50,
    }


def report_markdown(r: dict[str, Any]) -> str:
    meta, raw = r["meta"], r["raw"]
    lines = [
        "### Measured: workers, throughput and CPU per check-in",
        "",
        f"`{meta['command']}` ({meta['date']} UTC, commit {meta['commit']}, "
        f"{meta['seconds']:.0f} s wall), on {meta['broker']} (one broker for the whole run), "
        f"{meta['cpu']}, {meta['cpus']} cores, {meta['machine']}. Load average "
        f"{meta['loadavg_start']} at the start, {meta['loadavg_end']} at the end; other "
        f"processes used {meta['other_processes_cpu_cores']} cores on average during the run "
        f"({meta['other_note']}). Topics of {PARTITIONS} partitions; {meta['plan']['checkins']:,} "
        f"check-ins per repeat in CheckinBatch messages of {BATCH}, {DEMAND} demand per job, "
        f"demand for {HEADROOM}x the check-ins; median of {meta['plan']['repeats']} repeats "
        "(all listed in docs/results/bench/workers.json).",
        "",
        "Raw broker consume (aiokafka `getmany`, one consumer in the bench process, median "
        "of 3 reads):",
        "",
        "| messages | bytes per message | messages/s | check-ins/s |",
        "| --- | --- | --- | --- |",
    ]
    for key, label in (("batched", f"CheckinBatch of {BATCH}"), ("single", "one check-in each")):
        x = raw[key]
        lines.append(f"| {label} | {x['message_bytes']:,} | {x['messages_per_s']:,} | "
                     f"{x['checkins_per_s']:,} |")  # fmt: skip
    lines += [
        "",
        "Check-in -> assignment (assignments seen on venn.assignments; CPU of all workers "
        "from /proc):",
        "",
        "| mode | workers | ready (s) | assignments/s | assigned / check-ins | µs CPU per "
        "check-in (all workers) | vs single | vs leased 1 | % of raw consume (check-ins/s) "
        "| check-ins decided per worker | lease messages | rate repeats |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in r["setups"].values():
        run = row["run"]
        per = " / ".join(f"{w['checkins']:,}" for w in run["per_worker"])
        lease = sum(w["lease_messages"] for w in run["per_worker"])
        lines.append(
            f"| {row['mode']} | {row['workers']} | {row['ready_s']} | {run['rate']:,} | "
            f"{run['assigned']:,} / {run['checkins']:,} | "
            f"{run['scheduler_cpu_us_per_checkin']} | {row.get('cpu_vs_single', '-')}x | "
            f"{row.get('cpu_vs_leased_1', '-')}x | {row['over_raw_pct']}% | {per} | "
            f"{lease:,} | {', '.join(f'{x:,}' for x in row['rate_repeats'])} |"
        )
    g = r["goals"]
    lines += [
        "",
        f"Goals: CPU per check-in with 2 workers / 1 worker (leased) = "
        f"{g['cpu_2_workers_over_1']} (goal <= 1.2: "
        f"{'met' if g['cpu_goal_met'] else 'not met'}); one worker (single mode) at "
        f"{g['one_worker_over_raw_pct']}% of the raw consume rate of check-ins (goal >= 50%: "
        f"{'met' if g['raw_goal_met'] else 'not met'}); leased, one worker: "
        f"{g['leased_one_worker_over_raw_pct']}%.",
    ]
    if all("declined" in row for row in r["setups"].values()):
        lines += [
            "",
            f"Check-ins that no job admits ({r['meta']['plan']['checkins']:,} in CheckinBatch "
            f"messages of {BATCH}, after the repeats; decided once every worker counted them):",
            "",
            "| mode | workers | check-ins/s | µs CPU per check-in (all workers) |",
            "| --- | --- | --- | --- |",
        ]
        for row in r["setups"].values():
            d = row["declined"]
            rate = f"{d['rate']:,}" if d["rate"] else "not all counted in 120 s"
            lines.append(
                f"| {row['mode']} | {row['workers']} | {rate} | {d['cpu_us_per_checkin']} |"
            )
    for key, row in r["setups"].items():
        prof = row.get("profile")
        if not prof or not prof.get("py_spy"):
            continue
        spy, run = prof["py_spy"], prof["run"]
        lines += [
            "",
            f"py-spy, {key}, first worker (one more repeat, not counted above: "
            f"{run['rate']:,} assignments/s, {run['scheduler_cpu_us_per_checkin']} µs per "
            f"check-in under the profiler; {spy['samples'][0][1]:,.0f} samples at 100/s, "
            "py-spy leaves idle samples out). Share of samples:",
            "",
            "| function (self) | % | function (anywhere on the stack) | % |",
            "| --- | --- | --- | --- |",
        ]
        for (fs, ps), (ft, pt) in zip(spy["self"], spy["total"], strict=False):
            lines.append(f"| `{fs}` | {ps} | `{ft}` | {pt} |")
    return "\n".join(lines)


async def run_bench(
    plan: Plan,
    command: str,
    workdir: Path,
    setups: list[tuple[str, int]],
    profile: set[str],
    profile_checkins: int = 0,
    keep: Path | None = None,
) -> dict[str, Any]:
    from venn.broker.local import local_broker

    started = time.time()
    load0 = round(os.getloadavg()[0], 2)
    busy0, own0 = machine_busy_s(), own_cpu_s()
    result: dict[str, Any] = {
        "meta": {
            "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime(started)),
            "machine": platform.machine() + " " + platform.python_implementation() + " "
            + platform.python_version(),
            "cpu": cpu_model(),
            "cpus": os.cpu_count(),
            "loadavg_start": load0,
            "command": command,
            "commit": git_commit(),
            "plan": plan.__dict__,
            "broker": broker_name("kafka"),
            "partitions": PARTITIONS,
        }
    }  # fmt: skip
    broker = local_broker("kafka", workdir / "broker").start()
    try:
        pid = broker.pids()[0]
        phases: dict[str, Any] = {}
        t0 = time.monotonic()
        print("raw consume", flush=True)
        result["raw"] = await raw_consume(broker.bootstrap, pid, plan.raw_checkins)
        phases["raw"] = round(time.monotonic() - t0, 1)
        result["setups"] = {}
        for mode, workers in setups:
            t0, l0 = time.monotonic(), round(os.getloadavg()[0], 2)
            print(f"{mode}, {workers} worker(s)", flush=True)
            row = await setup_phase(
                mode, workers, broker.bootstrap, pid, workdir, plan,
                f"{mode}-{workers}" in profile, profile_checkins, keep,
            )  # fmt: skip
            row["phase_s"] = round(time.monotonic() - t0, 1)
            row["loadavg_start"], row["loadavg_end"] = l0, round(os.getloadavg()[0], 2)
            result["setups"][f"{mode}-{workers}"] = row
        result["meta"]["phases_s"] = phases
    finally:
        broker.stop()
    seconds = time.time() - started
    other = max(0.0, (machine_busy_s() - busy0) - (own_cpu_s() - own0)) / seconds
    result["meta"].update(
        seconds=round(seconds, 1),
        loadavg_end=round(os.getloadavg()[0], 2),
        other_processes_cpu_cores=round(other, 2),
    )
    summarise(result)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/workers_bench.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--quick", action="store_true", help="smaller counts, one repeat")
    p.add_argument("--note", default="", help="what else ran on the machine (for the docs)")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument(
        "--setups",
        nargs="+",
        default=[f"{m}-{w}" for m, w in SETUPS],
        choices=[f"{m}-{w}" for m, w in SETUPS],
        help="which setups (default all)",
    )
    p.add_argument(
        "--profile-checkins",
        type=int,
        default=0,
        help="check-ins of the profiled repeat (default: as the others)",
    )
    p.add_argument("--keep-profiles", type=Path, help="copy py-spy's raw profiles here")
    p.add_argument(
        "--out",
        type=Path,
        default=JSON_OUT,
        help="JSON to write; another than the default writes no doc section",
    )
    p.add_argument("--report", action="store_true",
                   help="measure nothing: write the doc section again from the JSON")  # fmt: skip
    p.add_argument("--profile", nargs="*", default=[], metavar="SETUP",
                   help="after the repeats of these setups (e.g. single-1 leased-1), one more "
                   "run with py-spy sampling the first worker (not counted)")  # fmt: skip
    args = p.parse_args(argv)
    if args.report:
        import json

        write_doc(report_markdown(json.loads(JSON_OUT.read_text())), DOC, MARK_BEGIN, MARK_END)
        return 0
    plan = QUICK if args.quick else FULL
    command = "python bench/workers_bench.py" + (" --quick" if args.quick else "")
    command += " --profile " + " ".join(args.profile) if args.profile else ""
    if args.setups != [f"{m}-{w}" for m, w in SETUPS]:
        command += " --setups " + " ".join(args.setups)
    if args.profile_checkins:
        command += f" --profile-checkins {args.profile_checkins}"
    import uvloop

    with tempfile.TemporaryDirectory(prefix="venn-workers-bench-") as tmp:
        setups = [(m, w) for m, w in SETUPS if f"{m}-{w}" in args.setups]
        result = uvloop.run(
            run_bench(plan, command, Path(tmp), setups, set(args.profile),
                      args.profile_checkins, args.keep_profiles)
        )  # fmt: skip
    result["meta"]["other_note"] = args.note or "not noted"
    markdown = report_markdown(result)
    print()
    print(markdown)
    if not args.no_write:
        import json

        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"\nwrote {args.out}")
        if args.out.resolve() == JSON_OUT.resolve():
            write_doc(markdown, DOC, MARK_BEGIN, MARK_END, "# Scheduler workers (generated)")
            print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
