"""Hand-made audit rows for the `venn report` tests: lifecycle events of five jobs, turned
into rows by the recorder's own write helpers, with the figures they must give."""

from __future__ import annotations

from typing import Any

from tests import factories
from venn.audit.models import JobAudit, RoundAudit
from venn.audit.writes import job_rows_from_events, round_row
from venn.core.model import Requirement
from venn.events import Event, JobCancelled, JobFinished, JobRegistered, RoundClosed

GENERAL = Requirement.of({"memory": 10, "cpu": 1, "os": 6}).as_dict()  # paper tier 1
HIGH = Requirement.of({"memory": 1000, "cpu": 7, "os": 6}).as_dict()  # paper tier 4
CUSTOM = {"ram": 4.0}


def _registered(job: str, requirement: dict[str, float], rounds: int) -> JobRegistered:
    return factories.registered(
        job, requirement=requirement, demand=8, rounds=rounds, event_id=f"{job}-reg", time=0.0
    )


def _finished(job: str, rounds: int, jct: float) -> JobFinished:
    return factories.finished(
        job,
        rounds,
        arrival=100.0,
        finished_at=100.0 + jct,
        jct_s=jct,
        event_id=f"{job}-done",
        time=jct,
    )


def _closed(
    job: str, index: int, delay: float, response: float, failed: bool = False, reason: str = ""
) -> RoundClosed:
    return RoundClosed(
        event_id=f"{job}-r{index}", time=1.0, job_id=job, round_index=index,
        outcome="failed" if failed else "succeeded", demand=8, assigned=8,
        results=3 if failed else 8, opened_at=10.0 * index,
        closed_at=10.0 * index + delay + response, reason=reason,
        sched_delay_s=delay, response_time_s=response,
    )  # fmt: skip


def job_events() -> list[Event]:
    """job-a (tier 1) finishes after a failed attempt, job-b (tier 4) finishes, job-c
    (a requirement of no paper tier) is cancelled, job-d (tier 1) is still running;
    job-x has a closed round but no job row."""
    return [
        _registered("job-a", GENERAL, 2),
        _finished("job-a", 2, 50.0),
        _registered("job-b", HIGH, 2),
        _finished("job-b", 2, 30.0),
        _registered("job-c", CUSTOM, 3),
        JobCancelled(event_id="job-c-cancel", time=80.0, job_id="job-c", reason="owner"),
        _registered("job-d", GENERAL, 4),
    ]


def round_events() -> list[RoundClosed]:
    return [
        _closed("job-a", 0, 2.0, 8.0),
        _closed("job-a", 1, 4.0, 30.0, True, "deadline: 3/8 results"),
        _closed("job-a", 2, 1.0, 9.0),
        _closed("job-b", 0, 10.0, 5.0),
        _closed("job-b", 1, 6.0, 4.0),
        _closed("job-c", 0, 3.0, 20.0, True, "deadline: 0/8 results"),
        _closed("job-c", 1, 7.0, 1.0, True, "devices lost: 5 of 8"),
        _closed("job-d", 0, 5.0, 2.0, True),  # failed with no reason given
        _closed("job-x", 0, 1.0, 1.0),
    ]


def job_rows() -> list[dict[str, Any]]:
    return job_rows_from_events(job_events())


def round_rows() -> list[dict[str, Any]]:
    return [round_row(e) for e in round_events()]


def audit_objects() -> tuple[list[JobAudit], list[RoundAudit]]:
    """The rows as (unsaved) ORM values, as `venn.report.load_audit` returns them."""
    return [JobAudit(**r) for r in job_rows()], [RoundAudit(**r) for r in round_rows()]


# What the rows above must give.
EXPECTED_FAILED_BY_REASON = {"deadline": 2, "devices lost": 1, "unspecified": 1}
EXPECTED_MEAN_JCT = 40.0
EXPECTED_ATTEMPTS = {"job-a": 3, "job-b": 2, "job-c": 2, "job-d": 1, "job-x": 1}
EXPECTED_FAILED = {"job-a": 1, "job-b": 0, "job-c": 2, "job-d": 1, "job-x": 0}
EXPECTED_STATUS = {
    "job-a": "finished",
    "job-b": "finished",
    "job-c": "cancelled",
    "job-d": "unfinished",
    "job-x": "unrecorded",
}
EXPECTED_TIERS = {
    "job-a": "tier 1 (general)",
    "job-b": "tier 4 (high-performance)",
    "job-c": "ram>=4",
    "job-d": "tier 1 (general)",
    "job-x": "unknown",
}
