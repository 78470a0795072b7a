"""Build a simulation from user-facing names (workload, policy, trace) and run it."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from venn.core.capacity import TierModel, capacity_proxy
from venn.core.model import JobSpec
from venn.sim.engine import Mode, SimConfig, SimRun, Simulation
from venn.sim.metrics import summarise
from venn.traces.checkins import CheckinSource, SyntheticTrace, load_trace
from venn.traces.devices import load_device_profiles
from venn.workloads import Workload, load_workload

DAY_S = 86_400.0
TRACE_PERIOD_S = 5 * DAY_S  # the paper cuts the week-long trace to 5 days and replays it
RANDOM_HORIZON_FACTOR = 2.0  # the paper doubles the horizon for Random
MIN_SCALED_HORIZON_S = 2 * DAY_S  # floor of a scaled run's horizon


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
    rounds_scale: float = 1.0
    arrival_scale: float | None = None  # None: same as rounds_scale (keeps the load shape)


def scale_jobs(
    jobs: Sequence[JobSpec], rounds_scale: float = 1.0, arrival_scale: float = 1.0
) -> list[JobSpec]:
    """A reduced copy of a workload's jobs.

    Every job's rounds are multiplied by ``rounds_scale`` (at least one round), and the
    gaps between arrivals by ``arrival_scale``: the first job still arrives when it did
    (3600 s, after the supply window has warmed up) and job ``i`` at
    ``first + (arrival_i - first) * arrival_scale``. Scaling both by the same factor keeps
    the load shape of the full workload (how many jobs overlap, and for how much of their
    lives); scaling rounds alone spreads shorter jobs over the original day of arrivals
    and lowers contention.
    """
    if rounds_scale <= 0 or arrival_scale <= 0:
        raise ValueError("scales must be positive")
    if not jobs:
        return []
    first = min(j.arrival for j in jobs)
    return [
        dataclasses.replace(
            j,
            rounds=max(1, round(j.rounds * rounds_scale)),
            arrival=first + (j.arrival - first) * arrival_scale,
        )
        for j in jobs
    ]


def scaled_horizon(workload: Workload, rounds_scale: float = 1.0) -> float:
    """The workload's horizon (5 days x NUM_WEEK) for every policy but Random, shrunk with
    the rounds (job lifetimes scale with their rounds), never below two days."""
    if rounds_scale >= 1.0:
        return workload.horizon_s
    return max(workload.horizon_s * rounds_scale, MIN_SCALED_HORIZON_S)


def trace_for(workload: Workload, trace: str, seed: int, horizon_s: float) -> CheckinSource:
    """The synthetic trace, or a FedScale availability CSV replayed over the horizon."""
    if trace == "synthetic":
        return SyntheticTrace(seed=seed, horizon_s=horizon_s)
    return load_trace(trace, seed=seed, horizon_s=horizon_s, period_s=TRACE_PERIOD_S)


def tier_model(source: CheckinSource, num_tiers: int, sample_s: float = DAY_S) -> TierModel:
    """Equal-count capacity tiers from the first day of the trace."""
    proxies = [capacity_proxy(b.comp, b.comm) for b in source.chunks(0.0, sample_s)]
    return TierModel.from_sample(np.concatenate(proxies), num_tiers)


def horizon_of(workload: Workload, policy: str, rounds_scale: float = 1.0) -> float:
    """Simulated horizon of ``policy``: the (scaled) workload horizon, doubled for Random."""
    factor = RANDOM_HORIZON_FACTOR if policy == "random" else 1.0
    return scaled_horizon(workload, rounds_scale) * factor


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
    arrival_scale = req.rounds_scale if req.arrival_scale is None else req.arrival_scale
    jobs = scale_jobs(workload.jobs, req.rounds_scale, arrival_scale)
    horizon = horizon_of(workload, req.policy, req.rounds_scale)
    common = scaled_horizon(workload, req.rounds_scale)
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

    run = run_jobs(jobs, source_for, config)
    isolated = None
    if req.isolated:
        isolated = isolated_jcts(jobs, source_for, dataclasses.replace(config, horizon_s=common))
    extra = {
        "workload": workload.name,
        "trace": trace,
        "horizon_s": horizon,
        "rounds_scale": req.rounds_scale,
        "arrival_scale": arrival_scale,
    }
    return summarise(run, isolated, extra, censor_at=common)
