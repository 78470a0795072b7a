"""Scale-out designs on the simulator: average JCT of each against today's single worker.

Each Table 1 workload (50 jobs, rounds and arrival gaps x0.1, the workload's own seed and
the horizon ``venn reproduce`` uses) runs under
- ``single``: one scheduler that reads every check-in (the supply window counts them);
- ``A``: one decider that reads only the check-ins gateways forward, planning with the
  supply counts gateways report every ``--report-s`` seconds, read ``--delay-s`` later
  (``venn.sim.supply_feed``); the forward quota decides nothing the scheduler would
  assign otherwise, so the decisions are the single worker's on that supply signal;
- ``C``: the leased mode (12 check-in partitions sharing rounds by leases, lease delay
  0.5 s), which this repository no longer has: it runs from a checkout of
  ``BASELINE_COMMIT`` (``--baseline DIR``, or a git worktree the bench adds), whose
  bench/partitions_bench.py also runs its own single worker as a check.

The figure is the censored mean JCT (an unfinished job counts the common horizon minus its
arrival), as in docs/results/reproduction.md. Writes docs/results/bench/designs.json and
the table of docs/results/designs.md.

    python -m bench.designs_bench                 # A and single; C too with --with-leased
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.common import preamble, write_block
from venn.sim.engine import SimConfig, Simulation
from venn.sim.metrics import summarise
from venn.sim.reproduce import TABLE1_WORKLOADS
from venn.sim.runner import DAY_S, horizon_of, scale_jobs, scaled_horizon, tier_model, trace_for
from venn.traces.devices import load_device_profiles
from venn.workloads import load_workload

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results" / "bench" / "designs.json"
PAGE = ROOT / "docs" / "results" / "designs.md"
BASELINE_COMMIT = "97defac"
"""The last commit with the leased mode (design C)."""
GOAL = 0.03  # within 3% of the single worker's average JCT on every workload


def run_one(
    workload: str, jobs: int, scale: float, policy: str, report_s: float, delay_s: float
) -> dict[str, Any]:
    wl = load_workload(workload, jobs=jobs)
    specs = scale_jobs(wl.jobs, scale, scale)
    cfg = SimConfig(
        policy=policy,
        seed=wl.seed,
        horizon_s=horizon_of(wl, policy, scale),
        supply_report_s=report_s,
        supply_delay_s=delay_s,
    )
    source = trace_for(wl, "synthetic", wl.seed, cfg.horizon_s)
    tiers = tier_model(trace_for(wl, "synthetic", wl.seed, DAY_S), cfg.num_tiers)
    sim = Simulation(specs, source, load_device_profiles(), cfg, tiers)
    t0 = time.perf_counter()
    run = sim.run()
    wall = time.perf_counter() - t0
    out = summarise(run, None, {"workload": workload}, censor_at=scaled_horizon(wl, scale))
    return {
        "jobs_finished": out["jobs_finished"],
        "avg_jct_censored_s": out["avg_jct_censored_s"],
        "avg_sched_delay_s": out["avg_sched_delay_s"],
        "checkins": out["checkins"],
        "assignments": out["assignments"],
        "reports": sim._feed.reports if sim._feed is not None else 0,
        "wall_s": wall,
    }


def leased_runs(
    baseline: Path | None, workloads: list[str], jobs: int, scale: float, policy: str
) -> dict[str, dict[str, Any]]:
    """Design C from a checkout of BASELINE_COMMIT: its partitions_bench per workload."""
    with tempfile.TemporaryDirectory() as tmp:
        root = baseline
        if root is None:
            root = Path(tmp) / "baseline"
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(root), BASELINE_COMMIT],
                check=True,
                capture_output=True,
            )
        out = Path(tmp) / "partitions.json"
        try:
            subprocess.run(
                [
                    sys.executable,
                    "bench/partitions_bench.py",
                    "--workloads",
                    *workloads,
                    "--jobs",
                    str(jobs),
                    "--rounds-scale",
                    str(scale),
                    "--policy",
                    policy,
                    "--out",
                    str(out),
                ],
                cwd=root,
                check=True,
                env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
            )
        finally:
            if baseline is None:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(root)],
                    check=False,
                )
        data = json.loads(out.read_text())["results"]
    return {w: {"single": runs[0], "leased": runs[1]} for w, runs in data.items()}


def page(results: dict[str, dict[str, Any]], args: dict[str, Any]) -> str:
    lines = [
        "Generated by `python -m bench.designs_bench"
        + (" --with-leased" if args["with_leased"] else "")
        + (f" --rounds-scale {args['rounds_scale']:g}" if args["rounds_scale"] != 0.1 else "")
        + (f" --workloads {' '.join(args['workloads'])}" if len(args["workloads"]) < 5 else "")
        + "` (do not edit): average JCT (censored) of each design against the single worker, "
        f"{args['jobs']} jobs per workload, rounds and arrival gaps x{args['rounds_scale']}, "
        f"policy `{args['policy']}`; A plans with supply reports every {args['report_s']:g} s "
        f"read {args['delay_s']:g} s later. Goal: within {GOAL:.0%} on every workload.",
        "",
        "| workload | single: avg JCT s | A: avg JCT s | A vs single "
        "| C (leased) vs its single | finished single / A / C |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for w, r in results.items():
        s, a, c = r["single"], r["A"], r.get("C")
        c_vs = f"{c['vs_single']:+.1%}" if c else "not run"
        c_fin = c["leased"]["jobs_finished"] if c else "-"
        lines.append(
            f"| {w} | {s['avg_jct_censored_s']:,.0f} | {a['avg_jct_censored_s']:,.0f} "
            f"| {a['vs_single']:+.1%} | {c_vs} "
            f"| {s['jobs_finished']} / {a['jobs_finished']} / {c_fin} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", nargs="+", default=list(TABLE1_WORKLOADS))
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--rounds-scale", type=float, default=0.1)
    ap.add_argument("--policy", default="venn")
    ap.add_argument("--report-s", type=float, default=1.0)
    ap.add_argument("--delay-s", type=float, default=0.1)
    ap.add_argument(
        "--with-leased", action="store_true", help="also run design C from BASELINE_COMMIT"
    )
    ap.add_argument("--baseline", type=Path, help="a checkout of BASELINE_COMMIT to run C from")
    ap.add_argument("--out", type=Path, help="the JSON written (default by --rounds-scale)")
    args = ap.parse_args()
    preamble("designs_bench")
    if args.out is None:
        args.out = (
            OUT if args.rounds_scale == 0.1 else OUT.with_stem(f"designs-x{args.rounds_scale:g}")
        )
    console = Console()
    leased = (
        leased_runs(args.baseline, args.workloads, args.jobs, args.rounds_scale, args.policy)
        if args.with_leased
        else {}
    )
    results: dict[str, dict[str, Any]] = {}
    for w in args.workloads:
        single = run_one(w, args.jobs, args.rounds_scale, args.policy, 0.0, 0.0)
        a = run_one(w, args.jobs, args.rounds_scale, args.policy, args.report_s, args.delay_s)
        base = single["avg_jct_censored_s"]
        a["vs_single"] = a["avg_jct_censored_s"] / base - 1.0
        results[w] = {"single": single, "A": a}
        if w in leased:
            c = leased[w]
            c["vs_single"] = (
                c["leased"]["avg_jct_censored_s"] / c["single"]["avg_jct_censored_s"] - 1.0
            )
            c["baseline_single_matches"] = (
                abs(c["single"]["avg_jct_censored_s"] - base) < 1e-6 * base
            )
            results[w]["C"] = c
        console.print(f"{w}: single {base:,.0f} s, A {a['vs_single']:+.2%}")
    meta = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"args": meta, "goal": GOAL, "baseline_commit": BASELINE_COMMIT, "results": results},
            indent=1,
        )
    )
    scale = "" if args.rounds_scale == 0.1 else f"-x{args.rounds_scale:g}"
    write_block(PAGE, f"designs{scale}", page(results, meta), "Scale-out designs on the simulator")
    table = Table(title="scale-out designs: avg JCT vs the single worker")
    for col in ("workload", "single s", "A", "C"):
        table.add_column(col, justify="right")
    for w, r in results.items():
        leased_row = r.get("C")
        table.add_row(
            w,
            f"{r['single']['avg_jct_censored_s']:,.0f}",
            f"{r['A']['vs_single']:+.2%}",
            f"{leased_row['vs_single']:+.2%}" if leased_row else "-",
        )
    console.print(table)


if __name__ == "__main__":
    main()
