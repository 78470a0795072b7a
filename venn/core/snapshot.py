"""JSON-able snapshots of a job's core state, and their restoration into a scheduler.

A snapshot is the durable part of ``JobState``: the spec, round bookkeeping and the
devices holding an assignment of the open round. Soft state (the supply window, the
plan, the dispatch table) is not captured: it is rebuilt from the check-ins that follow.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from venn.core.model import JobSpec, Requirement
from venn.core.scheduler import Scheduler
from venn.core.state import JobState

Snapshot = dict[str, Any]


def snapshot_spec(spec: JobSpec) -> Snapshot:
    return {
        "job_id": spec.job_id,
        "requirement": spec.requirement.as_dict(),
        "demand": spec.demand,
        "rounds": spec.rounds,
        "deadline": spec.deadline,
        "arrival": spec.arrival,
        "workload_s": spec.workload_s,
        "success_ratio": spec.success_ratio,
        "tier": spec.tier,
        "template": spec.template,
    }


def restore_spec(data: Snapshot) -> JobSpec:
    return JobSpec(
        job_id=str(data["job_id"]),
        requirement=Requirement.of(data["requirement"]),
        demand=int(data["demand"]),
        rounds=int(data["rounds"]),
        deadline=float(data["deadline"]),
        arrival=float(data["arrival"]),
        workload_s=float(data["workload_s"]),
        success_ratio=float(data["success_ratio"]),
        tier=int(data["tier"]),
        template=int(data["template"]),
    )


def snapshot_job(state: JobState) -> Snapshot:
    """The durable state of one job as plain JSON types."""
    return {
        "spec": snapshot_spec(state.spec),
        "registered_at": state.registered_at,
        "rounds_done": state.rounds_done,
        "attempts": state.attempts,
        "round_index": state.round_index,
        "round_open": state.round_open,
        "demand": state.demand,
        "remaining": state.remaining,
        "requested_at": state.requested_at,
        "filled_at": state.filled_at,
        "tier": state.tier,
        "assigned": state.assigned,
        "service": state.service,
        "devices": sorted(state.devices, key=str),
        "sched_delays": list(state.sched_delays),
        "response_times": list(state.response_times),
    }


def restore_job(scheduler: Scheduler, data: Snapshot, now: float) -> bool:
    """Re-add a job from its snapshot, reopening its round with the remaining demand and
    marking the devices of that round active again. False if the job is already known.

    ``now`` is unused by the bookkeeping (the snapshot carries its own times) but keeps
    the signature of every other core event.
    """
    del now
    spec = restore_spec(data["spec"])
    if not scheduler.add_job(spec, float(data["registered_at"])):
        return False
    js = scheduler.jobs[spec.job_id]
    _write_round(js, data)
    if js.round_open:
        for device in data["devices"]:
            js.devices.add(device)
            scheduler.active_devices[device] = (spec.job_id, js.round_index)
    # The core files its open jobs incrementally: tell it this one was written.
    scheduler.touch(spec.job_id)
    return True


def _write_round(js: JobState, data: Snapshot) -> None:
    js.rounds_done = int(data["rounds_done"])
    js.attempts = int(data["attempts"])
    js.round_index = int(data["round_index"])
    js.round_open = bool(data["round_open"])
    js.demand = int(data["demand"])
    js.remaining = int(data["remaining"])
    js.requested_at = float(data["requested_at"])
    filled = data["filled_at"]
    js.filled_at = None if filled is None else float(filled)
    tier = data["tier"]
    js.tier = None if tier is None else int(tier)
    js.assigned = int(data["assigned"])
    js.service = int(data["service"])
    js.sched_delays = deque((float(x) for x in data["sched_delays"]), maxlen=10)
    js.response_times = deque((float(x) for x in data["response_times"]), maxlen=10)


def sync_job(scheduler: Scheduler, data: Snapshot, now: float) -> None:
    """Bring a replica's job to its owner's latest snapshot (a worker deciding check-ins
    for jobs another worker owns). While the snapshot shows the round the replica has
    open, the replica keeps its own count of the round's remaining demand, lowered to
    the snapshot's where that is lower: each counts assignments the other has not seen
    (the replica its own worker's, the owner those read back from every worker), so the
    lower is the closer. The owner writes one when a round fills, so that no replica
    ranks a filled round first until it closes. A new round, or its end, is taken whole.
    Devices are not copied: the check-in partitions keep them."""
    job_id = str(data["spec"]["job_id"])
    js = scheduler.jobs.get(job_id)
    if js is None:
        restore_job(scheduler, {**data, "devices": []}, now)
        return
    same = (int(data["round_index"]), bool(data["round_open"]), int(data["attempts"]))
    if same == (js.round_index, js.round_open, js.attempts):
        remaining = int(data["remaining"])
        if js.round_open and remaining < js.remaining:
            js.remaining = max(0, remaining)
            if js.remaining == 0 and js.filled_at is None:
                filled = data["filled_at"]
                js.filled_at = now if filled is None else float(filled)
            scheduler.touch(job_id)
        return
    if js.round_open:
        scheduler.close_round(job_id, js.round_index, now, False)
    _write_round(js, data)
    scheduler.touch(job_id)
