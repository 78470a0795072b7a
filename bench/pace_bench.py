"""Pace steering in the simulator: average JCT and check-ins of `venn` on the Table 1
workloads, devices coming back at today's flat retry_after against the steered pace.

Issue 35, item 1. Every run is `venn` (policy) on one workload at the scales `venn
reproduce` uses (rounds and arrival gaps x ``--scale``), on the workload's synthetic trace
and seed, in event mode (a paced device's next check-in depends on each answer):

- ``once``: today's simulator, one check-in per availability window (fast mode);
- ``flat``: a device without an assignment checks in again every VENN_GATEWAY_RETRY_AFTER_S
  (30 s) while its window lasts: today's gateway;
- ``steered``: the pace of venn/core/pace.py (10 s while a round it can serve waits, 120 s
  when none can, jitter 0.2), the supply window weighting each check-in by its pace;
- ``uncorrected`` (``--uncorrected``): steered, the supply window not weighted.

Goal: steered's average JCT within 3% of flat's on every workload (at most 1.03x, on the
paper's mean over the finished jobs and on the censored mean over all of them). The
baseline (flat) is measured in the same run; CPU time per run is printed beside it (a busy
machine's wall time says little).

    python -m bench.pace_bench --scale 0.1 --processes 2
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from bench.common import write_block
from venn.core.pace import Pace
from venn.sim.engine import SimConfig
from venn.sim.metrics import summarise
from venn.sim.reproduce import TABLE1_WORKLOADS
from venn.sim.runner import horizon_of, run_jobs, scaled_horizon, trace_for
from venn.sim.workload_runs import scaled_workload

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "results" / "pace.md"
RAW = ROOT / "docs" / "results" / "bench" / "pace.json"
GOAL = 0.03
VARIANTS = ("once", "flat", "steered")


def one(workload: str, variant: str, scale: float) -> dict[str, Any]:
    wl, specs = scaled_workload(workload, 50, scale, scale)
    common = scaled_horizon(wl, scale)
    pace = {"once": None, "flat": Pace.constant(30), "steered": Pace(), "uncorrected": Pace()}
    cfg = SimConfig(
        policy="venn",
        seed=wl.seed,
        horizon_s=horizon_of(wl, "venn", scale),
        mode="fast" if variant == "once" else "event",
        pace=pace[variant],
        pace_weights=variant != "uncorrected",
    )
    c0 = time.process_time()
    run = run_jobs(specs, lambda h: trace_for(wl, "synthetic", wl.seed, h), cfg)
    cpu = time.process_time() - c0
    out = summarise(run, None, {"workload": workload}, censor_at=common)
    return {
        "workload": workload,
        "variant": variant,
        "avg_jct_s": out["avg_jct_s"],
        "avg_jct_censored_s": out["avg_jct_censored_s"],
        "finished": out["jobs_finished"],
        "checkins": run.checkins,
        "retries": run.retries,
        "cpu_s": cpu,
    }


def table(results: dict[tuple[str, str], dict[str, Any]], variants: tuple[str, ...]) -> str:
    """The page's table: one row per workload with every variant run (others left out)."""
    header = "| workload | " + " | ".join(f"{v} JCT h" for v in variants)
    header += (
        " | steered/flat | censored steered/flat | check-ins flat | check-ins steered"
        " | steered/flat | goal |"
    )
    lines = [header, "|" + " --- |" * (header.count("|") - 1)]
    for w in TABLE1_WORKLOADS:
        if any((w, v) not in results for v in variants):
            continue
        row = [results[(w, v)] for v in variants]
        flat, steered = results[(w, "flat")], results[(w, "steered")]
        ratio = steered["avg_jct_s"] / flat["avg_jct_s"]
        if "avg_jct_censored_s" in flat:
            censored = steered["avg_jct_censored_s"] / flat["avg_jct_censored_s"]
            shown = f"{censored:.3f}"
        else:  # a log from before the bench reported it
            censored, shown = ratio, "n/a"
        met = "met" if max(ratio, censored) <= 1 + GOAL else "not met"
        lines.append(
            f"| {w} | "
            + " | ".join(f"{r['avg_jct_s'] / 3600:.2f} ({r['finished']})" for r in row)
            + f" | {ratio:.3f} | {shown} | {flat['checkins']:,} | {steered['checkins']:,} | "
            f"{steered['checkins'] / flat['checkins']:.2f} | at most {1 + GOAL:.2f}x: {met} |"
        )
    cpu = ", ".join(f"{w}/{v} {r['cpu_s']:.0f}" for (w, v), r in sorted(results.items()))
    return "\n".join(lines) + f"\n\nCPU s per run: {cpu}.\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--workloads", default=",".join(TABLE1_WORKLOADS))
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--uncorrected", action="store_true", help="also the unweighted window")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument(
        "--from-log",
        type=Path,
        help="print the table of a run's printed lines (a run cut short) instead of running",
    )
    args = ap.parse_args()
    variants = (*VARIANTS, "uncorrected") if args.uncorrected else VARIANTS
    if args.from_log is not None:
        logged = [json.loads(x) for x in args.from_log.read_text().splitlines() if x[:1] == "{"]
        print(table({(r["workload"], r["variant"]): r for r in logged}, variants))
        return
    workloads = args.workloads.split(",")
    load_before = os.getloadavg()
    started = time.time()
    results: dict[tuple[str, str], dict[str, Any]] = {}
    with ProcessPoolExecutor(args.processes) as pool:
        futures = [pool.submit(one, w, v, args.scale) for w in workloads for v in variants]
        for fut in as_completed(futures):
            r = fut.result()
            results[(r["workload"], r["variant"])] = r
            print(json.dumps(r), flush=True)
    load_after = os.getloadavg()
    text = (
        f"Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}, "
        f"{time.time() - started:.0f} s, load average before "
        f"{' '.join(f'{x:.2f}' for x in load_before)}, after "
        f"{' '.join(f'{x:.2f}' for x in load_after)}. Command: `python -m bench.pace_bench "
        f"--scale {args.scale:g}{' --uncorrected' if args.uncorrected else ''}`. "
        "Policy `venn`, 50 jobs, rounds and arrival gaps "
        f"x{args.scale:g}; average JCT in hours over the jobs finished within the horizon "
        "(their number in brackets); the censored mean counts every job, an unfinished one "
        "to the common horizon (venn/sim/metrics.py).\n\n" + table(results, variants)
    )
    print(text)
    if not args.no_write:
        RAW.parent.mkdir(parents=True, exist_ok=True)
        RAW.write_text(json.dumps([results[k] for k in sorted(results)], indent=1))
        write_block(PAGE, "pace", text, "Pace steering in the simulator: latest run (generated)")


if __name__ == "__main__":
    main()
