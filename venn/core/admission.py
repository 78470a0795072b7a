"""Admission of a submitted job: operator limits, the supply its requirement meets, and
whether its completion estimate meets the ``finish_by`` its owner gave.

A decision is one of
- ``admitted``: the job is registered now (perhaps with a warning: its estimate misses
  ``finish_by`` and the owner accepted that);
- ``queued``: something stands in its way that may pass (a limit, too little supply seen)
  and the owner asked to wait: it is admitted in submission order as that passes;
- ``refused``: as ``queued`` without the owner's ``queue``, or an estimate that misses
  ``finish_by`` when the owner did not accept a late finish.

Supply is judged only once the scheduler's window holds ``min_checkins`` check-ins (right
after a start too little has been seen to refuse anything for lack of supply). A
requirement fails it when no check-in of the window meets it, or when the eligible
check-in rate cannot bring a round's needed results within its deadline.

Pure: the caller brings the scheduler's latest snapshot and the running jobs' load.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from venn.core.arrivals import Arrival, ArrivalModel
from venn.core.eligibility import EligibilityIndex
from venn.core.estimate import Band, JobLoad, SupplyView, completion_bands
from venn.core.model import DEFAULT_TENANT, Requirement
from venn.core.status import SchedulerStatus

Verdict = Literal["admitted", "queued", "refused"]
Reason = Literal[
    "admitted",
    "no_eligible_supply",
    "too_little_supply",
    "running_jobs_limit",
    "open_demand_limit",
    "tenant_demand_limit",
    "finish_by_missed",
]


@dataclass(frozen=True)
class Limits:
    """The operator's limits (0: none) and the supply needed to judge a requirement."""

    max_running_jobs: int = 0
    max_open_demand: int = 0
    min_checkins: int = 200


@dataclass(frozen=True)
class Request:
    """A submission as admission sees it."""

    job_id: str
    requirement: Requirement
    demand: int
    needed: int
    """Results that make a round succeed."""
    rounds: int
    deadline_s: float
    workload_s: float
    finish_by: float | None = None
    queue: bool = False
    accept_late: bool = False
    tenant: str = DEFAULT_TENANT
    tenant_cap: int = 0
    """The most open demand its tenant's jobs may ask together (0: no cap)."""


@dataclass(frozen=True)
class Load:
    """What the admitted, unended jobs hold."""

    running: int
    open_demand: int
    """The sum of their demands per round."""
    by_tenant: Mapping[str, int] = field(default_factory=dict)
    """The same sum per tenant."""


@dataclass(frozen=True)
class SupplySeen:
    """The scheduler window's check-ins that meet a requirement."""

    eligible: int
    total: int
    rate_per_s: float
    """Check-ins per second of the whole window."""

    @property
    def eligible_rate_per_s(self) -> float:
        return self.rate_per_s * self.eligible / self.total if self.total else 0.0


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: Reason
    detail: str
    estimate: float | None = None
    """Estimated completion (the caller's clock, the band's P50) when one was made; None:
    none made, or the job cannot finish at the current supply."""
    warning: str | None = None
    estimate_p90: float | None = None
    """The same estimate's P90 (None: none made, or not at the current supply)."""
    counts: dict[str, float] = field(default_factory=dict)


def supply_seen(status: SchedulerStatus | None, requirement: Requirement) -> SupplySeen:
    """The check-ins of ``status``'s window from devices meeting ``requirement``. The mix
    is of projected attributes (each floored to a threshold some job uses), so against a
    threshold no job used before the count is a lower bound."""
    if status is None:
        return SupplySeen(0, 0, 0.0)
    total = sum(s.checkins for s in status.supply_mix)
    eligible = sum(s.checkins for s in status.supply_mix if requirement.admits(s.attrs))
    return SupplySeen(eligible, total, status.checkin_rate_per_s)


def supply_problem(req: Request, seen: SupplySeen, limits: Limits) -> Decision | None:
    """Why the supply seen cannot serve ``req`` (None: it can, or too little was seen to
    judge)."""
    if seen.total < limits.min_checkins:
        return None
    counts = {
        "eligible_checkins": seen.eligible,
        "window_checkins": seen.total,
        "eligible_rate_per_s": round(seen.eligible_rate_per_s, 4),
        "demand": req.demand,
        "needed": req.needed,
        "deadline_s": req.deadline_s,
    }
    if seen.eligible == 0:
        detail = (
            f"no device of the last {seen.total} check-ins meets {req.requirement} "
            f"(0 of {seen.total})"
        )
        return Decision("refused", "no_eligible_supply", detail, counts=counts)
    reachable = seen.eligible_rate_per_s * req.deadline_s
    if reachable < req.needed:
        detail = (
            f"{seen.eligible} of the last {seen.total} check-ins meet {req.requirement}: "
            f"{seen.eligible_rate_per_s:.3g}/s, about {reachable:.0f} devices within a "
            f"round's {req.deadline_s:g} s deadline, and a round needs {req.needed} results"
        )
        return Decision("refused", "too_little_supply", detail, counts=counts)
    return None


def limit_problem(req: Request, load: Load, limits: Limits) -> Decision | None:
    """Which operator limit admitting ``req`` now would pass (None: none)."""
    counts: dict[str, float] = {"running_jobs": load.running, "open_demand": load.open_demand}
    if limits.max_running_jobs and load.running + 1 > limits.max_running_jobs:
        detail = f"{load.running} jobs running, the limit is {limits.max_running_jobs}"
        return Decision("refused", "running_jobs_limit", detail, counts=counts)
    if limits.max_open_demand and load.open_demand + req.demand > limits.max_open_demand:
        detail = (
            f"the running jobs ask {load.open_demand} devices per round, with this job's "
            f"{req.demand} that passes the limit of {limits.max_open_demand}"
        )
        return Decision("refused", "open_demand_limit", detail, counts=counts)
    held = load.by_tenant.get(req.tenant, 0)
    if req.tenant_cap and held + req.demand > req.tenant_cap:
        counts["tenant_open_demand"] = held
        detail = (
            f"tenant {req.tenant}'s running jobs ask {held} devices per round, with this "
            f"job's {req.demand} that passes its cap of {req.tenant_cap}"
        )
        return Decision("refused", "tenant_demand_limit", detail, counts=counts)
    return None


def decide(
    req: Request,
    load: Load,
    seen: SupplySeen,
    limits: Limits,
    estimate: Callable[[], Band | None] | None,
) -> Decision:
    """Admit, queue or refuse ``req``. ``estimate`` gives its completion band with it
    admitted now (None: it cannot finish at the current supply); it is called only if the
    owner gave ``finish_by``, which its P50 must meet. Without one (no snapshot of the
    scheduler yet) ``finish_by`` is not judged: the job is admitted with a warning."""
    problem = supply_problem(req, seen, limits) or limit_problem(req, load, limits)
    if problem is not None:
        if req.queue:
            return Decision("queued", problem.reason, problem.detail, counts=problem.counts)
        return problem
    if req.finish_by is None:
        return Decision("admitted", "admitted", "admitted")
    if estimate is None:
        warning = "finish_by not judged: no estimate yet (no snapshot from the scheduler)"
        return Decision("admitted", "admitted", "admitted", warning=warning)
    band = estimate()
    end = band.p50 if band is not None else None
    late = band.p90 if band is not None and math.isfinite(band.p90) else None
    if end is not None and end <= req.finish_by:
        detail = f"estimated to finish at {end:.0f}"
        return Decision("admitted", "admitted", detail, end, estimate_p90=late)
    said = "cannot finish at the current supply" if end is None else f"estimated at {end:.0f}"
    detail = f"finish_by {req.finish_by:.0f} missed: {said}"
    if req.accept_late:
        return Decision(
            "admitted", "admitted", "admitted late", end, warning=detail, estimate_p90=late
        )
    return Decision("refused", "finish_by_missed", detail, end, estimate_p90=late)


def next_admissions(
    queued: Sequence[Request],
    load: Load,
    seen_of: Callable[[Requirement], SupplySeen],
    limits: Limits,
) -> list[Request]:
    """The queued jobs (in submission order) to admit now. A job whose supply is still
    too little is passed over (it holds nothing); the first one a limit stops ends the
    pass, so that a later, smaller job does not overtake it for ever."""
    out = []
    running, demand = load.running, load.open_demand
    by_tenant = dict(load.by_tenant)
    for req in queued:
        if supply_problem(req, seen_of(req.requirement), limits) is not None:
            continue
        if limit_problem(req, Load(running, demand, by_tenant), limits) is not None:
            break
        out.append(req)
        running, demand = running + 1, demand + req.demand
        by_tenant[req.tenant] = by_tenant.get(req.tenant, 0) + req.demand
    return out


def estimate_submission(status: SchedulerStatus | None, req: Request) -> Band | None:
    """``req``'s completion band if admitted at the snapshot's time, with the jobs the
    snapshot holds and scenarios of the jobs expected after it, drawn from the arrivals
    the snapshot lists (the model of ``venn.core.estimate`` on the snapshot's supply mix);
    None: its P50 is not at that supply, or there is no snapshot."""
    if status is None:
        return None
    index = EligibilityIndex()
    groups = {g.group: index.group(Requirement.of(g.requirement)) for g in status.job_groups}
    mine = index.group(req.requirement)
    slots = [index.slot(("mix", i), s.attrs) for i, s in enumerate(status.supply_mix)]
    sig_of_slot = index.signature_of_slot
    counts = np.zeros(index.num_signatures)
    for slot, s in zip(slots, status.supply_mix, strict=True):
        counts[sig_of_slot[slot]] += s.checkins
    supply = SupplyView(index.signature_matrix, counts, status.checkin_rate_per_s)
    known = [j.latency_s for j in status.jobs if j.latency_s > 0]
    jobs = [
        JobLoad(j.job_id, groups[j.group], j.work, j.demand, j.needed, j.deadline_s, j.latency_s)
        for j in status.jobs
        if j.group in groups and j.demand > 0
    ]
    latency = float(np.median(known)) if known else req.workload_s
    new = JobLoad(
        req.job_id,
        mine,
        float(req.rounds * req.demand) * status.waste,
        req.demand,
        req.needed,
        req.deadline_s,
        latency,
    )
    requirements = index.requirements
    seen = [
        Arrival(a.time, requirements[groups[a.group]], a.demand, a.rounds, a.needed, a.deadline_s)
        for a in status.arrivals
        if a.group in groups
    ]
    band = completion_bands(
        supply,
        [*jobs, new],
        status.time,
        ArrivalModel(seen),
        requirements,
        status.waste,
        only=[req.job_id],
    )[req.job_id]
    return band if math.isfinite(band.p50) else None
