"""Core benchmarks: plan recompute time and check-in decisions per second.

Prints a table and writes docs/results/bench/core.json. Baselines in the same run: the FIFO
policy (no plan, the same compile machinery) next to Venn's IRS plan, on the same jobs
and devices. Only the core's public entry points are used: a plan event is a round
closing or a round being requested, followed by the next check-in's table.

Times are CPU seconds of this process (``time.process_time``), the best of ``--repeats``
runs: the machine is shared, and CPU time is what other work disturbs least.

    python -m bench.core_bench
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.common import preamble
from venn.core import JobSpec, Requirement, Scheduler, make_scheduler
from venn.core.irs import irs_plan
from venn.core.model import DEFAULT_TENANT
from venn.core.tenants import TenantConfig, TenantShare

OUT = Path(__file__).resolve().parent.parent / "docs" / "results" / "bench" / "core.json"
SIZES = ((100, 10), (100, 100), (1000, 10), (1000, 100))
MOVING = 5  # check-ins between two plan events in the moving-window columns
TENANTS = 0  # --tenants: jobs dealt round-robin to this many equal tenants (0: tenant-blind)


def build(policy: str, jobs: int, groups: int, seed: int = 0) -> tuple[Scheduler, list[int]]:
    """``jobs`` jobs over ``groups`` requirements, each with an open round, and a full
    supply window."""
    rng = np.random.default_rng(seed)
    names = [f"t{i}" for i in range(TENANTS)]
    config = TenantConfig({t: TenantShare(1.0) for t in names}) if TENANTS else None
    sched = make_scheduler(policy, seed=seed, tenants=config)
    # Groups: thresholds on two attributes, so eligible sets overlap in many ways.
    levels = [(float(a), float(b)) for a in range(1, 11) for b in range(1, 11)][:groups]
    for j in range(jobs):
        cpu, mem = levels[j % groups]
        spec = JobSpec(
            f"j{j}",
            Requirement.of(cpu=cpu, memory=mem),
            int(rng.integers(20, 500)),
            100,
            600.0,
            tenant=names[j % TENANTS] if TENANTS else DEFAULT_TENANT,
        )
        sched.add_job(spec, 0.0)
        sched.request_round(spec.job_id, 0, 0.0)
    slots = [
        sched.slot_of({"cpu_f": float(a), "fp16_mem": float(b)})
        for a in range(1, 11)
        for b in range(1, 11)
    ]
    sched.observe_many(np.array(rng.choice(slots, 1000)), np.linspace(0, 100, 1000))
    sched.table(100.0)
    return sched, slots


def plan_time(
    policy: str,
    jobs: int,
    groups: int,
    events: int = 200,
    repeats: int = 5,
    between: int = 0,
) -> float:
    """CPU milliseconds per plan event: a round closes (table recompiled), then the job
    requests its next round (recompiled again), job after job.

    ``between``: check-ins fed to the supply window before each event (not timed), as
    in a live run, where the window moves between two plan events.
    """
    best = float("inf")
    for _ in range(repeats):
        sched, slots = build(policy, jobs, groups)
        ids = list(sched.jobs)
        rng = np.random.default_rng(3)
        feed = [np.array(rng.choice(slots, between)) for _ in range(events)] if between else []
        now = 100.0
        spent = 0.0
        t0 = time.process_time()
        for e in range(events // 2):
            job_id = ids[e % len(ids)]
            r = sched.jobs[job_id].round_index
            for close in (True, False):
                if between:
                    spent += time.process_time() - t0
                    now += 1.0
                    sched.observe_many(feed[2 * e + close], np.full(between, now))
                    t0 = time.process_time()
                if close:
                    sched.close_round(job_id, r, now, True)
                else:
                    sched.request_round(job_id, r + 1, now)
                sched.table(now)
        spent += time.process_time() - t0
        best = min(best, spent / events * 1e3)
    return best


def irs_only(jobs: int, groups: int, reps: int = 200) -> float:
    """CPU milliseconds of the IRS plan alone on random queues of the same size."""
    rng = np.random.default_rng(1)
    sigs = max(groups, 8) * 2
    matrix = rng.random((sigs, groups)) < 0.5
    supply = rng.integers(0, 50, sigs).astype(float)
    queues = {
        g: sorted(rng.integers(1, 500, max(1, jobs // groups)).tolist()) for g in range(groups)
    }
    t0 = time.process_time()
    for _ in range(reps):
        irs_plan(matrix, supply, queues)
    return (time.process_time() - t0) / reps * 1e3


def checkin_rate(policy: str, n: int = 50_000) -> tuple[float, float]:
    """Decisions per CPU second, and table compiles per 1000 check-ins."""
    sched, slots = build(policy, 100, 10)
    # Plenty of demand (decisions, not refusals), and distinct demands: with equal ones
    # every assignment would overtake the job ahead and force a recompile.
    for j, job_id in enumerate(list(sched.jobs)):
        sched.request_round(job_id, 1, 100.0, demand=10**6 + j * 1000)
    rng = np.random.default_rng(2)
    picks = rng.choice(slots, n).tolist()
    us = rng.random(n).tolist()
    sched.table(100.0)
    compiles = sched.compiles
    t0 = time.process_time()
    for i in range(n):
        sched.checkin(picks[i], 100.0 + i, 0, us[i])
    rate = n / (time.process_time() - t0)
    return rate, (sched.compiles - compiles) / n * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5, help="best of this many runs")
    ap.add_argument("--no-write", action="store_true", help=f"print only (not {OUT.name})")
    ap.add_argument(
        "--tenants", type=int, default=0, help="jobs dealt to this many equal tenants (0: none)"
    )
    args = ap.parse_args()
    preamble("core_bench")
    global TENANTS
    TENANTS = args.tenants
    plans: list[dict[str, object]] = []
    rates_by_policy: dict[str, float] = {}
    compiles_by_policy: dict[str, float] = {}
    results: dict[str, object] = {
        "clock": "process_time (CPU), best of repeats",
        "moving_checkins_between_events": MOVING,
        "repeats": args.repeats,
        "tenants": args.tenants,
        "plan": plans,
        "checkin_per_s": rates_by_policy,
        "compiles_per_1000_checkins": compiles_by_policy,
    }
    table = Table(title="Plan event: plan + table compile (CPU ms per event)")
    for col in (
        "jobs",
        "groups",
        "IRS plan only",
        "venn-sched (IRS)",
        "venn (IRS + 3 tiers)",
        "venn-paper (round order)",
        "fifo (baseline, no plan)",
        "venn-sched / fifo",
        f"venn-sched, {MOVING} check-ins between",
        f"fifo, {MOVING} check-ins between",
    ):
        table.add_column(col, justify="right")
    for jobs, groups in SIZES:
        venn = plan_time("venn-sched", jobs, groups, repeats=args.repeats)
        tiered = plan_time("venn", jobs, groups, repeats=args.repeats)
        paper = plan_time("venn-paper", jobs, groups, repeats=args.repeats)
        fifo = plan_time("fifo", jobs, groups, repeats=args.repeats)
        moving = plan_time("venn-sched", jobs, groups, repeats=args.repeats, between=MOVING)
        fifo_moving = plan_time("fifo", jobs, groups, repeats=args.repeats, between=MOVING)
        irs = irs_only(jobs, groups)
        plans.append(
            {
                "jobs": jobs,
                "groups": groups,
                "irs_ms": irs,
                "venn_sched_ms": venn,
                "venn_ms": tiered,
                "venn_paper_ms": paper,
                "fifo_ms": fifo,
                "venn_sched_moving_ms": moving,
                "fifo_moving_ms": fifo_moving,
            }
        )
        table.add_row(
            str(jobs),
            str(groups),
            f"{irs:.3f}",
            f"{venn:.3f}",
            f"{tiered:.3f}",
            f"{paper:.3f}",
            f"{fifo:.3f}",
            f"{venn / fifo:.1f}x",
            f"{moving:.3f}",
            f"{fifo_moving:.3f}",
        )
    Console().print(table)
    rates = Table(title="Core check-in decisions per CPU second (100 jobs, 10 groups)")
    rates.add_column("policy")
    rates.add_column("decisions/s", justify="right")
    rates.add_column("compiles per 1000 check-ins", justify="right")
    for policy in ("random", "fifo", "srsf", "venn"):
        r, c = checkin_rate(policy)
        rates_by_policy[policy] = r
        compiles_by_policy[policy] = c
        rates.add_row(policy, f"{r:,.0f}", f"{c:.1f}")
    Console().print(rates)
    if not args.no_write:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
