"""Simulations of a paper workload as the reports run them, one at a time or many in worker
processes: `venn reproduce` (`venn.sim.reproduce`) and its fairness sweep
(`venn.sim.fairness_sweep`) both run theirs here, the same way.

A run is a (workload, policy) pair at given scales (``venn.sim.runner.scale_jobs``), on the
workload's synthetic trace and seed, with the horizon `venn reproduce` uses; the pseudo-policy
``isolated`` runs every job alone on the same trace (the lower bound).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import Progress

from venn.core.model import JobSpec
from venn.sim.engine import SimConfig
from venn.sim.metrics import summarise
from venn.sim.runner import (
    horizon_of,
    isolated_jcts,
    run_jobs,
    scale_jobs,
    scaled_horizon,
    trace_for,
)
from venn.traces.checkins import CheckinSource
from venn.workloads import Workload, load_workload

ISOLATED = "isolated"
"""Pseudo-policy: every job alone (the isolated-JCT lower bound)."""

Key = TypeVar("Key")


@dataclass(frozen=True)
class WorkloadRun:
    """One simulation to run: ``policy`` on ``workload`` (``jobs`` jobs) at these scales."""

    workload: str
    policy: str
    jobs: int
    rounds_scale: float
    arrival_scale: float
    fairness_eps: float = 0.0


def scaled_workload(
    workload: str, jobs: int, rounds_scale: float, arrival_scale: float
) -> tuple[Workload, list[JobSpec]]:
    """The workload and its jobs with rounds and arrival gaps scaled."""
    wl = load_workload(workload, jobs=jobs)
    return wl, scale_jobs(wl.jobs, rounds_scale, arrival_scale)


def simulate_run(run: WorkloadRun) -> dict[str, Any]:
    """Run ``run``: the summary of `venn.sim.metrics.summarise` (censored at the common
    horizon) with every JCT and each job's outcome; for ``isolated``, each job's JCT alone
    (None where it does not finish within the horizon, which keeps the JSON standard)."""
    wl, specs = scaled_workload(run.workload, run.jobs, run.rounds_scale, run.arrival_scale)
    common = scaled_horizon(wl, run.rounds_scale)

    def source_for(h: float) -> CheckinSource:
        return trace_for(wl, "synthetic", wl.seed, h)

    if run.policy == ISOLATED:
        cfg = SimConfig(policy="fifo", seed=wl.seed, horizon_s=common)
        iso = isolated_jcts(specs, source_for, cfg)
        jct_by_job = {k: (v if math.isfinite(v) else None) for k, v in iso.items()}
        return {"workload": run.workload, "policy": ISOLATED, "jct_by_job": jct_by_job}
    cfg = SimConfig(
        policy=run.policy,
        seed=wl.seed,
        horizon_s=horizon_of(wl, run.policy, run.rounds_scale),
        fairness_eps=run.fairness_eps,
    )
    result = run_jobs(specs, source_for, cfg)
    out = summarise(result, None, {"workload": run.workload}, censor_at=common)
    out["jcts"] = [j.jct for j in result.jobs if j.jct is not None]
    out["per_job"] = [
        {
            "id": j.spec.job_id,
            "tier": j.spec.tier,
            "demand": j.spec.demand,
            "rounds": j.spec.rounds,
            "arrival": j.spec.arrival,
            "jct": j.jct,
            "succeeded_rounds": j.succeeded_rounds,
            "attempts": len(j.rounds),
        }
        for j in result.jobs
    ]
    return out


def simulate_in_processes(
    runs: Sequence[tuple[Key, WorkloadRun]],
    processes: int,
    console: Console,
    on_done: Callable[[Key, dict[str, Any]], None],
    label: str = "simulating",
) -> None:
    """Run every ``(key, run)`` in ``processes`` worker processes, calling ``on_done(key,
    result)`` in this process as each finishes (in completion order), with a progress bar."""
    if not runs:
        return
    with Progress(console=console) as progress, ProcessPoolExecutor(processes) as pool:
        bar = progress.add_task(label, total=len(runs))
        futures = {pool.submit(simulate_run, run): (key, run) for key, run in runs}
        for fut in as_completed(futures):
            key, run = futures[fut]
            on_done(key, fut.result())
            name = run.policy if not run.fairness_eps else f"{run.policy} eps={run.fairness_eps:g}"
            progress.console.print(f"done: {run.workload} / {name}")
            progress.advance(bar)
