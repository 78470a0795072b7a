"""Turn a simulation run into the figures the paper reports.

Unfinished jobs. ``avg_jct_s`` follows the paper (§5): the mean over the jobs that
finished within the horizon, so a policy that starves jobs is not charged for them (and
Random's horizon is doubled). Because that survivor mean flatters a policy that finishes
only the easy jobs, ``summarise`` also reports, when given ``censor_at`` (the common,
undoubled horizon), ``avg_jct_censored_s``: the mean over *all* jobs of
``min(JCT, censor_at - arrival)``, an unfinished job counting ``censor_at - arrival``.
It is a lower bound of the true mean JCT for every policy, uses the same cut-off for every
policy (so Random's doubled horizon cannot help or hurt it), and is what the reproduction
ranks policies by when some policy leaves jobs unfinished.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from venn.sim.engine import SimRun
from venn.sim.rounds import JobRecord
from venn.workloads import TIER_NAMES


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def round_delays(rec: JobRecord) -> tuple[list[float], list[float]]:
    """Per closed round: scheduling delay (request -> D devices, or -> close if never
    filled) and response collection time (fill -> close; 0 if never filled)."""
    sched, resp = [], []
    for r in rec.rounds:
        if r.closed_at is None:
            continue
        filled = r.filled_at if r.filled_at is not None and r.filled_at <= r.closed_at else None
        sched.append((filled if filled is not None else r.closed_at) - r.requested_at)
        resp.append(r.closed_at - filled if filled is not None else 0.0)
    return sched, resp


def concurrency(jobs: list[JobRecord], end: float) -> dict[str, int]:
    """For each job, how many jobs (itself included) overlapped its lifetime."""
    spans = {j.spec.job_id: (j.spec.arrival, j.finished_at or end) for j in jobs}
    out = {}
    for job_id, (a, b) in spans.items():
        out[job_id] = sum(1 for (c, d) in spans.values() if c < b and a < d)
    return out


def waste(jobs: list[JobRecord]) -> dict[str, int]:
    """Where a run's assignments went, each counted once (``assignments`` is their sum):

    - ``counted``: the ceil(0.8 D) results that closed each successful round (what the
      optimality bound charges);
    - ``stragglers``: results of successful rounds past those (arrived after the close,
      or with the k-th at the same instant); ``surplus`` is the part of them dispatched
      after the last device whose result the round counted (over-assignment at close:
      the round would have closed at the same time without them);
    - ``failed_tasks``: tasks of successful rounds that passed their device's window;
    - ``failed_rounds_starved`` / ``failed_rounds_filled``: every assignment of a round
      that missed its deadline, by whether it had been given fewer than ceil(0.8 D)
      devices (it could not succeed) or at least that many; ``failed_rounds_tasks`` is
      the part of both that were failed tasks;
    - ``open_at_end``: assignments of rounds still open when the run ended.
    """
    out = dict.fromkeys(
        (
            "assignments",
            "counted",
            "stragglers",
            "surplus",
            "failed_tasks",
            "failed_rounds_starved",
            "failed_rounds_filled",
            "failed_rounds_tasks",
            "open_at_end",
        ),
        0,
    )
    for j in jobs:
        k = j.spec.results_needed
        for r in j.rounds:
            out["assignments"] += r.assigned
            if r.closed_at is None:
                out["open_at_end"] += r.assigned
            elif r.succeeded:
                out["counted"] += k
                out["stragglers"] += r.results - k + r.stragglers
                out["surplus"] += r.surplus
                out["failed_tasks"] += r.failures
            else:
                out["failed_rounds_starved" if r.assigned < k else "failed_rounds_filled"] += (
                    r.assigned
                )
                out["failed_rounds_tasks"] += r.failures
    return out


def censored_jct(rec: JobRecord, censor_at: float) -> float:
    """``min(JCT, censor_at - arrival)``; an unfinished job counts ``censor_at - arrival``."""
    cap = censor_at - rec.spec.arrival
    return cap if rec.jct is None else min(float(rec.jct), cap)


def summarise(
    run: SimRun,
    isolated: dict[str, float] | None = None,
    extra: dict[str, Any] | None = None,
    censor_at: float | None = None,
) -> dict[str, Any]:
    """The JSON object ``venn sim --json`` prints (see the module docstring for how
    unfinished jobs count)."""
    jobs = run.jobs
    finished = [j for j in jobs if j.jct is not None]
    jcts = [float(j.jct) for j in finished if j.jct is not None]
    sched_all: list[float] = []
    resp_all: list[float] = []
    wasted = stragglers = failed_rounds = 0
    for j in jobs:
        s, r = round_delays(j)
        sched_all += s
        resp_all += r
        for rr in j.rounds:
            stragglers += rr.stragglers
            if rr.closed_at is not None and not rr.succeeded:
                failed_rounds += 1
                wasted += rr.results
    per_tier: dict[str, float | None] = {}
    for tier in sorted({j.spec.tier for j in jobs}):
        vals = [float(j.jct) for j in finished if j.spec.tier == tier and j.jct is not None]
        per_tier[TIER_NAMES.get(tier, str(tier))] = _mean(vals)
    sizes = [j.spec.demand * j.spec.rounds for j in jobs]
    median = float(np.median(sizes)) if sizes else 0.0
    small = [j.spec.demand * j.spec.rounds <= median for j in finished]
    per_size = {
        "small": _mean(
            [float(j.jct) for j, s in zip(finished, small, strict=True) if s and j.jct is not None]
        ),
        "large": _mean(
            [
                float(j.jct)
                for j, s in zip(finished, small, strict=True)
                if not s and j.jct is not None
            ]
        ),
    }
    out: dict[str, Any] = {
        "policy": run.config.policy,
        "seed": run.config.seed,
        "mode": run.config.mode,
        "jobs_total": len(jobs),
        "jobs_finished": len(finished),
        "avg_jct_s": _mean(jcts),
        "avg_jct_censored_s": (
            _mean([censored_jct(j, censor_at) for j in jobs]) if censor_at is not None else None
        ),
        "censor_at_s": censor_at,
        "makespan_s": (
            max(j.finished_at for j in finished if j.finished_at is not None)
            - min(j.spec.arrival for j in jobs)
            if finished
            else None
        ),
        "avg_sched_delay_s": _mean(sched_all),
        "avg_response_s": _mean(resp_all),
        "rounds_closed": len(sched_all),
        "rounds_failed": failed_rounds,
        "wasted_responses": wasted,
        "straggler_responses": stragglers,
        "checkins": run.checkins,
        "assignments": run.assignments,
        "plan_recomputes": run.replans,
        "rounds_restricted": run.rounds_restricted,
        "restrictions_lifted": run.restrictions_lifted,
        "per_tier": per_tier,
        "per_size": per_size,
        "waste": waste(jobs),
    }
    if isolated is not None:
        iso = [isolated[j.spec.job_id] for j in jobs if j.spec.job_id in isolated]
        # A job that cannot finish even alone (inf) has no lower bound to average.
        out["isolated_avg_jct_s"] = _mean([x for x in iso if np.isfinite(x)])
        out["isolated_unfinished"] = sum(1 for x in iso if not np.isfinite(x))
        conc = concurrency(jobs, run.end_time)
        fair = [
            j.jct <= conc[j.spec.job_id] * isolated[j.spec.job_id]
            for j in finished
            if j.jct is not None and j.spec.job_id in isolated
        ]
        out["fair_share_ratio"] = float(np.mean(fair)) if fair else None
    if extra:
        out.update(extra)
    return out
