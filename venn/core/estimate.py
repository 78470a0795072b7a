"""Completion estimates: a fluid model of the IRS plan run forward from the live state.

Why a fluid model (and not a short run of the simulator): it needs only what the
scheduler holds (the supply mix and rate of its window, each job's work left, the
response times it measured), it costs one IRS plan per job completion, and every step is
a rule of the real policy rather than a second simulator to keep in step with it.

The model. Each unfinished job has work left ``W`` (devices still to assign: the open
round's remaining demand plus ``demand`` per later round). Time advances in phases; a
phase ends when some job finishes. In each phase:

- the IRS plan (``venn.core.irs.irs_plan``, the policy's own function) gives each
  signature an owner group from the signatures' supply and the groups' queues of ``W``;
- each signature's check-in rate is offered down its preference list as the dispatch
  table does: the owner group's jobs by ascending ``W``, then every other eligible job by
  ascending ``W``;
- a job offered ``r`` devices/s spends ``D / r`` filling a round and then ``L`` (its round
  latency: fill to close) waiting for results, so it takes ``r D / (D + r L)`` and passes
  the rest on (devices arriving while its round waits go to the next job);
- a job whose round cannot collect its needed results before its deadline at the rate
  it is offered (``needed / r + L > deadline``) makes no progress: it takes what it is
  offered (its rounds fail at the deadline) until a completion frees supply for it.

A job that can make no progress in a phase where nothing else finishes never completes
at the current supply: its estimate is ``inf``. Later arrivals are unknown to the model;
a shorter job arriving later goes ahead of a waiting one, so estimates err early under
load (docs/results/estimate.md measures it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from venn.core.arrivals import Arrival, ArrivalModel
from venn.core.irs import irs_plan
from venn.core.model import Requirement
from venn.core.scheduler import Scheduler

BAND_SAMPLES = 16
"""Scenarios of later arrivals an estimate band is made of."""


@dataclass(frozen=True)
class JobLoad:
    """What the model needs of one unfinished job."""

    job_id: str
    group: int
    work: float
    """Devices still to assign over the job's life."""
    demand: int
    needed: int
    """Results that make a round succeed."""
    deadline_s: float
    latency_s: float
    """Seconds from a round's last assignment to its close (its results arriving)."""


@dataclass(frozen=True)
class SupplyView:
    """The supply the model runs on: eligibility per signature and its check-in rate."""

    sig_matrix: np.ndarray
    """Boolean [signatures, groups]."""
    counts: np.ndarray
    """Check-ins per signature in the window (the plan's supply)."""
    rate_per_s: float
    """Check-ins per second of the whole window."""

    def signature_rates(self) -> np.ndarray:
        total = float(self.counts.sum())
        if total <= 0 or self.rate_per_s <= 0:
            return np.zeros(len(self.counts))
        return self.rate_per_s * np.asarray(self.counts, dtype=np.float64) / total


def _taken(offered: float, job: JobLoad) -> float:
    """Devices per second a job takes when ``offered`` per second (its fill/wait cycle)."""
    if offered <= 0:
        return 0.0
    return offered * job.demand / (job.demand + offered * job.latency_s)


def _meets_deadline(offered: float, job: JobLoad) -> bool:
    return offered > 0 and job.needed / offered + job.latency_s <= job.deadline_s


class _Pool:
    """The unfinished jobs of a model run, as columns: every phase reads all of them, and
    a pass over Python objects per phase made an estimate cost seconds with 2,000 jobs."""

    def __init__(self, rank_of: dict[str, int]) -> None:
        self.rank_of = rank_of
        self.jobs = np.zeros(0, dtype=object)  # the JobLoads
        self.rank = np.zeros(0, dtype=np.int64)
        self.group = np.zeros(0, dtype=np.int64)
        self.demand = np.zeros(0)
        self.needed = np.zeros(0)
        self.deadline = np.zeros(0)
        self.latency = np.zeros(0)
        self.work = np.zeros(0)

    def add(self, jobs: Sequence[JobLoad]) -> None:
        if not jobs:
            return
        column = np.empty(len(jobs), dtype=object)
        column[:] = list(jobs)
        self.jobs = np.concatenate([self.jobs, column])
        self.rank = np.append(self.rank, [self.rank_of[j.job_id] for j in jobs])
        self.group = np.append(self.group, [j.group for j in jobs])
        self.demand = np.append(self.demand, [float(j.demand) for j in jobs])
        self.needed = np.append(self.needed, [float(j.needed) for j in jobs])
        self.deadline = np.append(self.deadline, [j.deadline_s for j in jobs])
        self.latency = np.append(self.latency, [j.latency_s for j in jobs])
        self.work = np.append(self.work, [j.work for j in jobs])

    def keep(self, kept: np.ndarray) -> None:
        for name in ("jobs", "rank", "group", "demand", "needed", "deadline", "latency", "work"):
            setattr(self, name, getattr(self, name)[kept])

    def taken(self, offered: np.ndarray) -> np.ndarray:
        """``_taken`` of every job (zero where offered nothing)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            took = offered * self.demand / (self.demand + offered * self.latency)
            meets = (offered > 0) & (self.needed / offered + self.latency <= self.deadline)
        return np.where(meets, took, 0.0)


def _phase_rates(
    sig_matrix: np.ndarray, sig_rates: list[float], counts: np.ndarray, pool: _Pool
) -> np.ndarray:
    """Each job's progress rate (devices of work per second) under this phase's plan."""
    jobs = pool.jobs
    order = np.lexsort((pool.rank, pool.work))  # ascending work, then job id
    in_order = pool.group[order]
    by = np.argsort(in_order, kind="stable")
    sorted_groups = in_order[by]
    groups, first, sizes = np.unique(sorted_groups, return_index=True, return_counts=True)
    members = order[by]
    works = pool.work[members].tolist()
    spans = {int(g): (int(f), int(f + n)) for g, f, n in zip(groups, first, sizes, strict=True)}
    # The plan's queues in the order their groups first appear by ascending work.
    seen, at = np.unique(in_order, return_index=True)
    appear = seen[np.argsort(at)].tolist()
    owner = irs_plan(sig_matrix, counts, {g: works[slice(*spans[g])] for g in appear}).tolist()
    ordered = order.tolist()
    group_of = pool.group.tolist()
    members_list = members.tolist()
    offered = [0.0] * len(jobs)
    for sig, rate in enumerate(sig_rates):
        if rate <= 0:
            continue
        own = owner[sig]
        eligible = sig_matrix[sig].tolist()
        mine = members_list[slice(*spans[own])] if own >= 0 and own in spans else ()
        others = (i for i in ordered if group_of[i] != own and eligible[group_of[i]])
        left = rate
        for i in chain(mine, others):
            job = jobs[i]
            before = offered[i]
            offered[i] = before + left
            if _meets_deadline(before, job) or _meets_deadline(offered[i], job):
                used = _taken(offered[i], job) - _taken(before, job)
            else:  # its rounds fail at the deadline: it holds what it is offered
                used = min(left, max(0.0, job.demand / job.deadline_s - before))
            left -= used
            if left <= 1e-12:
                break
    return pool.taken(np.array(offered))


def completion_times(
    supply: SupplyView,
    jobs: Sequence[JobLoad],
    now: float,
    arrivals: Sequence[tuple[float, JobLoad]] = (),
    until: Sequence[str] | None = None,
) -> dict[str, float]:
    """Estimated completion time (on the caller's clock) of every job; ``inf`` for a job
    that cannot finish at the current supply.

    ``arrivals``: jobs that join at later times (ascending), as a phase boundary each; a
    job that cannot progress now may progress once one of them changes the plan, and
    one that joins may go ahead of a job waiting. ``until``: stop once these jobs have an
    estimate (the rest are left out)."""
    sig_rates = supply.signature_rates().tolist()
    counts = np.asarray(supply.counts, dtype=np.float64)
    sig_matrix = np.asarray(supply.sig_matrix, dtype=bool)
    out: dict[str, float] = {j.job_id: now + j.latency_s for j in jobs if j.work <= 0}
    pending = [(t, j) for t, j in arrivals if t >= now]
    names = sorted({j.job_id for j in jobs} | {j.job_id for _, j in pending})
    pool = _Pool({name: rank for rank, name in enumerate(names)})
    pool.add([j for j in jobs if j.work > 0])
    wanted = None if until is None else {u for u in until if u not in out}
    t = now
    a = 0
    while len(pool.jobs) or a < len(pending):
        if wanted is not None and not wanted:
            break
        next_arrival = pending[a][0] if a < len(pending) else math.inf
        if len(pool.jobs):
            rates = _phase_rates(sig_matrix, sig_rates, counts, pool)
            steps = np.full(len(rates), math.inf)
            np.divide(pool.work, rates, out=steps, where=rates > 0)
            dt = float(steps.min())
        else:
            rates, steps, dt = np.zeros(0), np.zeros(0), math.inf
        if a < len(pending) and t + dt >= next_arrival:  # an arrival first: add it then
            dt = next_arrival - t
            pool.work = pool.work - rates * dt
            t = next_arrival
            joining = []
            while a < len(pending) and pending[a][0] <= t:
                job = pending[a][1]
                a += 1
                if job.work > 0:
                    joining.append(job)
            pool.add(joining)
            continue
        if not math.isfinite(dt):
            break
        t += dt
        done = steps <= dt * (1 + 1e-9)
        for i in np.flatnonzero(done).tolist():
            job_id = pool.jobs[i].job_id
            out[job_id] = t
            if wanted is not None:
                wanted.discard(job_id)
        pool.work = pool.work - rates * dt
        pool.keep(~done)
    for j in pool.jobs:
        out.setdefault(j.job_id, math.inf)
    return out


def round_latency(response_times: Iterable[Iterable[float]]) -> float | None:
    """The fleet's round latency (fill to close): the median of the jobs' measured ones
    that are positive (a round that never filled records 0); None before any."""
    values = [v for vs in response_times for v in vs if v > 0]
    return float(np.median(values)) if values else None


def waste_factor(core: Scheduler) -> float:
    """Devices assigned per device of demand of a successful round, over every job the
    core has seen (1.0 before any round succeeded): what failed rounds, failed tasks and
    stragglers add to a job's work."""
    assigned = done = 0
    for js in core.by_idx:
        if js.rounds_done > 0:
            assigned += js.service
            done += min(js.rounds_done, js.spec.rounds) * js.spec.demand
    return max(1.0, assigned / done) if done else 1.0


def job_loads(core: Scheduler, waste: float = 1.0) -> list[JobLoad]:
    """The model's view of ``core``'s unfinished jobs, their work multiplied by ``waste``
    (``waste_factor``). A job's round latency is its own median if it measured one, else
    the fleet's, else its declared ``workload_s``."""
    fleet = round_latency(js.response_times for js in core.jobs.values())
    out = []
    for js in core.jobs.values():
        if js.finished:
            continue
        spec = js.spec
        later = spec.rounds - js.rounds_done - (1 if js.round_open else 0)
        work = (js.remaining if js.round_open else 0) + max(0, later) * spec.demand
        own = round_latency([js.response_times])
        latency = own if own is not None else fleet if fleet is not None else spec.workload_s
        out.append(
            JobLoad(
                spec.job_id,
                js.group,
                float(work) * waste,
                spec.demand,
                spec.results_needed,
                spec.deadline,
                latency,
            )
        )
    return out


def supply_view(core: Scheduler) -> SupplyView:
    """The supply of ``core``'s window, by signature."""
    index = core.index
    return SupplyView(
        index.signature_matrix,
        core.signature_counts()[: index.num_signatures],
        core.supply.rate_per_s(),
    )


def scheduler_estimates(core: Scheduler, now: float) -> dict[str, float]:
    """Estimated completion time of every unfinished job of ``core`` at ``now``."""
    return completion_times(supply_view(core), job_loads(core), now)


SIMILAR_MIN = 5
"""Finished jobs of a requirement its track record needs to judge a job of it alone."""


class TrackRecord:
    """The estimate's past errors: for each job that finished, its requirement and its
    actual time to completion over the P50 estimated at its arrival (3Sigma's idea:
    predict with the distribution of past errors of similar jobs, not a point)."""

    def __init__(self, entries: Sequence[tuple[Requirement, float]] = ()) -> None:
        self.entries = [(req, r) for req, r in entries if r > 0 and math.isfinite(r)]

    def add(self, requirement: Requirement, ratio: float) -> None:
        if ratio > 0 and math.isfinite(ratio):
            self.entries.append((requirement, ratio))

    def ratios(self, requirement: Requirement) -> np.ndarray:
        """The ratios of the jobs of ``requirement`` if there are SIMILAR_MIN, else of
        every job (empty: no record)."""
        similar = [r for req, r in self.entries if req == requirement]
        if len(similar) >= SIMILAR_MIN:
            return np.array(similar)
        return np.array([r for _, r in self.entries])


@dataclass(frozen=True)
class Band:
    """A completion estimate with its spread over scenarios of later arrivals (times on
    the caller's clock; ``inf``: not at the current supply)."""

    p50: float
    p90: float


def arrival_history(core: Scheduler) -> list[Arrival]:
    """Every job ``core`` has registered, as it arrived."""
    return [Arrival.of(js.spec, js.registered_at) for js in core.by_idx]


def _arrival_loads(
    scenario: Sequence[Arrival], groups: dict[Requirement, int], waste: float, latency: float
) -> list[tuple[float, JobLoad]]:
    """A scenario's arrivals as the fluid model's jobs (a requirement no group of the
    core has is left out: no signature says which devices it could take)."""
    out = []
    for i, a in enumerate(scenario):
        group = groups.get(a.requirement)
        if group is not None:
            work = float(a.rounds * a.demand) * waste
            load = JobLoad(f"later-{i}", group, work, a.demand, a.needed, a.deadline_s, latency)
            out.append((a.time, load))
    return out


def completion_bands(
    supply: SupplyView,
    jobs: Sequence[JobLoad],
    now: float,
    model: ArrivalModel,
    requirements: Sequence[Requirement],
    waste: float = 1.0,
    samples: int = BAND_SAMPLES,
    seed: int = 0,
    only: Sequence[str] | None = None,
    record: TrackRecord | None = None,
) -> dict[str, Band]:
    """P50 and P90 of each job's completion over ``samples`` scenarios of later arrivals
    drawn from ``model`` (``requirements``: each group's, by group id); ``only``: just
    these jobs. Deterministic for a seed.

    With a ``record``, each scenario's time left is multiplied by every past ratio of
    similar jobs, and the quantiles are taken over all the products: the band then holds
    the model's own errors as well as the arrivals it cannot know."""
    groups: dict[Requirement, int] = {}
    for group, req in enumerate(requirements):
        groups.setdefault(req, group)  # a later arrival joins its requirement's first group
    known = [j.latency_s for j in jobs if j.latency_s > 0]
    latency = float(np.median(known)) if known else 30.0
    rng = np.random.default_rng(seed)
    wanted = [j.job_id for j in jobs] if only is None else list(only)
    ends: dict[str, list[float]] = {job_id: [] for job_id in wanted}
    for _ in range(samples):
        later = _arrival_loads(model.scenario(now, rng), groups, waste, latency)
        out = completion_times(supply, jobs, now, later, until=wanted)
        for job_id in wanted:
            ends[job_id].append(out.get(job_id, math.inf))
    group_of = {j.job_id: j.group for j in jobs}
    bands = {}
    for job_id, v in ends.items():
        g = group_of.get(job_id, -1)
        mine = requirements[g] if 0 <= g < len(requirements) else None
        scale = record.ratios(mine) if record is not None and mine is not None else np.ones(0)
        if not len(scale):
            scale = np.ones(1)
        left = (np.asarray(v)[:, None] - now) * scale[None, :]
        # No interpolation: an infinite end (not at this supply) stays one.
        p50, p90 = np.quantile(left, [0.5, 0.9], method="inverted_cdf")
        bands[job_id] = Band(now + float(p50), now + float(p90))
    return bands


def scheduler_bands(
    core: Scheduler,
    now: float,
    prior: Sequence[Arrival] = (),
    samples: int = BAND_SAMPLES,
    only: Sequence[str] | None = None,
    record: TrackRecord | None = None,
) -> dict[str, Band]:
    """P50 and P90 completion of every unfinished job of ``core`` (or ``only`` these),
    with the jobs expected to arrive later drawn from the arrivals it has seen (and
    ``prior``, arrivals seen before it)."""
    waste = waste_factor(core)
    model = ArrivalModel(arrival_history(core), prior)
    return completion_bands(
        supply_view(core),
        job_loads(core, waste),
        now,
        model,
        core.index.requirements,
        waste,
        samples,
        seed=len(core.by_idx),
        only=only,
        record=record,
    )
