"""What the job API and the dashboard say about jobs: plain functions from the gateway's
views to JSON-ready dicts.

Two sources, both read from Kafka, never from a worker's memory:
- the core's lifecycle fold over venn.jobs and venn.rounds (`venn.core.lifecycle`, held by
  the gateway's `DemandView`, which also counts the assignments seen per open round);
- the scheduler's latest snapshot on venn.status (`venn.core.status.SchedulerStatus`): the
  plan and the supply, hence why an open round waits.

Pure: no I/O; ``now`` is given.
"""

from __future__ import annotations

from typing import Any

from services.gateway.demand import DemandView
from venn.core.lifecycle import JobLife
from venn.core.status import SchedulerStatus, wait_reason

Json = dict[str, Any]

STATUS_STALE_S = 15.0
"""A snapshot older than this says nothing about why a job waits now."""


def _sum(values: list[float]) -> float:
    return round(sum(values), 3)


def _waiting(
    life: JobLife, remaining: int, status: SchedulerStatus | None, now: float
) -> str | None:
    """Why the job is not progressing now (None: it is, or it ended)."""
    if life.ended or life.registered is None:
        return None
    attempt = life.open_attempt
    if attempt is None:
        # Registered, no round open: the job's coordinator asks for the next round.
        return "waiting_for_coordinator"
    if remaining <= 0:
        return None  # demand met: its devices are computing
    if status is None or now - status.time > STATUS_STALE_S:
        return "unknown"
    placement = status.job(life.job_id)
    if placement is None or not placement.round_open:
        return "unknown"  # the snapshot was taken before this round opened
    return wait_reason(status, life.job_id)


def job_summary(
    view: DemandView, life: JobLife, status: SchedulerStatus | None, now: float
) -> Json:
    """One job as `GET /v1/jobs` lists it and `GET /v1/jobs/{id}` shows it."""
    reg = life.registered
    closes = life.closes
    attempt = life.open_attempt
    remaining = view.remaining(life)
    open_round: Json | None = None
    open_wait = 0.0
    if attempt is not None:
        assigned = view.assigned(life)
        requested = attempt.requested_at or now
        open_wait = max(0.0, now - requested) if assigned < attempt.demand else 0.0
        open_round = {
            "index": attempt.index,
            "demand": attempt.demand,
            "assigned": assigned,
            "requested_at": attempt.requested_at,
            "open_for_s": round(max(0.0, now - requested), 3),
        }
    rounds_total = reg.rounds if reg is not None else None
    ended = life.finished or life.cancelled or life.expired
    asked = reg or life.queued
    return {
        "job_id": life.job_id,
        "state": life.status,
        "requirement": dict(asked.requirement or {}) if asked is not None else None,
        "demand": asked.demand if asked is not None else None,
        "deadline_s": asked.deadline_s if asked is not None else None,
        "round": life.rounds_done + (1 if attempt is not None else 0),
        "rounds": rounds_total,
        "rounds_done": life.rounds_done,
        "rounds_failed": sum(c.outcome == "failed" for c in closes),
        "open_round": open_round,
        "sched_delay_s": _sum([c.sched_delay_s for c in closes]) + round(open_wait, 3),
        "response_time_s": _sum([c.response_time_s for c in closes]),
        "waiting": _waiting(life, remaining, status, now),
        "registered_at": reg.time if reg is not None else None,
        "last_seen": life.last_seen or None,
        "ended_at": ended.time if ended is not None else None,
        "jct_s": life.finished.jct_s if life.finished is not None else None,
        **_estimate(life, status, now),
        "admission": _admission(life),
    }


def _estimate(life: JobLife, status: SchedulerStatus | None, now: float) -> Json:
    """When the scheduler's completion estimate says the job finishes (`venn.core.estimate`):
    its P50 and P90 over scenarios of the jobs expected to arrive later, and
    ``estimate_state``: "estimated", "never" (not at the current supply) or None (no
    fresh snapshot holds the job, or it ended)."""
    none: Json = {
        "estimated_finish": None,
        "estimated_remaining_s": None,
        "estimated_finish_p90": None,
        "estimated_remaining_p90_s": None,
        "estimate_state": None,
    }
    if life.ended or status is None or now - status.time > STATUS_STALE_S:
        return none
    placement = status.job(life.job_id)
    if placement is None:
        return none
    end = placement.estimated_finish
    if end is None:
        return {**none, "estimate_state": "never"}
    late = placement.estimated_finish_p90
    return {
        "estimated_finish": end,
        "estimated_remaining_s": round(max(0.0, end - now), 1),
        "estimated_finish_p90": late,
        "estimated_remaining_p90_s": round(max(0.0, late - now), 1) if late is not None else None,
        "estimate_state": "estimated",
    }


def _admission(life: JobLife) -> Json | None:
    a = life.admission
    if a is None:
        return None
    return {"decision": a.decision, "reason": a.reason, "estimate": a.estimate, "time": a.time}


def job_list(
    view: DemandView, status: SchedulerStatus | None, now: float, max_ended: int | None = None
) -> list[Json]:
    """Every job registered and not ended, every queued one and the newest ended or refused
    (`DemandView.listed`; at most ``max_ended`` of those), newest first."""
    lives = [
        life
        for life in view.listed(max_ended)
        if life.registered is not None or life.admission is not None
    ]

    def since(life: JobLife) -> float:
        first = life.registered or life.queued or life.admission
        return first.time if first is not None else 0.0

    lives.sort(key=since, reverse=True)
    return [job_summary(view, life, status, now) for life in lives]


def plan_of(status: SchedulerStatus | None, now: float) -> Json:
    """`GET /v1/plan`: which device groups feed which job group."""
    if status is None:
        return {"available": False, "job_groups": [], "device_groups": []}
    return {
        "available": True,
        "age_s": round(max(0.0, now - status.time), 3),
        "policy": status.policy,
        "job_groups": [
            {
                "group": g.group,
                "requirement": g.requirement,
                "open_jobs": g.open_jobs,
                "fed_by": g.fed_by,
            }
            for g in status.job_groups
        ],
        "device_groups": [
            {"device_group": d.signature, "eligible_for": d.eligible_groups, "feeds": d.feeds}
            for d in status.device_groups
        ],
    }


def supply_of(status: SchedulerStatus | None, now: float) -> Json:
    """`GET /v1/devices`: devices seen and check-in rate per eligibility group."""
    if status is None:
        return {"available": False, "device_groups": [], "job_groups": []}
    return {
        "available": True,
        "age_s": round(max(0.0, now - status.time), 3),
        "window": status.window,
        "admission_window": sum(s.checkins for s in status.supply_mix),
        "checkin_rate_per_s": status.checkin_rate_per_s,
        "busy_devices": status.busy_devices,
        "device_groups": [
            {
                "device_group": d.signature,
                "eligible_for": d.eligible_groups,
                "checkins_in_window": d.checkins_in_window,
                "checkin_rate_per_s": d.checkin_rate_per_s,
            }
            for d in status.device_groups
        ],
        "job_groups": [
            {
                "group": g.group,
                "requirement": g.requirement,
                "eligible_rate_per_s": g.eligible_rate_per_s,
            }
            for g in status.job_groups
        ],
    }
