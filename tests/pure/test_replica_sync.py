"""A worker's replica of a job it does not own (``venn.core.snapshot.sync_job``): it keeps
its own count of the open round, lowered to the owner's when that is lower, and takes a
new round whole."""

from __future__ import annotations

from typing import Any

from services.scheduler.leases import LeasedCheckins, LeaseOwner, Replica
from services.scheduler.outputs import assignment, assignment_batch
from services.scheduler.state import SchedulerState
from venn import events as ev
from venn.checkin_columns import CheckinColumns
from venn.core import make_scheduler
from venn.core.lease import LeaseRule
from venn.core.model import JobSpec, Requirement
from venn.core.scheduler import Scheduler
from venn.core.snapshot import snapshot_job, sync_job
from venn.settings import SchedulerSettings

NOW = 100.0


def owner_and_replica() -> tuple[Scheduler, Scheduler]:
    owner = make_scheduler("venn")
    owner.add_job(JobSpec("a", Requirement.of({}), 10, 3, 60.0), NOW)
    owner.add_job(JobSpec("b", Requirement.of({}), 12, 3, 60.0), NOW)
    owner.request_round("a", 0, NOW, 10)
    owner.request_round("b", 0, NOW, 12)
    replica = make_scheduler("venn", track_devices=False)
    replica.ranked = True
    for js in owner.jobs.values():
        sync_job(replica, snapshot_job(js), NOW)
    return owner, replica


def head(core: Scheduler) -> str:
    slot = core.slot_of({})
    table = core.table(NOW)
    row = table.rows()[int(core.index.signature_of_slot[slot]) * core.num_tiers]
    return core.by_idx[row[0]].spec.job_id


def test_a_round_filled_elsewhere_stops_being_ranked_first() -> None:
    owner, replica = owner_and_replica()
    assert head(replica) == "a"  # the smaller job goes first
    replica.assign_many(replica.jobs["a"].idx, 2, NOW)  # this worker's own assignments
    for d in range(10):  # the owner reads back every worker's: the round is full
        assert owner.adopt("a", 0, f"d{d}", NOW)
    sync_job(replica, snapshot_job(owner.jobs["a"]), NOW)
    assert replica.jobs["a"].remaining == 0
    assert head(replica) == "b"


def test_the_replica_keeps_its_own_count_when_it_is_the_lower() -> None:
    owner, replica = owner_and_replica()
    replica.assign_many(replica.jobs["a"].idx, 6, NOW)
    assert owner.adopt("a", 0, "d0", NOW)
    sync_job(replica, snapshot_job(owner.jobs["a"]), NOW)
    assert replica.jobs["a"].remaining == 4


def test_a_new_round_is_taken_whole() -> None:
    owner, replica = owner_and_replica()
    replica.assign_many(replica.jobs["a"].idx, 10, NOW)
    owner.close_round("a", 0, NOW, True)
    owner.request_round("a", 1, NOW, 10)
    sync_job(replica, snapshot_job(owner.jobs["a"]), NOW)
    assert (replica.jobs["a"].round_index, replica.jobs["a"].remaining) == (1, 10)


def leased_owner(
    config: SchedulerSettings, rule: LeaseRule, jobs: dict[str, Any], table: dict[str, Any]
) -> SchedulerState:
    """A leased worker's owner side on plain dicts."""
    state = SchedulerState(config, jobs, {})
    state.lease_owner = LeaseOwner(rule, table)
    state.ensure_loaded(NOW)
    return state


def open_round(state: SchedulerState, job_id: str, demand: int) -> list[ev.Event]:
    """Register the job and open its first round; returns the grants."""
    registered = ev.JobRegistered(
        event_id=f"reg-{job_id}", time=NOW, job_id=job_id, requirement={}, demand=demand,
        rounds=2, deadline_s=60.0, workload_s=1.0,
    )  # fmt: skip
    state.on_job_event(registered, 0, NOW)
    requested = ev.RoundRequested(
        event_id=f"rr-{job_id}", time=NOW, job_id=job_id, round_index=0, demand=demand
    )
    return state.on_job_event(requested, 0, NOW) or []


def test_the_owner_writes_its_job_row_when_the_round_fills() -> None:
    """The leased mode's owner (``SchedulerState`` with a ``LeaseOwner``) stores the
    job's snapshot once its round is full, so that the replicas learn it."""
    jobs: dict[str, Any] = {}
    config = SchedulerSettings(mode="leased")
    state = leased_owner(config, LeaseRule(2), jobs, {})
    open_round(state, "a", 3)

    def batch(devices: list[str]) -> ev.AssignmentBatch:
        items = [assignment(f"c-{d}", d, "a", 0, "http://t", 1.0, 1.0, NOW) for d in devices]
        return assignment_batch(f"b-{devices[0]}", "a", items, NOW)

    state.on_assignment(batch(["d0", "d1"]), 0, NOW)
    assert jobs["a"]["core"]["remaining"] == 3  # the row of the round's start
    state.on_assignment(batch(["d2"]), 0, NOW)
    assert jobs["a"]["core"]["remaining"] == 0


def test_a_worker_decides_nothing_until_its_replica_has_read_every_job() -> None:
    config = SchedulerSettings(mode="leased")
    rule = LeaseRule(1)
    replica = Replica(config)
    table: dict[str, Any] = {}
    leased = LeasedCheckins(config, rule, replica, table)
    owner_state = leased_owner(config, rule, {}, table)
    for grant in open_round(owner_state, "a", 4):
        assert isinstance(grant, ev.LeaseMessage)
        leased.on_event(grant, 0, NOW)
    replica.apply(owner_state.jobs["a"], NOW)

    def batch(name: str) -> CheckinColumns:
        checkins = [
            ev.DeviceCheckin(event_id=f"{name}-{d}", time=NOW, device_id=f"{name}-{d}",
                             attrs={}, speed_ms_per_sample=50.0, bandwidth_kbps=9e3)
            for d in range(2)
        ]  # fmt: skip
        return CheckinColumns.of(
            ev.CheckinBatch(event_id=name, time=NOW, checkins=checkins, reply_to="gw")
        )

    early = leased.on_checkins(batch("early"), 0, NOW)
    assert not any(isinstance(o, ev.AssignmentBatch) for o in early)
    (declined,) = [o for o in early if isinstance(o, ev.CheckinsDeclined)]
    assert sorted(declined.checkin_ids) == ["early-0", "early-1"]
    replica.caught_up.set()
    later = leased.on_checkins(batch("later"), 0, NOW)
    (assigned,) = [o for o in later if isinstance(o, ev.AssignmentBatch)]
    assert len(assigned.assignments) == 2
