"""Policy fidelity: the pipeline and the simulator on the same small contended workload.

For each policy, runs the whole pipeline (`run_demo`: broker, Faust scheduler, recorder,
coordinators, device fleet) and the simulator on the same jobs and the same synthetic
trace, and prints both average JCTs (trace seconds). Writes docs/results/bench/fidelity.json.

    python bench/fidelity_bench.py --jobs 6 --rate 1.0 --arrival-scale 0.01 --speedup 12

`--workers 1,2` runs the pipeline once per worker count (one decider, the others hot
standbys); the simulator runs once per policy. Rows are keyed policy, or policy/workers
when --workers is given; `--out` writes elsewhere.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from services.devices.fleet import synthetic_source
from venn.settings import GatewaySettings
from venn.sim.engine import SimConfig, Simulation
from venn.sim.runner import tier_model
from venn.stack.demo import DemoConfig, run_demo
from venn.traces.devices import load_device_profiles

OUT = Path(__file__).resolve().parent.parent / "docs" / "results" / "bench" / "fidelity.json"


def simulate(
    jobs, policy: str, rate: float, trace_seed: int, seed: int, speedup: float
) -> float | None:
    source = synthetic_source(rate, None, trace_seed)
    tiers = tier_model(source, 3)
    # The pipeline plans with supply counted per interval of wall time (gateways' reports,
    # or the scheduler's own count of check-ins no gateway counted): in trace time, that
    # interval times the speed-up.
    cfg = SimConfig(
        policy=policy,
        seed=seed,
        horizon_s=5 * 86_400.0,
        supply_report_s=GatewaySettings().supply_report_s * speedup,
        supply_delay_s=0.05 * speedup,
    )
    run = Simulation(jobs, source, load_device_profiles(), cfg, tiers).run()
    jcts = [j.jct for j in run.jobs if j.jct is not None]
    return sum(jcts) / len(jcts) if len(jcts) == len(jobs) else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--rate", type=float, default=1.0)
    ap.add_argument("--arrival-scale", type=float, default=0.01)
    ap.add_argument("--speedup", type=float, default=12.0)
    ap.add_argument("--policies", default="random,venn")
    ap.add_argument("--workers", default="", help="scheduler workers, e.g. 1,2 (default 1)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    keyed = bool(args.workers)
    counts = [int(w) for w in args.workers.split(",")] if args.workers else [1]
    rows = {}
    for policy in args.policies.split(","):
        sim: float | None = None
        for workers in counts:
            cfg = DemoConfig(
                policy=policy,
                jobs=args.jobs,
                rate_per_s=args.rate,
                speedup=args.speedup,
                arrival_scale=args.arrival_scale,
                workers=workers,
            )
            started = time.monotonic()
            result = asyncio.run(run_demo(cfg))
            if sim is None:  # the same jobs, trace and seed for every worker count
                sim = simulate(
                    result.jobs, policy, args.rate, cfg.trace_seed, cfg.seed or 0, args.speedup
                )
            key = f"{policy}/{workers}" if keyed else policy
            rows[key] = {
                "policy": policy,
                "workers": workers,
                "pipeline_avg_jct_s": result.avg_jct_s,
                "pipeline_jobs_finished": result.jobs_finished,
                "pipeline_rounds_failed": result.rounds_failed,
                "simulator_avg_jct_s": sim,
                "pipeline_over_simulator": (
                    round(result.avg_jct_s / sim, 3) if result.avg_jct_s and sim else None
                ),
                "checkins_per_worker": result.workers,
                "wall_s": result.wall_s,
                "total_wall_s": round(time.monotonic() - started, 1),
            }
    title = f"Average JCT (trace s): {args.jobs} demo jobs, {args.rate}/s check-ins"
    table = Table(title=title)
    for col in ("run", "pipeline", "simulator", "pipeline / simulator", "pipeline wall s"):
        table.add_column(col, justify="right")
    for key, r in rows.items():
        table.add_row(
            key,
            f"{r['pipeline_avg_jct_s'] or float('nan'):,.0f}",
            f"{r['simulator_avg_jct_s'] or float('nan'):,.0f}",
            f"{r['pipeline_over_simulator'] or float('nan'):.2f}",
            f"{r['wall_s']:.0f}",
        )
    Console().print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "loadavg_end": round(os.getloadavg()[0], 2),
    }
    out_args = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    args.out.write_text(json.dumps({"args": out_args, "meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
