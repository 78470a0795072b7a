"""An open-loop check-in load on a gateway, and what it costs: shared by the pipeline, gateway
and gateway-bound benchmarks.

`gateway_step` runs the generator (`loadgen`, in a process of its own: requests sent at
fixed times, latency measured from the intended send time, so a slow gateway cannot slow
the load down) and reads the CPU per answered request of the gateway, the scheduler and
the broker from /proc; `gateway_sweep` steps up to saturation; `stack_factory` gives each
setup a fresh stack (`loadtest.stack.LoadStack`) on a broker of its own.

    python -m bench.gateway_load loadgen --url URL --rate R --duration S --attrs JSON --prefix P
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import os
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from devtools.procs import proc_cpu

ROOT = Path(__file__).resolve().parents[1]


WAIT_S = 2.0


DEMAND = 250


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    k = min(len(sorted_values) - 1, max(0, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


async def _loadgen(
    url: str,
    rate: float,
    duration: float,
    attrs: dict[str, float],
    prefix: str,
    limit: int,
    fleet: list[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """Without ``fleet`` every check-in is a new device ``<prefix>-<i>``, unauthenticated;
    with it, check-in i is from device ``fleet[i % len(fleet)]`` (device id, token): a fleet
    checking in again, each device with its own token."""
    import aiohttp

    total = max(1, int(rate * duration))
    latencies: list[float] = []
    by_status: dict[str, list[float]] = {}
    statuses: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    outstanding = 0
    skipped = 0
    devices = fleet or [(f"{prefix}-{i}", "") for i in range(total)]
    bodies = [
        msgspec.json.encode(
            {
                "device_id": device_id,
                "attrs": attrs,
                "speed_ms_per_sample": 60.0,
                "bandwidth_kbps": 12000.0,
            }
        )
        for device_id, _ in devices[:total]
    ]
    headers = [
        {"Content-Type": "application/json", **({"Authorization": f"Bearer {t}"} if t else {})}
        for _, t in devices[:total]
    ]
    connector = aiohttp.TCPConnector(limit=limit, force_close=False)
    timeout = aiohttp.ClientTimeout(total=WAIT_S + 5.0)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    finished = 0

    async def one(
        session: aiohttp.ClientSession, body: bytes, header: dict[str, str], due: float
    ) -> None:
        nonlocal outstanding, finished
        try:
            async with session.post(f"{url}/v1/checkin", data=body, headers=header) as r:
                payload = await r.read()
                latencies.append(loop.time() - due)
                by_status.setdefault(str(r.status), []).append(latencies[-1])
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
        for i in range(total):
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
            k = i % len(bodies)
            tasks.append(asyncio.ensure_future(one(session, bodies[k], headers[k], due)))
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
        "by_status": {
            code: {
                "answers": len(values),
                "p99_ms": round(percentile(sorted(values), 99) * 1000, 1),
                "max_ms": round(max(values) * 1000, 1),
                "over_bound": sum(v > WAIT_S for v in values),
            }
            for code, values in sorted(by_status.items())
        },
    }


def loadgen_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gateway_load loadgen")
    p.add_argument("--url", required=True)
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--attrs", required=True, help="JSON object")
    p.add_argument("--prefix", required=True)
    p.add_argument("--limit", type=int, default=256, help="max connections")
    p.add_argument("--fleet", help="JSON file: [[device_id, token], ...] checking in in turn")
    a = p.parse_args(argv)
    import uvloop

    fleet = [(d, t) for d, t in json.loads(Path(a.fleet).read_text())] if a.fleet else None
    result = uvloop.run(
        _loadgen(a.url, a.rate, a.duration, json.loads(a.attrs), a.prefix, a.limit, fleet)
    )
    print(json.dumps(result))
    return 0


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


def schedulers_cpu(stack: Any) -> float:
    """CPU seconds of every scheduler worker of the stack."""
    return sum(proc_cpu(pid) for pid in stack.scheduler_pids)


async def open_jobs(stack: Any, jobs: list[Any]) -> None:
    """Publish jobs and wait until the scheduler has read their registration and round."""
    from venn.broker import topics

    metric = "venn_scheduler_events_total"
    base = await asyncio.to_thread(stack.scheduler_metric, metric, topics.JOBS)
    await stack.publish_jobs(jobs)
    await wait_metric(stack, metric, topics.JOBS, base + 2 * len(jobs), 60)


async def idle_cpu(stack: Any, broker_pid: int | None, seconds: float = 5.0) -> dict[str, float]:
    """Cores that broker, scheduler and gateway use with nothing to do: mostly their
    consumers' empty fetches, whose count the fetch wait sets."""
    pids = {
        "broker": broker_pid,
        "scheduler": stack.scheduler.pid if stack.scheduler else None,
        "gateway": stack.gateway.pid if stack.gateway else None,
    }
    cpu0 = {k: proc_cpu(p) for k, p in pids.items()}
    await asyncio.sleep(seconds)
    return {k: round((proc_cpu(p) - cpu0[k]) / seconds, 3) for k, p in pids.items()}


@dataclass
class Step:
    mode: str
    target_rps: float
    result: dict[str, Any]
    cpu_us_per_request: dict[str, float] = field(default_factory=dict)
    window_s: float = 0.0
    """Wall time over which the CPU was read (the generator's whole run)."""

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
            "over_bound": sum(v["over_bound"] for v in r["by_status"].values()),
            "saturated": self.saturated,
            "cpu_us_per_request": self.cpu_us_per_request,
            "window_s": round(self.window_s, 2),
        }


async def gateway_step(
    stack: Any,
    mode: str,
    rate: float,
    duration: float,
    demand: int,
    broker_pid: int | None,
    fleet_file: Path | None = None,
) -> Step:
    """One open-loop step (`loadgen` in its own process) and the CPU per answered request of
    the gateway, scheduler and broker; ``fleet_file``: the devices and tokens that check in
    (see `_loadgen`), else a new unauthenticated device per check-in."""
    from loadtest.stack import probe_job

    tok = uuid.uuid4().hex[:6]
    attr = f"gw_{tok}"
    jobs = []
    if mode == "assigned":
        jobs = [
            probe_job(f"gw-{tok}-{j}", attr, demand)
            for j in range(math.ceil(rate * duration * 1.2 / demand))
        ]
        # Both the scheduler and the gateway's view must have the rounds open (the step's
        # jobs share one requirement, new to the gateway: one more open requirement).
        base = (await asyncio.to_thread(stack.gateway_health)).get("open_requirements", 0)
        await open_jobs(stack, jobs)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            health = await asyncio.to_thread(stack.gateway_health)
            if health.get("open_requirements", 0) > base:
                break
            await asyncio.sleep(0.05)
    pids = {
        "gateway": stack.gateway.pid if stack.gateway else None,
        "scheduler": stack.scheduler.pid if stack.scheduler else None,
        "broker": broker_pid,
    }
    cpu0 = {k: proc_cpu(p) for k, p in pids.items()}
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.gateway_load", "loadgen",
        "--url", stack.url, "--rate", str(rate), "--duration", str(duration),
        "--attrs", json.dumps({attr: 2.0} if mode == "assigned" else {f"none_{tok}": 1.0}),
        "--prefix", f"{mode}-{tok}",
        *(("--fleet", str(fleet_file)) if fleet_file else ()),
        stdout=asyncio.subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), duration + WAIT_S + 60)
    result = json.loads(out)
    answered = max(result["answered"], 1)
    cpu = {k: round((proc_cpu(p) - cpu0[k]) / answered * 1e6) for k, p in pids.items()}
    window = time.monotonic() - t0
    if jobs:
        await stack.publish_jobs(jobs, finish=True)
    return Step(mode, rate, result, cpu, window)


async def gateway_sweep(
    stack: Any,
    mode: str,
    rates: list[float],
    duration: float,
    demand: int,
    broker_pid: int | None,
    repeats: int,
    broker_idle_cores: float = 0.4,
    fresh_stack: Callable[[], contextlib.AbstractAsyncContextManager[tuple[Any, int]]]
    | None = None,
    fleet_file: Path | None = None,
) -> dict[str, Any]:
    """Steps at increasing rates until saturation, then the half-saturation rate `repeats`
    times, each on a fresh broker and stack when ``fresh_stack`` is given (on Tansu: the
    sweep's messages stay in its memory and slow it down; see run_bench)."""
    steps: list[Step] = []
    await settle(stack, broker_pid, broker_idle_cores)
    for rate in rates:
        step = await gateway_step(stack, mode, rate, duration, demand, broker_pid, fleet_file)
        steps.append(step)
        print(f"  {mode:8} {rate:>6.0f}/s -> {step.good_rps:>7.1f}/s  p50 "
              f"{step.result['p50_ms']:>7.1f}  p99 {step.result['p99_ms']:>7.1f} ms"
              f"{'  saturated' if step.saturated else ''}", flush=True)  # fmt: skip
        if step.saturated:
            break
        await settle(stack, broker_pid, broker_idle_cores)
    ok = [s for s in steps if not s.saturated]
    saturation = max((s.good_rps for s in steps), default=0.0)
    if ok:  # the highest rate that was still served within bounds
        saturation = max(saturation if steps[-1].saturated else 0.0, max(s.good_rps for s in ok))
    half = None
    if saturation > 0:
        # Repeated, median by p99: on a shared 2-core machine one run can land on a burst
        # of another tenant's work.
        runs = []
        for _ in range(repeats):
            ctx = fresh_stack() if fresh_stack else contextlib.nullcontext((stack, broker_pid))
            async with ctx as (half_stack, half_pid):
                await settle(half_stack, half_pid, broker_idle_cores)
                runs.append(
                    await gateway_step(
                        half_stack,
                        mode,
                        round(saturation / 2),
                        duration,
                        demand,
                        half_pid,
                        fleet_file,
                    )
                )
        runs.sort(key=lambda s: s.result["p99_ms"])
        half_step = runs[len(runs) // 2]
        p99s = [s.result["p99_ms"] for s in runs]
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
    broker_idle_cores: float = 0.4,
    idle_cores: float = 0.15,
    timeout: float = 90.0,
    broker_timeout: float = 15.0,
) -> None:
    """Until, over half a second, the scheduler uses less than `idle_cores` and the broker
    (when its pid is given) less than `broker_idle_cores`, so that a step does not start
    while the broker still works through the previous one. The broker's own idle use
    grows with what it stores (Tansu keeps every message in memory), so its condition is
    given up after `broker_timeout` seconds. With several scheduler workers, their sum."""
    start = time.monotonic()
    while time.monotonic() < start + timeout:
        before, broker_before = schedulers_cpu(stack), proc_cpu(broker_pid)
        await asyncio.sleep(0.5)
        sched_busy = (schedulers_cpu(stack) - before) / 0.5
        broker_busy = (proc_cpu(broker_pid) - broker_before) / 0.5 if broker_pid else 0.0
        broker_ok = broker_busy < broker_idle_cores or time.monotonic() > start + broker_timeout
        if sched_busy < idle_cores and broker_ok:
            return


@dataclass(frozen=True)
class Setup:
    """A broker kind and the client profile the services run with on it."""

    key: str
    broker: str
    tuning: str
    """A forced profile (VENN_BROKER_TUNING), or "" for the broker kind's own."""
    label: str
    fetch_wait_ms: int | None = None
    """Scheduler and gateway fetch wait instead of the profile's (a diagnostic)."""

    def stack_options(self) -> dict[str, Any]:
        if self.fetch_wait_ms is None:
            return {}
        wait = str(self.fetch_wait_ms)
        return {
            "scheduler_fetch_wait_ms": self.fetch_wait_ms,
            "gateway_env": {"VENN_GATEWAY_FETCH_WAIT_MS": wait},
        }

    @property
    def profile(self) -> str:
        return self.tuning or ("tansu" if self.broker == "tansu" else "kafka")


SETUPS = (
    Setup("kafka", "kafka", "", "Kafka, Kafka profile (settings on)"),
    Setup("kafka_tansu_profile", "kafka", "tansu", "Kafka, Tansu profile forced (settings off)"),
    Setup("tansu", "tansu", "", "Tansu, Tansu profile"),
    Setup("kafka_fetch10", "kafka", "", "Kafka, Kafka profile but 10 ms fetch waits", 10),
)


StackFactory = Callable[[], contextlib.AbstractAsyncContextManager[tuple[Any, int]]]


def stack_factory(setup: Setup, name: str, workdir: Path, **config: Any) -> StackFactory:
    """Fresh broker + stack for `setup`, each in a directory of its own under `workdir`
    (a Kafka broker keeps its logs there): yields the stack and the broker's pid."""
    from loadtest.stack import LoadStack, StackConfig

    runs = itertools.count()

    @contextlib.asynccontextmanager
    async def fresh() -> AsyncIterator[tuple[Any, int]]:
        stack_config = StackConfig(
            run_dir=workdir / f"{name}-{next(runs)}",
            broker_kind=setup.broker,
            broker_tuning=setup.tuning,
            coordinators=False,
            wait_s=WAIT_S,
            **config,
        )
        async with LoadStack(stack_config) as stack:
            yield stack, stack.broker_pids[0]

    return fresh


def gateway_histogram(url: str) -> dict[str, tuple[float, float]]:
    """Per status of /v1/checkin: (answers, answers within the bound) as the gateway itself
    measured them, from each check-in's arrival (venn_gateway_request_seconds)."""
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    bound = f'le="{WAIT_S:.1f}"'
    counts: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line.startswith("venn_gateway_request_seconds") or '"/v1/checkin"' not in line:
            continue
        status = line.split('status="', 1)[1].split('"', 1)[0]
        entry = counts.setdefault(status, [0.0, 0.0])
        if line.startswith("venn_gateway_request_seconds_count"):
            entry[0] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("venn_gateway_request_seconds_bucket") and bound in line:
            entry[1] = float(line.rsplit(" ", 1)[1])
    return {status: (n, within) for status, (n, within) in counts.items()}


if __name__ == "__main__":
    if sys.argv[1:2] == ["loadgen"]:
        raise SystemExit(loadgen_main(sys.argv[2:]))
    raise SystemExit("usage: python -m bench.gateway_load loadgen ...")
