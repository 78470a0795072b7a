"""The end-to-end invariants (docs/architecture.md, "Invariants"), checked on what the
topics carried and what the audit database holds. Each function returns the violations
(empty: it holds)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from itertools import pairwise
from typing import Any

from sqlalchemy import select

from devtools.stack.demo import DemoResult
from venn.audit.db import make_engine
from venn.audit.models import RoundAudit
from venn.broker import topics
from venn.core.model import Requirement
from venn.events import (
    Assignment,
    DeviceCheckin,
    DeviceResult,
    Event,
    JobExpired,
    JobRegistered,
    RoundClosed,
)

Captured = Mapping[str, list[Event]]


def of(captured: Captured, topic: str, kind: type) -> list[Any]:
    return [e for e in captured.get(topic, []) if isinstance(e, kind)]


def assignments(captured: Captured) -> list[Assignment]:
    """Every assignment once (an output replayed after a crash carries the same id)."""
    unique: dict[str, Assignment] = {}
    for a in of(captured, topics.ASSIGNMENTS, Assignment):
        unique.setdefault(a.event_id, a)
    return list(unique.values())


def ineligible(captured: Captured) -> list[Assignment]:
    requirement = {
        e.job_id: Requirement.of(e.requirement) for e in of(captured, topics.JOBS, JobRegistered)
    }
    attrs = {e.device_id: e.attrs for e in of(captured, topics.CHECKINS, DeviceCheckin)}
    return [
        a for a in assignments(captured) if not requirement[a.job_id].admits(attrs[a.device_id])
    ]


def overlapping(captured: Captured) -> list[tuple[str, str, str]]:
    """Devices given a second assignment before their first ended (result or round close)."""
    result_at = {
        (r.job_id, r.round_index, r.device_id): r.time
        for r in of(captured, topics.RESULTS, DeviceResult)
    }
    closed_at = {
        (c.job_id, c.round_index): c.time for c in of(captured, topics.ROUNDS, RoundClosed)
    }
    by_device: dict[str, list[Assignment]] = defaultdict(list)
    for a in assignments(captured):
        by_device[a.device_id].append(a)
    found = []
    for device, items in by_device.items():
        items.sort(key=lambda a: a.time)
        for prev, nxt in pairwise(items):
            ends = [
                t
                for t in (
                    result_at.get((prev.job_id, prev.round_index, device)),
                    closed_at.get((prev.job_id, prev.round_index)),
                )
                if t is not None
            ]
            if not ends or nxt.time < min(ends):
                found.append((device, prev.job_id, nxt.job_id))
    return found


def over_demand(captured: Captured) -> dict[tuple[str, int], int]:
    """Rounds with more assigned devices than their demand: {(job, round): devices}."""
    demand = {e.job_id: e.demand for e in of(captured, topics.JOBS, JobRegistered)}
    per_round = Counter((a.job_id, a.round_index) for a in assignments(captured))
    return {k: n for k, n in per_round.items() if n > demand[k[0]]}


def after_expiry(captured: Captured) -> list[Assignment]:
    """Assignments the scheduler made to a job after it had decided the job's expiry (both
    stamped by the decider's clock): the expiry takes effect before the next decision."""
    expired: dict[str, float] = {}
    for e in of(captured, topics.JOBS, JobExpired):
        expired[e.job_id] = min(e.time, expired.get(e.job_id, e.time))
    return [a for a in assignments(captured) if a.time > expired.get(a.job_id, a.time)]


def closes(captured: Captured, jobs: Iterable[str]) -> Counter[tuple[str, int]]:
    mine = set(jobs)
    return Counter(
        (c.job_id, c.round_index)
        for c in of(captured, topics.ROUNDS, RoundClosed)
        if c.job_id in mine
    )


def audit_mismatch(
    captured: Captured, database_url: str, jobs: Iterable[str]
) -> dict[tuple[str, int], tuple[int, int]]:
    """Closed rounds whose audit rows are not exactly one, and rows of no close:
    {(job, round): (closes on the topic, rows)}. Closes are counted once per attempt."""
    mine = set(jobs)
    closed = {key: 1 for key in closes(captured, mine)}
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(RoundAudit.job_id, RoundAudit.round_index)).all()
    finally:
        engine.dispose()
    audited = Counter((r.job_id, r.round_index) for r in rows if r.job_id in mine)
    keys = set(closed) | set(audited)
    return {
        k: (closed.get(k, 0), audited.get(k, 0))
        for k in keys
        if closed.get(k, 0) != 1 or audited.get(k, 0) != 1
    }


def assert_all_hold(result: DemoResult) -> None:
    """Every invariant on a finished demo: assignments made, each to an eligible device
    free of another assignment, no round over its demand, none to a job after its expiry,
    each attempt closed once and audited once."""
    events = result.events
    assert assignments(events)
    assert ineligible(events) == []
    assert overlapping(events) == []
    assert over_demand(events) == {}
    assert after_expiry(events) == []
    assert result.extra_assignments == 0
    mine = {j.job_id for j in result.jobs}
    counted = closes(events, mine)
    assert counted and max(counted.values()) == 1
    assert audit_mismatch(events, result.database_url, mine) == {}
