"""Job snapshots survive JSON and restore the round's remaining demand and active devices
(pure: no broker; lives here with the scheduler tests it backs)."""

from __future__ import annotations

import json

import msgspec
import pytest

from venn.core import JobSpec, Requirement, make_scheduler
from venn.core.snapshot import decode_snapshot, restore_job, snapshot_job


def test_snapshot_round_trip_keeps_remaining_and_active_devices() -> None:
    before = make_scheduler("venn", seed=1)
    spec = JobSpec("j", Requirement.of({"cpu": 2}), demand=4, rounds=3, deadline=60.0)
    before.add_job(spec, 0.0)
    before.request_round("j", 0, 1.0, 4)
    slot = before.slot_of({"cpu_f": 3})
    for i in range(3):
        assert before.checkin(slot, 2.0 + i, device_id=f"d{i}") is not None
    before.release_device("d0")
    stored = json.loads(json.dumps(msgspec.to_builtins(snapshot_job(before.jobs["j"]))))
    data = decode_snapshot(stored)

    after = make_scheduler("venn", seed=1)
    assert restore_job(after, data, 10.0)
    assert not restore_job(after, data, 10.0)  # already known
    js = after.jobs["j"]
    assert (js.round_index, js.round_open, js.remaining, js.assigned) == (0, True, 1, 3)
    assert js.spec == spec
    assert set(after.active_devices) == {"d1", "d2"}
    slot = after.slot_of({"cpu_f": 3})
    assert after.checkin(slot, 11.0, device_id="d1") is None  # still active
    assert after.checkin(slot, 12.0, device_id="d9") is not None
    assert after.checkin(slot, 13.0, device_id="d8") is None  # demand filled


def test_adopt_counts_an_assignment_once_and_never_past_demand() -> None:
    sched = make_scheduler("fifo")
    sched.add_job(JobSpec("j", Requirement.of({}), demand=2, rounds=1, deadline=60.0), 0.0)
    sched.request_round("j", 0, 0.0, 2)
    assert sched.adopt("j", 0, "a", 1.0)
    assert not sched.adopt("j", 0, "a", 1.0)
    assert not sched.adopt("j", 1, "b", 1.0)  # not the open round
    assert sched.adopt("j", 0, "b", 1.0)
    assert not sched.adopt("j", 0, "c", 1.0)  # demand filled
    assert sched.jobs["j"].remaining == 0
    assert sched.checkin(sched.slot_of({}), 2.0, device_id="d") is None


def test_a_stored_snapshot_must_be_one_of_this_version() -> None:
    sched = make_scheduler("fifo")
    sched.add_job(JobSpec("j", Requirement.of({}), demand=2, rounds=1, deadline=60.0), 0.0)
    stored = msgspec.to_builtins(snapshot_job(sched.jobs["j"]))
    assert decode_snapshot(stored).spec.job_id == "j"
    bad_rows: list[object] = [{**stored, "version": 2}, {**stored, "remaining": "3"}, {}, [1]]
    for bad in bad_rows:
        with pytest.raises(ValueError):
            decode_snapshot(bad)
