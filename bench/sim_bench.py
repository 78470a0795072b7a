"""Simulator benchmark: CPU time, wall time and peak memory of one workload, fast vs
event mode.

The baseline in the same run is the event-by-event reference mode on a reduced version of
the same workload (rounds scaled down), where both modes must give identical JCTs. CPU
time (``time.process_time``) is the figure to compare on a shared machine; wall time is
printed beside it.

    python bench/sim_bench.py --workload even --policy venn --rounds-scale 1.0
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from venn.sim.engine import SimConfig
from venn.sim.runner import horizon_of, run_jobs, trace_for
from venn.workloads import load_workload

OUT = Path(__file__).resolve().parent.parent / "docs" / "results" / "bench" / "sim.json"


def timed(workload: str, policy: str, scale: float, mode: str) -> dict[str, float]:
    wl = load_workload(workload, jobs=50)
    jobs = [dataclasses.replace(j, rounds=max(1, round(j.rounds * scale))) for j in wl.jobs]
    cfg = SimConfig(policy=policy, seed=wl.seed, horizon_s=horizon_of(wl, policy), mode=mode)  # type: ignore[arg-type]
    t0, c0 = time.perf_counter(), time.process_time()
    run = run_jobs(jobs, lambda h: trace_for(wl, "synthetic", wl.seed, h), cfg)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    jcts = [j.jct for j in run.jobs if j.jct is not None]
    return {
        "cpu_s": cpu,
        "wall_s": wall,
        "checkins": run.checkins,
        "checkins_per_cpu_s": run.checkins / cpu,
        "plan_recomputes": run.replans,
        "table_compiles": run.compiles,
        "finished": len(jcts),
        "avg_jct_s": sum(jcts) / len(jcts) if jcts else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="even")
    ap.add_argument("--policy", default="venn")
    ap.add_argument("--rounds-scale", type=float, default=1.0)
    ap.add_argument("--baseline-scale", type=float, default=0.01)
    ap.add_argument("--no-write", action="store_true", help=f"print only (not {OUT.name})")
    args = ap.parse_args()
    rows = {
        f"event, rounds x{args.baseline_scale}": timed(
            args.workload, args.policy, args.baseline_scale, "event"
        ),
        f"fast, rounds x{args.baseline_scale}": timed(
            args.workload, args.policy, args.baseline_scale, "fast"
        ),
        f"fast, rounds x{args.rounds_scale}": timed(
            args.workload, args.policy, args.rounds_scale, "fast"
        ),
    }
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    table = Table(title=f"Simulator: {args.workload} / {args.policy}, 50 jobs")
    for col in (
        "run",
        "CPU s",
        "wall s",
        "check-ins",
        "check-ins/CPU s",
        "plans",
        "compiles",
        "finished",
        "avg JCT s",
    ):
        table.add_column(col, justify="right")
    for name, r in rows.items():
        table.add_row(
            name,
            f"{r['cpu_s']:.1f}",
            f"{r['wall_s']:.1f}",
            f"{r['checkins']:,}",
            f"{r['checkins_per_cpu_s']:,.0f}",
            f"{r['plan_recomputes']:,}",
            f"{r['table_compiles']:,}",
            str(r["finished"]),
            f"{r['avg_jct_s']:,.0f}",
        )
    Console().print(table)
    Console().print(f"peak RSS of the process: {peak_mb:,.0f} MB")
    if not args.no_write:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        given = {k: v for k, v in vars(args).items() if k != "no_write"}
        run = {"args": given, "runs": rows, "peak_rss_mb": peak_mb}
        OUT.write_text(json.dumps(run, indent=1))


if __name__ == "__main__":
    main()
