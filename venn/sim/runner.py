"""Build a simulation from user-facing names (workload, policy, trace) and run it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from venn.core.matching import TierModel
from venn.core.model import JobSpec
from venn.sim.engine import Mode, SimConfig, SimRun, Simulation
from venn.sim.metrics import summarise
from venn.traces.checkins import CheckinSource, SyntheticTrace, capacity_proxy, load_trace
from venn.traces.devices import load_device_profiles
from venn.workloads import Workload, load_workload

DAY_S = 86_400.0
TRACE_PERIOD_S = 5 * DAY_S  # the paper cuts the week-long trace to 5 days and replays it
RANDOM_HORIZON_FACTOR = 2.0  # the paper doubles the horizon for Random


@dataclass(frozen=True)
class SimRequest:
    workload: str = "even"
    policy: str = "venn"
    jobs: int = 50
    seed: int | None = None
    trace: str = "synthetic"
    mode: Mode = "fast"
    num_tiers: int = 3
    fairness_eps: float = 0.0
    isolated: bool = True


def trace_for(workload: Workload, trace: str, seed: int, horizon_s: float) -> CheckinSource:
    """The synthetic trace, or a FedScale availability CSV replayed over the horizon."""
    if trace == "synthetic":
        return SyntheticTrace(seed=seed, horizon_s=horizon_s)
    return load_trace(trace, seed=seed, horizon_s=horizon_s, period_s=TRACE_PERIOD_S)


def tier_model(source: CheckinSource, num_tiers: int, sample_s: float = DAY_S) -> TierModel:
    """Equal-count capacity tiers from the first day of the trace."""
    proxies = [capacity_proxy(b.comp, b.comm) for b in source.chunks(0.0, sample_s)]
    return TierModel.from_sample(np.concatenate(proxies), num_tiers)


def horizon_of(workload: Workload, policy: str) -> float:
    factor = RANDOM_HORIZON_FACTOR if policy == "random" else 1.0
    return workload.horizon_s * factor


def run_jobs(
    jobs: tuple[JobSpec, ...] | list[JobSpec],
    source_for: Callable[[float], CheckinSource],
    config: SimConfig,
) -> SimRun:
    """Run jobs over a fresh trace (``source_for(horizon)``)."""
    source = source_for(config.horizon_s)
    tiers = tier_model(source_for(DAY_S), config.num_tiers)
    return Simulation(jobs, source, load_device_profiles(), config, tiers).run()


def isolated_jcts(
    jobs: tuple[JobSpec, ...] | list[JobSpec],
    source_for: Callable[[float], CheckinSource],
    config: SimConfig,
) -> dict[str, float]:
    """Each job's JCT when it runs alone on the same trace (a lower bound)."""
    out = {}
    alone = SimConfig(
        policy="fifo",
        seed=config.seed,
        horizon_s=config.horizon_s,
        mode="fast",
        num_tiers=config.num_tiers,
    )
    for job in jobs:
        run = run_jobs([job], source_for, alone)
        jct = run.jobs[0].jct
        out[job.job_id] = float(jct) if jct is not None else math.inf
    return out


def simulate(req: SimRequest) -> dict[str, Any]:
    """Run one simulation and return ``venn sim --json``'s object."""
    workload = load_workload(req.workload, jobs=req.jobs, seed=req.seed)
    seed = workload.seed
    trace = req.trace
    if trace == "synthetic" and workload.client_file is not None:
        trace = str(workload.client_file)
    horizon = horizon_of(workload, req.policy)
    config = SimConfig(
        policy=req.policy,
        seed=seed,
        horizon_s=horizon,
        mode=req.mode,
        num_tiers=req.num_tiers,
        fairness_eps=req.fairness_eps,
    )

    def source_for(h: float) -> CheckinSource:
        return trace_for(workload, trace, seed, h)

    run = run_jobs(workload.jobs, source_for, config)
    isolated = None
    if req.isolated:
        isolated = isolated_jcts(workload.jobs, source_for, config)
    extra = {"workload": workload.name, "trace": trace, "horizon_s": horizon}
    return summarise(run, isolated, extra)
