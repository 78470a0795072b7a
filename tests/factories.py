"""Events for tests: each factory fills what a test does not care about (a fresh event id,
the current time, an ordinary device or job) and takes any field as a keyword."""

from __future__ import annotations

import time as clock
import uuid
from typing import Any, Literal

from venn import events as ev

ATTRS = {"cpu_f": 9.0, "ram": 8.0, "fp16_mem": 8.0, "android_os": 12.0}
"""A device every requirement of the demo workload admits."""

UNJUDGED: dict[str, Any] = {"min_checkins": 2**62}
"""Admission settings (`Settings.with_admission`) that never judge a requirement against the
supply: for tests of something else whose jobs name attributes no device has, on a broker
whose scheduler has seen other tests' check-ins (tests/broker/test_admission.py judges)."""


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def _now(at: float | None) -> float:
    return clock.time() if at is None else at


def checkin(
    device_id: str,
    attrs: dict[str, float] | None = None,
    *,
    event_id: str | None = None,
    time: float | None = None,
    speed_ms_per_sample: float = 60.0,
    bandwidth_kbps: float = 12000.0,
    **fields: Any,
) -> ev.DeviceCheckin:
    return ev.DeviceCheckin(
        event_id=event_id or _id("ci"),
        time=_now(time),
        device_id=device_id,
        attrs=ATTRS if attrs is None else attrs,
        speed_ms_per_sample=speed_ms_per_sample,
        bandwidth_kbps=bandwidth_kbps,
        **fields,
    )


def registered(
    job_id: str,
    *,
    requirement: dict[str, float] | None = None,
    demand: int = 2,
    rounds: int = 2,
    deadline_s: float = 60.0,
    workload_s: float = 5.0,
    event_id: str | None = None,
    time: float | None = None,
    **fields: Any,
) -> ev.JobRegistered:
    return ev.JobRegistered(
        event_id=event_id or _id("reg"),
        time=_now(time),
        job_id=job_id,
        requirement={} if requirement is None else requirement,
        demand=demand,
        rounds=rounds,
        deadline_s=deadline_s,
        workload_s=workload_s,
        **fields,
    )


def requested(
    job_id: str,
    round_index: int = 0,
    demand: int = 2,
    *,
    event_id: str | None = None,
    time: float | None = None,
    **fields: Any,
) -> ev.RoundRequested:
    return ev.RoundRequested(
        event_id=event_id or _id("rr"),
        time=_now(time),
        job_id=job_id,
        round_index=round_index,
        demand=demand,
        **fields,
    )


def result(
    job_id: str,
    round_index: int,
    device_id: str,
    *,
    ok: bool = True,
    response_time_s: float = 1.0,
    event_id: str | None = None,
    time: float | None = None,
    **fields: Any,
) -> ev.DeviceResult:
    return ev.DeviceResult(
        event_id=event_id or _id("res"),
        time=_now(time),
        job_id=job_id,
        round_index=round_index,
        device_id=device_id,
        ok=ok,
        response_time_s=response_time_s,
        **fields,
    )


def closed(
    job_id: str,
    round_index: int,
    outcome: Literal["succeeded", "failed"] = "succeeded",
    *,
    demand: int = 2,
    assigned: int | None = None,
    results: int | None = None,
    opened_at: float = 1.0,
    closed_at: float = 11.0,
    reason: str = "",
    sched_delay_s: float = 1.0,
    response_time_s: float = 5.0,
    event_id: str | None = None,
    time: float | None = None,
    **fields: Any,
) -> ev.RoundClosed:
    """A round attempt's close; by default every device of its demand was assigned and,
    if it succeeded, answered."""
    return ev.RoundClosed(
        event_id=event_id or _id("rc"),
        time=closed_at if time is None else time,
        job_id=job_id,
        round_index=round_index,
        outcome=outcome,
        demand=demand,
        assigned=demand if assigned is None else assigned,
        results=(demand if outcome == "succeeded" else 0) if results is None else results,
        opened_at=opened_at,
        closed_at=closed_at,
        reason=reason,
        sched_delay_s=sched_delay_s,
        response_time_s=response_time_s,
        **fields,
    )


def finished(
    job_id: str,
    rounds_completed: int = 2,
    *,
    arrival: float = 1.0,
    finished_at: float = 13.0,
    jct_s: float | None = None,
    event_id: str | None = None,
    time: float | None = None,
    **fields: Any,
) -> ev.JobFinished:
    return ev.JobFinished(
        event_id=event_id or _id("done"),
        time=finished_at if time is None else time,
        job_id=job_id,
        rounds_completed=rounds_completed,
        arrival=arrival,
        finished_at=finished_at,
        jct_s=finished_at - arrival if jct_s is None else jct_s,
        **fields,
    )
