"""Simulator benchmark: CPU time, wall time and peak memory of one workload, fast vs
event mode.

The baseline in the same run is the event-by-event reference mode on a reduced version of
the same workload (rounds scaled down), where both modes must give identical JCTs. CPU
time (``time.process_time``) is the figure to compare on a shared machine; wall time is
printed beside it.

With ``--against TREE`` (a checkout of another commit, e.g. ``git worktree add --detach
/tmp/main main``) only the fast run at ``--rounds-scale`` is timed, once with this tree's
code and once with TREE's, each in a process of its own with its tree on PYTHONPATH; CPU
is the child's user + system time (``getrusage``), the load average is printed beside it.

    python -m bench.sim_bench --workload even --policy venn --rounds-scale 1.0
    python -m bench.sim_bench --against /tmp/main --no-write
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.common import preamble
from venn.sim.engine import SimConfig
from venn.sim.runner import horizon_of, run_jobs, trace_for
from venn.workloads import load_workload

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results" / "bench" / "sim.json"


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


def timed_in(tree: Path, workload: str, policy: str, scale: float) -> dict[str, float]:
    """``timed`` in a process of its own with ``tree``'s code (its ``bench.sim_bench``
    and ``venn``; run from the tree, which comes first on the path), CPU from the
    child's rusage."""
    code = (
        "import json, sys; from bench.sim_bench import timed; "
        "print(json.dumps(timed(sys.argv[1], sys.argv[2], float(sys.argv[3]), 'fast')))"
    )
    argv = [sys.executable, "-c", code, workload, policy, str(scale)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    run = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=True)
    out = run.stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    row: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    row["process_cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    row["load_1m"] = os.getloadavg()[0]
    return row


def against(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """This tree's fast run and ``args.against``'s, one after the other."""
    name = f"fast, rounds x{args.rounds_scale}"
    return {
        f"{name}, this tree": timed_in(ROOT, args.workload, args.policy, args.rounds_scale),
        f"{name}, {args.against}": timed_in(
            Path(args.against), args.workload, args.policy, args.rounds_scale
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="even")
    ap.add_argument("--policy", default="venn")
    ap.add_argument("--rounds-scale", type=float, default=1.0)
    ap.add_argument("--baseline-scale", type=float, default=0.01)
    ap.add_argument("--no-write", action="store_true", help=f"print only (not {OUT.name})")
    ap.add_argument("--against", help="a checkout of another commit: its fast run beside ours")
    args = ap.parse_args()
    preamble("sim_bench")
    rows = (
        against(args)
        if args.against
        else {
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
    )
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
        out = OUT.with_name("sim-against.json") if args.against else OUT
        out.write_text(json.dumps(run, indent=1))


if __name__ == "__main__":
    main()
