"""Admission on the job API (`venn.core.admission` over the gateway's views): the load of
the admitted jobs from the lifecycle fold, the supply and the estimate from the scheduler's
latest snapshot on venn.status; and which queued jobs are due for admission.

Every gateway with the jobs principal looks at the queue every VENN_ADMISSION_QUEUE_CHECK_S
and admits what is due with event ids made from the queued decision, so two gateways that
admit the same job publish the same events (the fold, the scheduler and the recorder each
take them once).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from services.gateway.demand import DemandView
from venn import events as ev
from venn.auth.checks import tenant_of
from venn.core.admission import (
    Decision,
    Limits,
    Load,
    Request,
    SupplySeen,
    decide,
    limit_problem,
    next_admissions,
    supply_problem,
    supply_seen,
)
from venn.core.estimate import Band
from venn.core.lifecycle import JobLife
from venn.core.model import DEFAULT_TENANT, JobSpec, Requirement
from venn.core.status import SchedulerStatus
from venn.jobspec import JobSubmission
from venn.settings import TenantSettings

STATUS_FRESH_S = 15.0
"""An older snapshot judges no supply and makes no estimate."""


@cache  # a pure function of a bounded int, asked once per queued job per queue check
def _needed(demand: int) -> int:
    return JobSpec("x", Requirement(), demand, 1, 1.0).results_needed


def tenant_cap(settings: TenantSettings, tenant: str) -> int:
    """The most open demand ``tenant``'s jobs may ask together (0: no cap)."""
    config = settings.config()
    return config.share_of(tenant).max_open_demand if config is not None else 0


def request_of(
    spec: JobSubmission,
    job_id: str,
    finish_by: float | None,
    queue: bool,
    accept_late: bool,
    tenant: str = DEFAULT_TENANT,
    cap: int = 0,
) -> Request:
    return Request(
        job_id,
        Requirement.of(spec.requirement),
        spec.demand,
        _needed(spec.demand),
        spec.rounds,
        spec.deadline_s,
        spec.workload_s,
        finish_by if finish_by is not None else spec.finish_by,
        queue,
        accept_late,
        tenant,
        cap,
    )


def queued_request(event: ev.JobAdmission, cap_of: Callable[[str], int]) -> Request | None:
    """The submission a queued decision holds (None: it holds none); its tenant is the
    owner who queued it, capped by ``cap_of``."""
    if event.requirement is None or event.demand is None or event.rounds is None:
        return None
    if event.deadline_s is None:
        return None
    return Request(
        event.job_id,
        Requirement.of(event.requirement),
        event.demand,
        _needed(event.demand),
        event.rounds,
        event.deadline_s,
        event.workload_s or 0.0,
        queue=True,
        tenant=event.owner or DEFAULT_TENANT,
        tenant_cap=cap_of(event.owner or DEFAULT_TENANT),
    )


def load_of(view: DemandView) -> Load:
    """The admitted jobs that have not ended, and their demands per round."""
    by_tenant: dict[str, int] = {}
    for life in view.unended.values():
        reg = life.registered
        if reg is not None:
            tenant = tenant_of(reg)
            by_tenant[tenant] = by_tenant.get(tenant, 0) + reg.demand
    return Load(len(view.unended), sum(by_tenant.values()), by_tenant)


def fresh(status: SchedulerStatus | None, now: float) -> SchedulerStatus | None:
    return status if status is not None and now - status.time <= STATUS_FRESH_S else None


def to_estimate(
    req: Request, view: DemandView, status: SchedulerStatus | None, limits: Limits, now: float
) -> SchedulerStatus | None:
    """The snapshot ``req``'s completion must be estimated on for its decision (None: its
    decision needs no estimate: no ``finish_by``, no fresh snapshot, or refused or queued
    before any). The estimate is made off the event loop (`services.gateway.estimates`)."""
    status = fresh(status, now)
    if status is None or req.finish_by is None:
        return None
    seen = supply_seen(status, req.requirement)
    if supply_problem(req, seen, limits) or limit_problem(req, load_of(view), limits):
        return None
    return status


def judge(
    req: Request,
    view: DemandView,
    status: SchedulerStatus | None,
    limits: Limits,
    now: float,
    estimate: Band | None = None,
) -> Decision:
    """The decision on a new submission, with its completion ``estimate`` (made on the
    snapshot `to_estimate` named, when it named one; None: it cannot finish)."""
    status = fresh(status, now)
    seen = supply_seen(status, req.requirement)
    return decide(req, load_of(view), seen, limits, None if status is None else (lambda: estimate))


def due(
    view: DemandView,
    status: SchedulerStatus | None,
    limits: Limits,
    now: float,
    cap_of: Callable[[str], int] = lambda tenant: 0,
) -> list[tuple[JobLife, Request]]:
    """The queued jobs to admit now, in the order they were queued."""
    status = fresh(status, now)
    waiting = list(view.waiting.values())
    waiting.sort(key=lambda life: (life.queued.time if life.queued else 0.0, life.job_id))
    pairs = [
        (life, queued_request(life.queued, cap_of)) for life in waiting if life.queued is not None
    ]
    requests = {r.job_id: life for life, r in pairs if r is not None}
    # The supply a requirement has seen, counted once per pass: the queued jobs share a
    # few requirements, and counting the snapshot's supply mix for each of a full queue's
    # jobs held the event loop about 20 ms of CPU every queue check (issue 34, the flood).
    seen: dict[Requirement, SupplySeen] = {}

    def seen_of(requirement: Requirement) -> SupplySeen:
        got = seen.get(requirement)
        if got is None:
            got = seen[requirement] = supply_seen(status, requirement)
        return got

    chosen = next_admissions([r for _, r in pairs if r is not None], load_of(view), seen_of, limits)
    return [(requests[r.job_id], r) for r in chosen]
