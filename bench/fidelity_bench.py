"""Policy fidelity: the pipeline and the simulator on the same small contended workload.

For each policy, runs the whole pipeline (`run_demo`: broker, Faust scheduler, recorder,
coordinators, device fleet) --repeats times and the simulator on the same jobs and the same
synthetic trace, and compares the pipeline's mean average JCT (trace seconds) with the
simulator's. Goal (issue 21): within 5% for `random` and `venn`, mean of 3 pipeline runs.

The simulator's figure is its mean over --sim-seeds seeds: seed k redraws every check-in's
U(0,1) draw (which `random` picks its job with; seed 0 keeps the trace's own) and seeds the
scheduler (tier matching's draws). The devices and times are the trace's in every run. A
pipeline run cannot replay the simulator's draws (its draw is a hash of the check-in's event
id, and its order of check-ins is set by wall-clock timing), so comparing with one seed
compares two samples of a random outcome; the mean over seeds is the simulator's
expectation, the figure the pipeline's mean should match.

    python -m bench.fidelity_bench                      # 3 runs per policy, about 12 minutes
    python -m bench.fidelity_bench --repeats 1 --no-write

`--workers 1,2` runs the pipeline per worker count (one decider, the others hot standbys).
Writes docs/results/bench/fidelity.json and the block of docs/results/fidelity.md.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.common import git_commit, preamble, write_block
from devtools.stack.demo import DemoConfig, run_demo
from services.devices.fleet import synthetic_source
from venn.settings import GatewaySettings
from venn.sim.engine import SimConfig, Simulation
from venn.sim.runner import tier_model
from venn.traces.checkins import CheckinBatch, CheckinSource
from venn.traces.devices import load_device_profiles

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results" / "bench" / "fidelity.json"
PAGE = ROOT / "docs" / "results" / "fidelity.md"
GOAL = 0.05


@dataclasses.dataclass(frozen=True)
class Redrawn:
    """A trace with its check-ins' U(0,1) draws redrawn from ``seed`` (0 keeps the trace's
    own): the same devices at the same times, another sample of the policy's random picks."""

    source: CheckinSource
    seed: int

    @property
    def name(self) -> str:
        return f"{self.source.name} (draws {self.seed})"

    def chunks(self, start: float = 0.0, end: float = math.inf) -> Iterator[CheckinBatch]:
        rng = np.random.default_rng(self.seed)
        for batch in self.source.chunks(start, end):
            if self.seed:
                batch = dataclasses.replace(batch, u=rng.random(len(batch.u)))
            yield batch


def simulate(
    jobs, policy: str, rate: float, trace_seed: int, seed: int, speedup: float
) -> float | None:
    source = Redrawn(synthetic_source(rate, None, trace_seed), seed)
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


def markdown(meta: dict, args: argparse.Namespace, rows: dict) -> str:
    lines = [
        f"Run {meta['date']} (commit {meta['commit']}, {os.cpu_count()} cores): "
        f"`python -m bench.fidelity_bench --repeats {args.repeats} --sim-seeds {args.sim_seeds}`"
        f" ({meta['wall_s']:.0f} s). {args.jobs} demo jobs, synthetic trace at {args.rate} "
        f"check-ins per trace second, arrival gaps x{args.arrival_scale}, speed-up "
        f"{args.speedup:g}; one Apache Kafka node; average JCT in trace seconds.",
        "",
        "| run | pipeline, each run | pipeline mean | simulator mean (seeds) | simulator, "
        "seed 0 | pipeline / simulator | within 5% |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for key, r in rows.items():
        runs = ", ".join(f"{j:,.0f}" if j else "unfinished" for j in r["pipeline_avg_jct_s"])
        ratio = r["pipeline_over_simulator"]
        ok = "yes" if ratio is not None and abs(ratio - 1) <= GOAL else "**no**"
        lines.append(
            f"| {key} | {runs} | {r['pipeline_mean_jct_s'] or float('nan'):,.0f} | "
            f"{r['simulator_mean_jct_s']:,.0f} ({len(r['simulator_jct_s'])}) | "
            f"{r['simulator_jct_s'][0]:,.0f} | {ratio if ratio is not None else float('nan'):.3f}"
            f" | {ok} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--rate", type=float, default=1.0)
    ap.add_argument("--arrival-scale", type=float, default=0.01)
    ap.add_argument("--speedup", type=float, default=12.0)
    ap.add_argument("--policies", default="random,venn")
    ap.add_argument("--workers", default="", help="scheduler workers, e.g. 1,2 (default 1)")
    ap.add_argument("--repeats", type=int, default=3, help="pipeline runs per policy")
    ap.add_argument("--sim-seeds", type=int, default=10, help="simulator seeds per policy")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    preamble("fidelity_bench")
    keyed = bool(args.workers)
    counts = [int(w) for w in args.workers.split(",")] if args.workers else [1]
    rows = {}
    began = time.monotonic()
    for policy in args.policies.split(","):
        sims: list[float] = []
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
            results = []
            for _ in range(args.repeats):
                results.append(asyncio.run(run_demo(cfg)))
                print(policy, workers, results[-1].avg_jct_s, flush=True)
            if not sims:  # the same jobs, trace and seeds for every worker count
                for seed in range(args.sim_seeds):
                    jct = simulate(
                        results[0].jobs, policy, args.rate, cfg.trace_seed, seed, args.speedup
                    )
                    if jct is not None:
                        sims.append(jct)
            jcts = [r.avg_jct_s for r in results]
            done = [j for j in jcts if j]
            mean = statistics.fmean(done) if len(done) == len(jcts) else None
            sim = statistics.fmean(sims) if sims else None
            key = f"{policy}/{workers}" if keyed else policy
            rows[key] = {
                "policy": policy,
                "workers": workers,
                "pipeline_avg_jct_s": jcts,
                "pipeline_mean_jct_s": mean,
                "pipeline_jobs_finished": [r.jobs_finished for r in results],
                "pipeline_rounds_failed": [r.rounds_failed for r in results],
                "simulator_jct_s": sims,
                "simulator_mean_jct_s": sim,
                "pipeline_over_simulator": round(mean / sim, 3) if mean and sim else None,
                "checkins_per_worker": [r.workers for r in results],
                "wall_s": [r.wall_s for r in results],
                "total_wall_s": round(time.monotonic() - started, 1),
            }
    title = f"Average JCT (trace s): {args.jobs} demo jobs, {args.rate}/s check-ins"
    table = Table(title=title)
    for col in ("run", "pipeline mean", "simulator mean", "pipeline / simulator"):
        table.add_column(col, justify="right")
    for key, r in rows.items():
        table.add_row(
            key,
            f"{r['pipeline_mean_jct_s'] or float('nan'):,.0f}",
            f"{r['simulator_mean_jct_s'] or float('nan'):,.0f}",
            f"{r['pipeline_over_simulator'] or float('nan'):.3f}",
        )
    Console().print(table)
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "commit": git_commit(),
        "wall_s": round(time.monotonic() - began, 1),
        "loadavg_end": round(os.getloadavg()[0], 2),
    }
    if args.no_write:
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    out_args = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    args.out.write_text(json.dumps({"args": out_args, "meta": meta, "rows": rows}, indent=1))
    if args.out == OUT:
        write_block(
            PAGE,
            "fidelity",
            markdown(meta, args, rows),
            "Policy fidelity: pipeline against simulator",
        )


if __name__ == "__main__":
    main()
