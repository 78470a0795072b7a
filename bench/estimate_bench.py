"""Accuracy of the completion estimate (``venn.core.estimate``) on the simulator.

Each Table 1 workload (50 jobs, rounds and arrival gaps x0.1, the workload's own seed and
horizon, policy ``venn``) runs once; when each job arrives, the fluid model estimates its
completion from the scheduler's live state, and the estimate's JCT (estimate minus
arrival) is compared with the job's actual JCT. The figure per workload is the median and
90th percentile of |estimate - actual| / actual over the jobs that finished, with the
median signed error (negative: the estimate was early) and the baseline of the same run:
the job's isolated-style floor ``rounds x (D / eligible rate + latency)``, the fleet's
supply with no contention. Writes docs/results/bench/estimate.json and
docs/results/estimate.md.

    python bench/estimate_bench.py                       # every workload, ~3 minutes
    python bench/estimate_bench.py --workloads even --no-write
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from venn.core.estimate import scheduler_estimates
from venn.core.scheduler import Scheduler
from venn.report.provenance import git_commit
from venn.sim.engine import SimConfig, Simulation
from venn.sim.reproduce import TABLE1_WORKLOADS
from venn.sim.runner import DAY_S, horizon_of, scale_jobs, tier_model, trace_for
from venn.traces.devices import load_device_profiles
from venn.workloads import load_workload

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results" / "bench" / "estimate.json"
PAGE = ROOT / "docs" / "results" / "estimate.md"
GOAL = 0.20  # median absolute relative error per workload


def run_one(workload: str, jobs: int, scale: float, policy: str) -> dict[str, Any]:
    """One run with an estimate at every arrival: per job its estimated and actual JCT."""
    wl = load_workload(workload, jobs=jobs)
    specs = scale_jobs(wl.jobs, scale, scale)
    cfg = SimConfig(policy=policy, seed=wl.seed, horizon_s=horizon_of(wl, policy, scale))

    def source_for(h: float):  # type: ignore[no-untyped-def]
        return trace_for(wl, "synthetic", wl.seed, h)

    estimates: dict[str, float] = {}
    plan_s: list[float] = []
    last = max(specs, key=lambda s: (s.arrival, s.job_id)).job_id
    after_last: dict[str, float] = {}  # every running job's estimate when the last arrives
    last_at = [0.0]

    def on_arrival(core: Scheduler, job_id: str, now: float) -> None:
        t0 = time.perf_counter()
        est = scheduler_estimates(core, now)
        plan_s.append(time.perf_counter() - t0)
        estimates[job_id] = est[job_id] - now
        if job_id == last:
            last_at[0] = now
            after_last.update(est)

    tiers = tier_model(source_for(DAY_S), cfg.num_tiers)
    sim = Simulation(
        specs, source_for(cfg.horizon_s), load_device_profiles(), cfg, tiers, on_arrival
    )
    run = sim.run()
    rows = []
    for rec in run.jobs:
        est = estimates.get(rec.spec.job_id, math.nan)
        later = after_last.get(rec.spec.job_id, math.nan)
        rows.append(
            {
                "id": rec.spec.job_id,
                "group": str(rec.spec.requirement),
                "demand": rec.spec.demand,
                "rounds": rec.spec.rounds,
                "arrival": rec.spec.arrival,
                "estimate_s": est if math.isfinite(est) else None,
                "actual_s": rec.jct,
                # The same job seen when every job has arrived: remaining time, estimated
                # and actual (the model's error without the arrivals it cannot know).
                "after_last_estimate_s": later - last_at[0] if math.isfinite(later) else None,
                "after_last_actual_s": rec.finished_at - last_at[0]
                if rec.finished_at is not None and rec.spec.job_id in after_last
                else None,
                "attempts": len(rec.rounds),
            }
        )
    return {"workload": workload, "jobs": rows, "estimate_ms": 1000 * float(np.mean(plan_s))}


def errors(rows: list[dict[str, Any]], key: str = "") -> dict[str, float]:
    """Median and p90 absolute relative error, median signed error, over finished jobs
    (``key`` "after_last_": of the estimates made when the last job arrived)."""
    est, act = f"{key}estimate_s", f"{key}actual_s"
    done = [r for r in rows if r[act]]
    finite = [r for r in done if r[est] is not None]
    rel = np.array([(r[est] - r[act]) / r[act] for r in finite])
    if rel.size == 0:
        return {"jobs": len(done), "infinite": len(done), "median": math.nan, "p90": math.nan}
    return {
        "jobs": len(done),
        "infinite": len(done) - len(finite),
        "median": float(np.median(np.abs(rel))),
        "p90": float(np.percentile(np.abs(rel), 90)),
        "signed_median": float(np.median(rel)),
        "within_20": float(np.mean(np.abs(rel) <= 0.2)),
    }


def page(results: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = [
        "# Completion estimate: accuracy on the simulator",
        "",
        "Generated by `python bench/estimate_bench.py` "
        f"(commit {meta['commit']}, {meta['date']}); do not edit by hand.",
        "",
        f"Each Table 1 workload: {meta['jobs']} jobs, rounds and arrival gaps "
        f"x{meta['rounds_scale']:g}, policy `{meta['policy']}`, the workload's seed and "
        "synthetic trace. At each job's arrival the fluid model (`venn/core/estimate.py`) "
        "estimates its completion from the scheduler's live state; the error is "
        "(estimate - actual) / actual JCT over the jobs that finished. Goal: median "
        f"absolute error <= {GOAL:.0%} per workload.",
        "",
        "| workload | jobs | median abs error | p90 abs error | median signed | within 20% "
        "| no estimate (inf) | ms per estimate | goal | after the last arrival: median "
        "| p90 | signed |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        e, a = r["errors"], r["errors_after_last"]
        ok = "met" if e["median"] <= GOAL else "missed"
        lines.append(
            f"| {name} | {e['jobs']} | {e['median']:.1%} | {e['p90']:.1%} | "
            f"{e.get('signed_median', math.nan):+.1%} | {e.get('within_20', math.nan):.0%} "
            f"| {e['infinite']} | {r['estimate_ms']:.1f} | {ok} | {a['median']:.1%} "
            f"| {a['p90']:.1%} | {a.get('signed_median', math.nan):+.1%} |"
        )
    lines += [
        "",
        "*After the last arrival*: every job still running when the workload's last job "
        "arrives, estimated then (remaining time against the actual remaining time): the "
        "model's error once no job it does not know of will come.",
    ]
    lines += ["", "<!-- analysis -->", meta.get("analysis", ""), ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", nargs="+", default=list(TABLE1_WORKLOADS))
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--rounds-scale", type=float, default=0.1)
    ap.add_argument("--policy", default="venn")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    console = Console()
    results: dict[str, Any] = {}
    for name in args.workloads:
        r = run_one(name, args.jobs, args.rounds_scale, args.policy)
        r["errors"] = errors(r["jobs"])
        r["errors_after_last"] = errors(r["jobs"], "after_last_")
        results[name] = r
        console.print(f"{name}: at arrival {r['errors']}")
        console.print(f"{name}: after the last arrival {r['errors_after_last']}")
    table = Table("workload", "jobs", "median", "p90", "signed", "inf")
    for name, r in results.items():
        e = r["errors"]
        table.add_row(
            name,
            str(e["jobs"]),
            f"{e['median']:.1%}",
            f"{e['p90']:.1%}",
            f"{e.get('signed_median', math.nan):+.1%}",
            str(e["infinite"]),
        )
    console.print(table)
    if args.no_write:
        return
    meta = {
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d"),
        "jobs": args.jobs,
        "rounds_scale": args.rounds_scale,
        "policy": args.policy,
    }
    if PAGE.exists() and "<!-- analysis -->" in (text := PAGE.read_text()):
        meta["analysis"] = text.split("<!-- analysis -->", 1)[1].strip()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    PAGE.write_text(page(results, meta))


if __name__ == "__main__":
    main()
