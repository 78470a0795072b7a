"""Typed, versioned snapshots of a job's core state, and their restoration into a scheduler.

A snapshot is the durable part of ``JobState``: the spec, round bookkeeping and the
devices holding an assignment of the open round. Soft state (the supply window, the
plan, the dispatch table) is not captured: it is rebuilt from the check-ins that follow.
The core writes and reads them (``snapshot_job``, ``restore_job``, ``sync_job``); a table
stores ``msgspec.to_builtins`` of one and gives it back to ``decode_snapshot``.
"""

from __future__ import annotations

from collections import deque
from typing import Annotated, Any

import msgspec

from venn import fields
from venn.core.model import DEFAULT_TENANT, JobSpec, Requirement
from venn.core.round_cursor import RoundCursor
from venn.core.scheduler import Scheduler
from venn.core.state import JobState

SNAPSHOT_VERSION = 1
HISTORY = 10
"""Recent round delays and response times a job keeps."""


class SpecSnapshot(msgspec.Struct, kw_only=True, frozen=True):
    """Bounded as the events it comes from (`venn.fields`): a stored row is input too, and
    one out of range (demand 2^63) failed every later check-in batch (issue 26)."""

    job_id: fields.Id
    requirement: fields.Attrs
    demand: fields.Demand
    rounds: fields.Rounds
    deadline: fields.PosDuration
    arrival: fields.Timestamp
    workload_s: fields.Duration
    success_ratio: fields.Ratio
    tier: fields.SignedIndex
    template: fields.SignedIndex
    tenant: fields.Id = DEFAULT_TENANT
    priority: fields.Priority = 0


class JobSnapshot(msgspec.Struct, kw_only=True, frozen=True):
    """A job as its owner last stored it."""

    version: int = SNAPSHOT_VERSION
    spec: SpecSnapshot
    registered_at: fields.Timestamp
    rounds_done: fields.RoundCount
    attempts: fields.RoundCount
    round_index: fields.SignedIndex
    round_open: bool
    demand: fields.Count
    remaining: fields.Count
    requested_at: fields.Timestamp
    filled_at: fields.Timestamp | None
    tier: fields.SignedIndex | None
    assigned: fields.Count
    service: fields.Total
    devices: Annotated[list[fields.Id], msgspec.Meta(max_length=fields.DEMAND_MAX)]
    """The devices holding an assignment of the open round (the owner's; a replica's
    check-in partitions keep their own)."""
    sched_delays: Annotated[list[fields.Delay], msgspec.Meta(max_length=HISTORY)]
    response_times: Annotated[list[fields.Duration], msgspec.Meta(max_length=HISTORY)]
    rounds: RoundCursor | None = None
    """The job's round cursor; None in a row stored before it was kept (its cursor is then
    that of rounds requested and closed in order up to ``round_index``)."""


def decode_snapshot(raw: Any) -> JobSnapshot:
    """A stored snapshot (plain JSON types) back as a ``JobSnapshot``; ValueError if it is
    not one of this version."""
    try:
        snap = msgspec.convert(raw, JobSnapshot)
    except msgspec.ValidationError as exc:
        raise ValueError(f"not a job snapshot: {exc}") from None
    if snap.version != SNAPSHOT_VERSION:
        raise ValueError(f"a job snapshot of version {snap.version}")
    return snap


def snapshot_spec(spec: JobSpec) -> SpecSnapshot:
    return SpecSnapshot(
        job_id=spec.job_id,
        requirement=spec.requirement.as_dict(),
        demand=spec.demand,
        rounds=spec.rounds,
        deadline=spec.deadline,
        arrival=spec.arrival,
        workload_s=spec.workload_s,
        success_ratio=spec.success_ratio,
        tier=spec.tier,
        template=spec.template,
        tenant=spec.tenant,
        priority=spec.priority,
    )


def restore_spec(data: SpecSnapshot) -> JobSpec:
    return JobSpec(
        job_id=data.job_id,
        requirement=Requirement.of(data.requirement),
        demand=data.demand,
        rounds=data.rounds,
        deadline=data.deadline,
        arrival=data.arrival,
        workload_s=data.workload_s,
        success_ratio=data.success_ratio,
        tier=data.tier,
        template=data.template,
        tenant=data.tenant,
        priority=data.priority,
    )


def snapshot_job(state: JobState) -> JobSnapshot:
    """The durable state of one job."""
    return JobSnapshot(
        spec=snapshot_spec(state.spec),
        registered_at=state.registered_at,
        rounds_done=state.rounds_done,
        attempts=state.attempts,
        round_index=state.round_index,
        round_open=state.round_open,
        demand=state.demand,
        remaining=state.remaining,
        requested_at=state.requested_at,
        filled_at=state.filled_at,
        tier=state.tier,
        assigned=state.assigned,
        service=state.service,
        devices=sorted(str(d) for d in state.devices),
        sched_delays=list(state.sched_delays),
        response_times=list(state.response_times),
        rounds=state.rounds.copy(),
    )


def snapshot_of(scheduler: Scheduler, job_id: str) -> JobSnapshot | None:
    """The durable state of a job live in ``scheduler`` (None if it is not)."""
    js = scheduler.jobs.get(job_id)
    return snapshot_job(js) if js is not None else None


def restore_job(scheduler: Scheduler, data: JobSnapshot, now: float) -> bool:
    """Re-add a job from its snapshot, reopening its round with the remaining demand and
    marking the devices of that round active again. False if the job is already known.

    ``now`` is unused by the bookkeeping (the snapshot carries its own times) but keeps
    the signature of every other core event.
    """
    del now
    spec = restore_spec(data.spec)
    if not scheduler.add_job(spec, data.registered_at):
        return False
    js = scheduler.jobs[spec.job_id]
    _write_round(js, data)
    if js.round_open:
        for device in data.devices:
            js.devices.add(device)
            scheduler.active_devices[device] = (spec.job_id, js.round_index)
    # The core files its open jobs incrementally: tell it this one was written.
    scheduler.touch(spec.job_id)
    return True


def _write_round(js: JobState, data: JobSnapshot) -> None:
    js.rounds_done = data.rounds_done
    js.attempts = data.attempts
    js.round_index = data.round_index
    js.round_open = data.round_open
    js.rounds = (
        data.rounds.copy()
        if data.rounds is not None
        else RoundCursor.at(data.round_index, data.round_open)
    )
    js.demand = data.demand
    js.remaining = data.remaining
    js.requested_at = data.requested_at
    js.filled_at = data.filled_at
    js.tier = data.tier
    js.assigned = data.assigned
    js.service = data.service
    js.sched_delays = deque(data.sched_delays, maxlen=HISTORY)
    js.response_times = deque(data.response_times, maxlen=HISTORY)


def sync_job(scheduler: Scheduler, data: JobSnapshot, now: float) -> None:
    """Bring a replica's job to its owner's latest snapshot (a worker deciding check-ins
    for jobs another worker owns). While the snapshot shows the round the replica has
    open, the replica keeps its own count of the round's remaining demand, lowered to
    the snapshot's where that is lower: each counts assignments the other has not seen
    (the replica its own worker's, the owner those read back from every worker), so the
    lower is the closer. The owner writes one when a round fills, so that no replica
    ranks a filled round first until it closes. A new round, or its end, is taken whole.
    Devices are not copied: the check-in partitions keep them."""
    job_id = data.spec.job_id
    js = scheduler.jobs.get(job_id)
    if js is None:
        restore_job(scheduler, msgspec.structs.replace(data, devices=[]), now)
        return
    if (data.round_index, data.round_open, data.attempts) == (
        js.round_index,
        js.round_open,
        js.attempts,
    ):
        if js.round_open and data.remaining < js.remaining:
            js.remaining = max(0, data.remaining)
            if js.remaining == 0 and js.filled_at is None:
                js.filled_at = now if data.filled_at is None else data.filled_at
            scheduler.touch(job_id)
        return
    if js.round_open:
        scheduler.close_round(job_id, js.round_index, now, False)
    _write_round(js, data)
    scheduler.touch(job_id)
