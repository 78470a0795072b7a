"""Gateway benchmark: today's gateway against the baseline gateway (bf30edb), in one run.

    .venv/bin/python -m bench.gateway_bench              # about 8 minutes
    .venv/bin/python -m bench.gateway_bench --quick      # one repeat, shorter steps
    .venv/bin/python -m bench.gateway_bench --no-write   # print, publish nothing

The baseline is the gateway before issue 21 item 3 (commit bf30edb: every token verified
per request, the gateway in one module, Assignment v1), exported with `git archive` into
the run's temp dir. Stacks of the two trees take turns (A B A B ...): each is started with
`venn up` from its tree (PYTHONPATH: the services it starts run that tree's code) in a run
dir of its own (Apache Kafka, PostgreSQL, scheduler, recorder, gateway; authentication on,
as `venn up` has it) and stopped with `venn down`. On each, the gateway is driven over HTTP
by the open-loop generator of bench/pipeline_bench.py in its own process (requests sent at
fixed times, latency from the intended send time):

1. answered at once: a fleet of FLEET devices, each with its own device token, checks in in
   turn with attributes no job admits (each device about every FLEET/rate seconds, as a
   fleet's retries reuse their tokens; one pass warms the gateway first). The gateway's,
   scheduler's and broker's CPU per check-in from /proc/<pid>/stat over the window;
2. assigned: open jobs (probe jobs of loadtest/stack.py, demand absorbing every check-in)
   and devices that checked in once before (their tokens seen) checking in eligible: CPU
   per check-in, each answered with an assignment;
3. saturation: the answered-at-once path at increasing rates until a step is saturated
   (pipeline_bench.gateway_sweep: good answers under 95 %, p99 past the bound, an error or
   a non-200), then the p99 at half the saturation rate;
4. answers past the bound (VENN_GATEWAY_WAIT_S, 2 s): as the devices saw them (from the
   intended send time, every step) and as the gateway measured them (its
   venn_gateway_request_seconds histogram, bench/gateway_bound_bench.py).

Then (unless --no-profile) today's gateway once more under pyinstrument, for each path.
Both trees take the same request shapes and tokens (HS256 device tokens of the run dir's
secret, unchanged since the baseline); the jobs are JobRegistered + RoundRequested events
with an operator token, also unchanged. Writes docs/results/bench/gateway.json and the
tables between the `bench:gateway` markers of docs/results/gateway.md.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import git_commit, preamble, write_block
from bench.gateway_load import (
    Step,
    gateway_histogram,
    gateway_step,
    gateway_sweep,
    idle_cpu,
    profile_summary,
    settle,
)

ROOT = Path(__file__).resolve().parents[1]


JSON_OUT = ROOT / "docs" / "results" / "bench" / "gateway.json"
DOC = ROOT / "docs" / "results" / "gateway.md"
BASELINE = "bf30edb"
FLEET = 2000
"""Devices of the answered-at-once fleet: at 500 check-ins/s each checks in every 4 s."""
IDLE_S = 5.0
"""Seconds over which each process's idle CPU is read before the steps."""
GOALS = {"instant_us": 50.0, "assigned_us": 100.0, "half_p99_ms": 50.0}


@dataclass(frozen=True)
class Plan:
    repeats: int
    cpu_rate: float
    cpu_s: float
    assigned_rate: float
    assigned_s: float
    sweep_rates: tuple[float, ...]
    step_s: float
    demand: int
    half_repeats: int
    """Steps at half the saturation rate (their median p99 is the figure)."""


FULL = Plan(2, 1000, 8.0, 300, 8.0, (1000, 2000, 3000, 4000), 4.0, 1000, 3)
QUICK = Plan(1, 400, 4.0, 100, 4.0, (500, 1500, 3000), 3.0, 1000, 1)


class Proc:
    def __init__(self, pid: int) -> None:
        self.pid = pid


class UpStack:
    """A stack `venn up` started from ``tree`` in ``run_dir``, with what pipeline_bench's
    gateway steps ask of a stack (url, pids, health, scheduler metrics, publish_jobs)."""

    def __init__(self, tree: Path, run_dir: Path) -> None:
        from venn.net import free_port

        self.tree = tree
        self.run_dir = run_dir
        self.env = {
            **os.environ,
            "PYTHONPATH": str(tree),
            "VENN_RUN_DIR": str(run_dir),
            "VENN_BROKER_KIND": "kafka",
            "VENN_BROKER": f"127.0.0.1:{free_port()}",
            "VENN_GATEWAY_PORT": str(free_port()),
        }
        self.gateway: Proc | None = None
        self.scheduler: Proc | None = None
        self.broker_pid: int | None = None
        self.ports: dict[str, int] = {}
        self.profiled: subprocess.Popen[bytes] | None = None

    def _venn(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "venn.cli", *args],
            env=self.env,
            cwd=self.run_dir.parent,
            capture_output=True,
            text=True,
            timeout=180,
        )
        if done.returncode != 0:
            raise RuntimeError(f"venn {' '.join(args)}: {done.stdout}{done.stderr}")
        return done.stdout

    def up(self) -> None:
        from devtools.brokers import read_detached
        from devtools.stack.processes import running_services
        from venn.settings import stack_ports

        self._venn("up")
        services = running_services(self.run_dir)
        self.gateway = Proc(services["gateway"])
        self.scheduler = Proc(services["scheduler"])
        record = read_detached(self.run_dir)
        self.broker_pid = record.pids[0] if record else None
        self.ports = stack_ports(self.run_dir)

    def down(self) -> None:
        if self.profiled is not None:
            self.stop_profiled()
        self._venn("down")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports['gateway']}"

    @property
    def scheduler_pids(self) -> list[int]:
        return [self.scheduler.pid] if self.scheduler else []

    def settings(self) -> Any:
        from venn.settings import Settings

        return Settings.from_env({"VENN_RUN_DIR": str(self.run_dir)})

    def gateway_health(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/healthz", timeout=10) as r:
            health: dict[str, Any] = json.loads(r.read())
        return health

    def scheduler_metric(self, name: str, topic: str | None = None) -> float:
        from loadtest.stack import LoadStack

        return LoadStack.worker_metric(self.ports["scheduler"], name, topic)

    def fleet(self, prefix: str, n: int, path: Path) -> Path:
        """``n`` devices ``<prefix>-<k>``, each with a device token, written for the
        generator's --fleet."""
        return self.fleet_file(prefix, n, self.settings().auth_secret, path.parent)

    @staticmethod
    def fleet_file(prefix: str, n: int, secret: str, workdir: Path) -> Path:
        """``n`` devices ``<prefix>-<k>`` with device tokens of ``secret`` (none without)."""
        from venn.auth import Tokens

        tokens = Tokens(secret) if secret else None
        ids = [f"{prefix}-{k}" for k in range(n)]
        devices = [(d, tokens.issue("device", d, ttl_s=6 * 3600.0) if tokens else "") for d in ids]
        path = workdir / f"{prefix}.json"
        path.write_text(json.dumps(devices))
        return path

    async def publish_jobs(self, jobs: list[Any], finish: bool = False) -> None:
        """Register ``jobs`` and open their round 0 (or finish them) on the stack's Kafka,
        signed with an operator token (as loadtest's LoadStack.publish_jobs, which runs
        unauthenticated)."""

        from venn import events as ev
        from venn.auth import Tokens
        from venn.broker import security, topics
        from venn.broker.publish import send_events

        settings = self.settings()
        token = Tokens(settings.auth_secret).issue("admin", "gateway-bench", ttl_s=3600.0)
        now = time.time()
        events: list[tuple[str, ev.Event]] = []
        for j in jobs:
            if finish:
                events.append((topics.ROUNDS, ev.JobFinished(
                    event_id=f"fin-{j.job_id}", time=now, job_id=j.job_id, rounds_completed=0,
                    arrival=now, finished_at=now, jct_s=0.0, token=token,
                )))  # fmt: skip
                continue
            events.append((topics.JOBS, ev.JobRegistered(
                event_id=f"reg-{j.job_id}", time=now, job_id=j.job_id,
                requirement=j.requirement.as_dict(), demand=j.demand, rounds=j.rounds,
                deadline_s=j.deadline, workload_s=j.workload_s, token=token,
            )))  # fmt: skip
            events.append((topics.JOBS, ev.RoundRequested(
                event_id=f"rr-{j.job_id}-0", time=now, job_id=j.job_id, round_index=0,
                demand=j.demand, token=token,
            )))  # fmt: skip
        options = settings.for_role(security.ADMIN).kafka_options
        await send_events(settings.broker, events, **options)

    def profile_gateway(self, out: Path) -> None:
        """Restart the gateway under pyinstrument, with the environment `venn up` gave it."""
        from devtools.stack.processes import stop_pid
        from venn.net import wait_listening

        assert self.gateway is not None
        pid = self.gateway.pid
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        env = dict(e.decode().split("=", 1) for e in raw if b"=" in e)
        stop_pid(pid)
        command = [sys.executable, "-m", "pyinstrument", "-r", "session", "-o", str(out)]
        command += ["-m", "services.gateway", "--log-level", "WARNING"]
        with open(self.run_dir / "gateway-profiled.log", "ab") as log:
            self.profiled = subprocess.Popen(
                command, env=env, cwd=self.run_dir, stdout=log, stderr=subprocess.STDOUT
            )
        self.gateway = Proc(self.profiled.pid)
        if not wait_listening("127.0.0.1", self.ports["gateway"], 60.0):
            raise RuntimeError("the profiled gateway does not listen")
        deadline = time.monotonic() + 30
        while not self.gateway_health().get("demand_view_ready"):
            if time.monotonic() > deadline:
                raise RuntimeError("the profiled gateway's demand view is not ready")
            time.sleep(0.2)

    def stop_profiled(self) -> None:
        assert self.profiled is not None
        self.profiled.send_signal(signal.SIGTERM)
        try:
            self.profiled.wait(60)
        except subprocess.TimeoutExpired:
            self.profiled.kill()
            self.profiled.wait()
        self.profiled = None


def serve_floor(port: int) -> None:
    """`gateway_bench.py floor PORT`: the least an aiohttp check-in endpoint costs here (the
    body read and decoded, an answer of the gateway's shape encoded; no middleware, token,
    view or Kafka), served as the gateway serves (uvloop, no access log)."""
    import msgspec
    import uvloop
    from aiohttp import web

    encode = msgspec.json.Encoder().encode

    async def checkin(request: web.Request) -> web.Response:
        msgspec.json.decode(await request.read())
        answer = {"assigned": False, "retry_after": 30, "reason": "no_open_round",
                  "checkin_id": "gw-" + os.urandom(12).hex()}  # fmt: skip
        return web.Response(body=encode(answer), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/checkin", checkin)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None,
                loop=uvloop.new_event_loop())  # fmt: skip


class FloorStack:
    """The bare server of `serve_floor` in its own process, as a stack for gateway_step."""

    def __init__(self) -> None:
        from venn.net import free_port

        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.scheduler = None
        self.scheduler_pids: list[int] = []
        self.gateway: Proc | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FloorStack:
        from venn.net import wait_listening

        command = [sys.executable, "-m", "bench.gateway_bench", "floor", str(self.port)]
        self.proc = subprocess.Popen(command, cwd=ROOT)
        self.gateway = Proc(self.proc.pid)
        if not wait_listening("127.0.0.1", self.port, 30.0):
            raise RuntimeError("the floor server does not listen")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.terminate()
        self.proc.wait(30)


async def measure_floor(plan: Plan, workdir: Path) -> dict[str, Any]:
    with FloorStack() as floor:
        fleet = UpStack.fleet_file(f"floor-{uuid.uuid4().hex[:6]}", FLEET, "", workdir)
        step = await gateway_step(floor, "instant", plan.cpu_rate, plan.cpu_s, plan.demand,
                                     None, fleet)  # fmt: skip
    print(f"  aiohttp floor {plan.cpu_rate:.0f}/s: cpu µs/request "
          f"{step.cpu_us_per_request['gateway']}", flush=True)  # fmt: skip
    return step.row()


def tree_at(rev: str, workdir: Path) -> Path:
    """A commit's files (git archive), for `venn up` to run from."""
    out = workdir / f"tree-{rev}"
    data = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(out, filter="data")
    return out


def over_bound(before: dict[str, Any], after: dict[str, Any]) -> int:
    """Check-in answers past the bound by the gateway's own histogram between two reads."""
    total = 0
    for code, (n1, in1) in after.items():
        n0, in0 = before.get(code, (0.0, 0.0))
        total += round((n1 - n0) - (in1 - in0))
    return total


async def measure(stack: UpStack, plan: Plan, workdir: Path) -> dict[str, Any]:
    """One stack: CPU per check-in on both paths, the sweep, answers past the bound."""
    pid = stack.broker_pid
    await settle(stack, pid)
    idle = await idle_cpu(stack, pid, IDLE_S)
    bound0 = await asyncio.to_thread(gateway_histogram, stack.url)
    tag = uuid.uuid4().hex[:6]
    fleet = stack.fleet(f"fleet-{tag}", FLEET, workdir / f"fleet-{tag}.json")
    # One pass of the fleet first: the gateway's first sight of each token is not the
    # steady state of a fleet that checks in again and again.
    warm = await gateway_step(
        stack, "instant", plan.cpu_rate, FLEET / plan.cpu_rate, plan.demand, pid, fleet
    )
    await settle(stack, pid)
    instant = await gateway_step(
        stack, "instant", plan.cpu_rate, plan.cpu_s, plan.demand, pid, fleet
    )
    print(f"  instant {plan.cpu_rate:.0f}/s: cpu µs/check-in {instant.cpu_us_per_request}, "
          f"p99 {instant.result['p99_ms']} ms", flush=True)  # fmt: skip
    n = int(plan.assigned_rate * plan.assigned_s)
    devices = stack.fleet(f"asg-{tag}", n, workdir / f"asg-{tag}.json")
    await settle(stack, pid)
    await gateway_step(stack, "instant", plan.cpu_rate, n / plan.cpu_rate, plan.demand, pid,
                          devices)  # fmt: skip
    await settle(stack, pid)
    assigned = await gateway_step(
        stack, "assigned", plan.assigned_rate, plan.assigned_s, plan.demand, pid, devices
    )
    print(f"  assigned {plan.assigned_rate:.0f}/s: cpu µs/check-in "
          f"{assigned.cpu_us_per_request}, {assigned.result['reasons']}, p99 "
          f"{assigned.result['p99_ms']} ms", flush=True)  # fmt: skip
    sweep = await gateway_sweep(
        stack, "instant", list(plan.sweep_rates), plan.step_s, plan.demand, pid,
        plan.half_repeats,
        fleet_file=fleet,
    )  # fmt: skip
    bound1 = await asyncio.to_thread(gateway_histogram, stack.url)
    health = await asyncio.to_thread(stack.gateway_health)
    steps = [warm.row(), instant.row(), assigned.row(), *sweep["steps"]]
    if sweep["half_saturation"]:
        steps.append(sweep["half_saturation"])
    half = sweep["half_saturation"] or {}
    return {
        "idle_cores": idle,
        "instant": {**instant.row(), "net_us": net_us(instant, idle)},
        "assigned": {**assigned.row(), "net_us": net_us(assigned, idle)},
        "sweep": sweep,
        "saturation_rps": sweep["saturation_rps"],
        "half_rps": half.get("target_rps"),
        "half_p99_ms": half.get("p99_ms"),
        "over_bound_device": sum(s["over_bound"] for s in steps),
        "over_bound_gateway": over_bound(bound0, bound1),
        "answers": sum(sum(s["statuses"].values()) for s in steps),
        "gateway_stats": health.get("stats", {}),
    }


def net_us(step: Step, idle: dict[str, float]) -> dict[str, float]:
    """CPU µs per check-in less what each process spends idle over the same window (its
    consumers' fetches, timers, reports): the cost the check-ins add."""
    answered = max(1, step.result["answered"])
    return {
        k: round(us - idle.get(k, 0.0) * step.window_s / answered * 1e6)
        for k, us in step.cpu_us_per_request.items()
    }


async def profile_current(plan: Plan, workdir: Path) -> dict[str, Any]:
    """Today's gateway under pyinstrument: the answered-at-once path, then (a second
    session) the assigned path."""
    out: dict[str, Any] = {}
    for mode in ("instant", "assigned"):
        stack = UpStack(ROOT, workdir / f"profile-{mode}")
        await asyncio.to_thread(stack.up)
        try:
            session = workdir / f"gateway-{mode}.pyisession"
            await asyncio.to_thread(stack.profile_gateway, session)
            tag = uuid.uuid4().hex[:6]
            # Half the CPU window's rate: pyinstrument's own cost would have the gateway
            # shed load at the full rate. One pass of the devices first (their tokens seen).
            if mode == "instant":
                n, rate, seconds = FLEET, plan.cpu_rate / 2, plan.cpu_s * 2
            else:
                n = int(plan.assigned_rate * plan.assigned_s)
                rate, seconds = plan.assigned_rate, plan.assigned_s
            fleet = stack.fleet(f"p-{tag}", n, workdir / f"p-{tag}.json")
            await gateway_step(stack, "instant", plan.cpu_rate / 2, n / (plan.cpu_rate / 2),
                                  plan.demand, None, fleet)  # fmt: skip
            await settle(stack, stack.broker_pid)
            step = await gateway_step(
                stack, mode, rate, seconds, plan.demand, stack.broker_pid, fleet
            )
            await asyncio.to_thread(stack.stop_profiled)
        finally:
            await asyncio.to_thread(stack.down)
        out[mode] = {
            "rate": rate,
            "answered": step.result["answered"],
            "reasons": step.result["reasons"],
            "profile": profile_summary(session, top=10),
        }
        print(f"  profile {mode}: {json.dumps(out[mode]['profile'])}", flush=True)
    return out


def assigned_share(row: dict[str, Any]) -> float:
    return int(row["reasons"].get("assigned", 0)) / max(1, sum(row["statuses"].values()))


def median(values: list[float]) -> float:
    clean = [v for v in values if isinstance(v, int | float) and not math.isnan(v)]
    return statistics.median(clean) if clean else math.nan


def summary(runs: list[dict[str, Any]], trees: list[str]) -> dict[str, Any]:
    """Per tree, the median over its repeats (and every repeat's value)."""
    out: dict[str, Any] = {}
    for tree in trees:
        mine = [r for r in runs if r["tree"] == tree]
        pick = {
            "instant_us": lambda r: r["instant"]["cpu_us_per_request"]["gateway"],
            "assigned_us": lambda r: r["assigned"]["cpu_us_per_request"]["gateway"],
            "instant_net_us": lambda r: r["instant"]["net_us"]["gateway"],
            "assigned_net_us": lambda r: r["assigned"]["net_us"]["gateway"],
            "idle_gateway_cores": lambda r: r["idle_cores"]["gateway"],
            "instant_scheduler_us": lambda r: r["instant"]["cpu_us_per_request"]["scheduler"],
            "assigned_scheduler_us": lambda r: r["assigned"]["cpu_us_per_request"]["scheduler"],
            "instant_broker_us": lambda r: r["instant"]["cpu_us_per_request"]["broker"],
            "assigned_broker_us": lambda r: r["assigned"]["cpu_us_per_request"]["broker"],
            "saturation_rps": lambda r: r["saturation_rps"],
            "half_p99_ms": lambda r: r["half_p99_ms"],
        }
        out[tree] = {k: median([f(r) for r in mine]) for k, f in pick.items()}
        out[tree]["repeats"] = {k: [f(r) for r in mine] for k, f in pick.items()}
        out[tree]["over_bound_device"] = sum(r["over_bound_device"] for r in mine)
        out[tree]["over_bound_gateway"] = sum(r["over_bound_gateway"] for r in mine)
        out[tree]["answers"] = sum(r["answers"] for r in mine)
        out[tree]["assigned_share"] = median([assigned_share(r["assigned"]) for r in mine])
    return out


def _f(value: Any, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.{digits}f}"


def _met(value: Any, goal: float) -> str:
    if not isinstance(value, int | float) or math.isnan(value):
        return "n/a"
    return "met" if value <= goal else "not met"


IDLE_FRAME = "event loop (idle + I/O wait)"


def busy_shares(shares: dict[str, float] | None) -> str:
    """A profile's shares of wall time with the event loop's idle wait left out: shares of
    the time the process was working."""
    if not shares:
        return "n/a"
    busy = {k: v for k, v in shares.items() if k != IDLE_FRAME}
    total = 100.0 - shares.get(IDLE_FRAME, 0.0)
    return ", ".join(f"{k} {v / total * 100:.0f} %" for k, v in busy.items() if v / total >= 0.02)


def report_markdown(r: dict[str, Any]) -> str:
    meta, s = r["meta"], r["summary"]
    trees: list[str] = meta["trees"]
    base, cur = s["baseline"], s["current"]
    plan = meta["plan"]

    def row(label: str, key: str, goal: float | None = None, digits: int = 0) -> str:
        b, c = base[key], cur[key]
        ratio = f"{c / b:.2f}x" if b and not math.isnan(b) and not math.isnan(c) else ""
        values = " | ".join(_f(s[t][key], digits) for t in trees)
        reps = " / ".join(str(s[t]["repeats"][key]) for t in trees)
        goal_text = f"≤ {goal:g}: {_met(c, goal)}" if goal is not None else ""
        return f"| {label} | {values} | {ratio} | {goal_text} | {reps} |"

    def counted(label: str, key: str, note: str = "") -> str:
        values = " | ".join(str(s[t][key]) for t in trees)
        return f"| {label} | {values} |  | 0: {_met(cur[key], 0)} | {note} |"

    names = " | ".join(f"`{t}`" if t not in ("baseline", "current") else t for t in trees)
    head = f"| {{what}} | {names} | current/baseline | {{goal}} | repeats |"
    rule = "| --- |" + " ---: |" * len(trees) + " ---: | --- | --- |"
    floor = r.get("floor") or {}
    lines = [
        f"Run of {meta['date']} on {meta['machine']}, commit `{meta['commit']}` against the "
        f"baseline `{BASELINE}`; load average before the run {meta['load_before']}, after "
        f"{meta['load_after']}; took {meta['took_s']:.0f} s. Command: `{meta['command']}`.",
        "",
        f"Stacks in the order {' '.join(meta['order'])} (`venn up` from each tree: Apache "
        "Kafka, PostgreSQL, one scheduler worker, the recorder, one gateway; tokens on). "
        f"Medians over {plan['repeats']} stacks per tree; the repeats are listed in the "
        "columns' order.",
        "",
        head.format(what="gateway, per check-in", goal="goal"),
        rule,
        row("CPU µs, answered at once", "instant_us", GOALS["instant_us"]),
        row("CPU µs, assigned", "assigned_us", GOALS["assigned_us"]),
        row("CPU µs less idle, answered at once", "instant_net_us", GOALS["instant_us"]),
        row("CPU µs less idle, assigned", "assigned_net_us", GOALS["assigned_us"]),
        row("idle CPU, cores (nothing to answer)", "idle_gateway_cores", None, 3),
        row("saturation, answered at once, check-ins/s", "saturation_rps"),
        row("p99 ms at half saturation", "half_p99_ms", GOALS["half_p99_ms"], 1),
        counted(
            "answers past the 2 s bound, seen by the devices",
            "over_bound_device",
            "of " + " / ".join(f"{s[t]['answers']:,}" for t in trees) + " answers",
        ),
        counted("answers past the bound, measured by the gateway", "over_bound_gateway"),
        "",
        head.format(what="other processes, CPU µs per check-in", goal=""),
        rule,
        row("scheduler, answered at once", "instant_scheduler_us"),
        row("scheduler, assigned", "assigned_scheduler_us"),
        row("broker, answered at once", "instant_broker_us"),
        row("broker, assigned", "assigned_broker_us"),
        "",
        f"The aiohttp floor: a bare aiohttp endpoint served as the gateway is (uvloop, no "
        "access log; the body read and decoded, an answer of the same shape; no middleware, "
        "token, view or Kafka), driven the same way in the same run after each current "
        f"stack: **{_f(floor.get('us_per_request'))} µs** of CPU per request (repeats "
        f"{[f['cpu_us_per_request']['gateway'] for f in floor.get('steps', [])]}).",
        "",
        f"CPU windows: answered at once, {plan['cpu_rate']:g} check-ins/s for "
        f"{plan['cpu_s']:g} s from a fleet of {FLEET:,} devices (each with its own token, "
        "each checking in again every "
        f"{FLEET / plan['cpu_rate']:g} s, after one warm-up pass); assigned, "
        f"{plan['assigned_rate']:g} check-ins/s for {plan['assigned_s']:g} s from devices "
        "that checked in once before, probe jobs of demand "
        f"{plan['demand']:,} absorbing every one (share answered with an assignment: "
        + " / ".join(f"{_f(s[t]['assigned_share'] * 100)} %" for t in trees)
        + f"). Sweep: {', '.join(f'{x:g}' for x in plan['sweep_rates'])} check-ins/s, "
        f"{plan['step_s']:g} s a step, stopping at the first saturated step; then "
        f"{plan['half_repeats']} steps at half the saturation rate, their median p99. The "
        "generator shares the machine's two cores with the stack: past about 2,000 "
        "requests/s it is itself a limit, so a saturation at the sweep's top or near it is "
        "a floor.",
    ]
    for run in r["runs"]:
        half = run["sweep"]["half_saturation"] or {}
        lines.append("")
        steps = ", ".join(
            f"{st['target_rps']:g}/s -> {st['good_rps']:g} good, p99 {st['p99_ms']:g} ms"
            + (" (saturated)" if st["saturated"] else "")
            for st in run["sweep"]["steps"]
        )
        halves = f"half {half.get('target_rps')}/s: p99 {half.get('p99_ms_repeats')} ms"
        lines.append(f"- {run['tree']} #{run['repeat']}: sweep {steps}; {halves}")
    prof = r.get("profile")
    if prof:
        lines += ["", "Today's gateway under pyinstrument (exclusive time by package, as a "
                  "share of the time the process was not waiting in the event loop; then the "
                  "top functions, as shares of wall time):", ""]  # fmt: skip
        for mode, p in prof.items():
            if not isinstance(p, dict):
                lines.append(f"- {mode}: {p}")
                continue
            summary_ = p.get("profile") or {}
            lines.append(f"- {mode} ({p['rate']:g}/s, {p['answered']:,} answers, "
                         f"{p['reasons']}): {busy_shares(summary_.get('share_pct'))}; "
                         f"functions {summary_.get('top_functions_pct')}")  # fmt: skip
    return "\n".join(lines)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def run_bench(
    plan: Plan, profile: bool, command: str, also: list[str] | None = None
) -> dict[str, Any]:
    started = time.monotonic()
    meta: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "commit": git_commit(),
        "command": command,
        "plan": asdict(plan),
        "load_before": load(),
    }
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gwbench-") as tmp:
        workdir = Path(tmp)
        trees = {"baseline": tree_at(BASELINE, workdir)}
        trees |= {rev: tree_at(rev, workdir) for rev in also or ()}
        trees["current"] = ROOT
        meta["trees"] = list(trees)
        order = [t for _ in range(plan.repeats) for t in trees]
        meta["order"] = order
        floors = []
        for i, tree in enumerate(order):
            repeat = i // len(trees) + 1
            print(f"== {tree} #{repeat} (load {load()})", flush=True)
            stack = UpStack(trees[tree], workdir / f"{tree}-{repeat}")
            t0 = time.monotonic()
            await asyncio.to_thread(stack.up)
            try:
                print(f"  up in {time.monotonic() - t0:.0f} s", flush=True)
                result = await measure(stack, plan, workdir)
            finally:
                await asyncio.to_thread(stack.down)
            runs.append({"tree": tree, "repeat": repeat, **result})
            if tree == "current":
                floors.append(await measure_floor(plan, workdir))
        prof: dict[str, Any] | None = None
        if profile:
            try:
                prof = await profile_current(plan, workdir)
            except Exception as exc:  # the comparison stands without its profiles
                print(f"  profile failed: {exc!r}", flush=True)
                prof = {"error": repr(exc)}
    meta["load_after"] = load()
    meta["took_s"] = round(time.monotonic() - started, 1)
    return {
        "meta": meta,
        "runs": runs,
        "summary": summary(runs, meta["trees"]),
        "floor": {
            "steps": floors,
            "us_per_request": median([f["cpu_us_per_request"]["gateway"] for f in floors]),
        },
        "profile": prof,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["floor"]:
        serve_floor(int(argv[1]))
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m bench.gateway_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="one repeat, shorter steps")
    parser.add_argument("--repeats", type=int, help="stacks per tree (default: 2)")
    parser.add_argument("--no-profile", action="store_true", help="skip the profiles")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument(
        "--also", action="append", metavar="REV", help="one more tree to run (a commit)"
    )
    args = parser.parse_args(argv)
    preamble("gateway_bench")
    plan = QUICK if args.quick else FULL
    if args.repeats:
        plan = Plan(**{**asdict(plan), "repeats": args.repeats})
    command = "python -m bench.gateway_bench " + " ".join(argv)
    result = asyncio.run(run_bench(plan, not args.no_profile, command.strip(), args.also))
    print(json.dumps(result["summary"], indent=1))
    if not args.no_write:
        JSON_OUT.parent.mkdir(parents=True, exist_ok=True)
        JSON_OUT.write_text(json.dumps(result, indent=1) + "\n")
        title = "The gateway against the baseline gateway: latest run (generated)"
        write_block(DOC, "gateway", report_markdown(result), title)
        print(f"wrote {JSON_OUT.relative_to(ROOT)} and {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
