"""Partitioned decisions in the simulator: average JCT with P emulated check-in
partitions sharing rounds by leases, against the single-worker ``venn`` in the same run.

Each Table 1 workload (50 jobs, rounds and arrival gaps x0.1, the workload's own seed, the
horizon ``venn reproduce`` uses) runs under the single-worker simulator and under
``venn.sim.partitioned`` with P partitions, once per lease delay given. The figure is the
censored mean JCT (every job, an unfinished one counting the common horizon minus its
arrival; equal to the plain mean when every job finishes), as in docs/results/reproduction.md.

    python bench/partitions_bench.py --partitions 12 --delays 0.5

The lease rule is ``LeaseRule``'s default unless given (``--initial-share``,
``--low-water``, ``--in-flight``, ``--recall-when-empty``; ``--no-backstop`` for leases
only). Writes docs/results/bench/partitions.json; docs/notes/scaling.md reports it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from venn.core.lease import LeaseRule
from venn.sim.engine import SimConfig, Simulation
from venn.sim.metrics import summarise
from venn.sim.partitioned import PartitionedSimulation
from venn.sim.reproduce import TABLE1_WORKLOADS
from venn.sim.runner import DAY_S, horizon_of, scale_jobs, scaled_horizon, tier_model, trace_for
from venn.traces.devices import load_device_profiles
from venn.workloads import load_workload

OUT = Path(__file__).resolve().parent.parent / "docs" / "results" / "bench" / "partitions.json"
GOAL = 0.03  # issue 13: within 3% of the single-worker average JCT


def run_one(
    workload: str,
    jobs: int,
    scale: float,
    partitions: int,
    delay: float,
    policy: str,
    rule: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One run: the single-worker simulator when ``partitions`` is 0, else P partitions."""
    wl = load_workload(workload, jobs=jobs)
    specs = scale_jobs(wl.jobs, scale, scale)
    cfg = SimConfig(
        policy=policy,
        seed=wl.seed,
        horizon_s=horizon_of(wl, policy, scale),
        partitions=max(1, partitions),
        lease_delay_s=delay,
    )
    source = trace_for(wl, "synthetic", wl.seed, cfg.horizon_s)
    tiers = tier_model(trace_for(wl, "synthetic", wl.seed, DAY_S), cfg.num_tiers)
    profiles = load_device_profiles()
    sim: Simulation
    if partitions:
        lease_rule = LeaseRule(partitions, **(rule or {}))
        sim = PartitionedSimulation(specs, source, profiles, cfg, tiers, lease_rule)
    else:
        sim = Simulation(specs, source, profiles, cfg, tiers)
    t0 = time.perf_counter()
    run = sim.run()
    wall = time.perf_counter() - t0
    out = summarise(run, None, {"workload": workload}, censor_at=scaled_horizon(wl, scale))
    row: dict[str, Any] = {
        k: out[k]
        for k in (
            "jobs_finished",
            "avg_jct_s",
            "avg_jct_censored_s",
            "avg_sched_delay_s",
            "avg_response_s",
            "rounds_closed",
            "rounds_failed",
            "assignments",
            "checkins",
        )
    }
    row.update(partitions=partitions, lease_delay_s=delay if partitions else None, wall_s=wall)
    row["compiles"] = run.compiles
    if isinstance(sim, PartitionedSimulation):
        row["rule"] = dataclasses.asdict(sim.rule)
        row["lease_messages"] = sim.messages_sent
        row["message_counts"] = dict(sim.message_counts)
        row["passed_over"] = sim.passed_over
        row["offers_accepted"] = sim.offers_accepted
        row["offers_refused"] = sim.offers_refused
        row["refused_reassigned"] = sim.refused_reassigned
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", nargs="+", default=list(TABLE1_WORKLOADS))
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--delays", type=float, nargs="+", default=[0.5])
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--rounds-scale", type=float, default=0.1)
    ap.add_argument("--policy", default="venn")
    ap.add_argument("--initial-share", type=float, default=LeaseRule.initial_share)
    ap.add_argument("--low-water", type=float, default=LeaseRule.low_water)
    ap.add_argument("--no-backstop", action="store_true", help="leases only: no offers, no recalls")
    ap.add_argument("--in-flight", type=int, default=LeaseRule.in_flight)
    ap.add_argument("--recall-when-empty", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    console = Console()
    results: dict[str, list[dict[str, Any]]] = {}
    table = Table(
        title=f"{args.policy}: single worker vs {args.partitions} partitions, "
        f"{args.jobs} jobs, rounds x{args.rounds_scale}"
    )
    for col in ("workload", "run", "finished", "avg JCT s", "vs single", "sched delay s"):
        table.add_column(col, justify="right")
    for col in ("failed/closed", "passed over", "messages", "wall s"):
        table.add_column(col, justify="right")
    for w in args.workloads:
        runs = [run_one(w, args.jobs, args.rounds_scale, 0, 0.0, args.policy)]
        for d in args.delays:
            rule = {
                "initial_share": args.initial_share,
                "low_water": args.low_water,
                "backstop": not args.no_backstop,
                "in_flight": args.in_flight,
                "recall_when_empty": args.recall_when_empty,
            }
            runs.append(
                run_one(w, args.jobs, args.rounds_scale, args.partitions, d, args.policy, rule)
            )
        base = runs[0]["avg_jct_censored_s"]
        for r in runs:
            r["vs_single"] = r["avg_jct_censored_s"] / base - 1.0
            name = (
                "single worker"
                if not r["partitions"]
                else f"P={r['partitions']}, delay {r['lease_delay_s']:g} s"
            )
            table.add_row(
                w,
                name,
                f"{r['jobs_finished']}/{args.jobs}",
                f"{r['avg_jct_censored_s']:,.0f}",
                f"{r['vs_single']:+.1%}" if r["partitions"] else "",
                f"{r['avg_sched_delay_s']:,.0f}",
                f"{r['rounds_failed']:,}/{r['rounds_closed']:,}",
                f"{r.get('passed_over', 0):,}",
                f"{r.get('lease_messages', 0):,}",
                f"{r['wall_s']:.0f}",
            )
        results[w] = runs
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {
                    "args": {
                        k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                    },
                    "goal": GOAL,
                    "results": results,
                },
                indent=1,
            )
        )
        console.print(f"{w}: done")
    console.print(table)


if __name__ == "__main__":
    main()
