"""A table compiled before any device was seen must not hide the first signature.

One worker at 12 partitions declined every check-in (docs/notes/scaling.md, "Found while
measuring"): the status publisher compiled the table on its timer after the job opened
its round and before any device had checked in, when the eligibility index held no
signature. That table had one row all the same, so signature 0 of the first check-in
looked planned (``sig >= rows`` is how the core tells a signature first seen since the
last compile) and every check-in was decided against the empty table until some other
plan event.
"""

from __future__ import annotations

import numpy as np
import pytest

from services.scheduler.state import SchedulerState
from services.scheduler.status import publish_status
from services.scheduler.store import MemoryStore
from venn import events as ev
from venn.core import POLICIES, make_scheduler
from venn.core.model import JobSpec, Requirement
from venn.core.scheduler import Scheduler
from venn.core.status import decode_status
from venn.settings import SchedulerSettings

NOW = 1000.0


def opened(policy: str) -> Scheduler:
    core = make_scheduler(policy)
    core.add_job(JobSpec("j", Requirement.of({"probe": 1.0}), 1000, 1, 60.0), NOW)
    core.request_round("j", 0, NOW)
    core.table(NOW)  # compiled with no signature known (the status timer)
    return core


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_first_checkin_after_an_empty_compile_is_assigned(policy: str) -> None:
    core = opened(policy)
    slot = core.slot_of({"probe": 1.0})
    a = core.checkin(slot, NOW + 1, device_id="d0")
    assert a is not None and a.job_id == "j"


@pytest.mark.parametrize("policy", ["venn", "fifo", "random"])
def test_first_batch_after_an_empty_compile_is_assigned(policy: str) -> None:
    core = opened(policy)
    slot = core.slot_of({"probe": 1.0})
    picks = core.checkin_batch(
        np.full(3, slot),
        NOW + 1,
        np.zeros(3, dtype=np.int64),
        draws=lambda: np.full(3, 0.5),
        device_ids=["d0", "d1", "d2"],
    )
    assert picks.tolist() == [0, 0, 0]


def test_status_timer_before_the_first_checkin() -> None:
    """The event order of the failing stack, on the worker's state machine."""
    s = SchedulerState(SchedulerSettings(), MemoryStore())  # the default policy
    s.ensure_loaded(NOW)
    s.on_job_event(
        ev.JobRegistered(
            event_id="reg",
            time=NOW,
            job_id="probe",
            requirement={"probe": 1.0},
            demand=1000,
            rounds=1,
            deadline_s=60,
            workload_s=5,
        ),
        NOW,
    )
    s.on_job_event(
        ev.RoundRequested(event_id="rr", time=NOW, job_id="probe", round_index=0, demand=1000),
        NOW,
    )
    sent: list[bytes] = []
    assert publish_status(s, lambda topic, key, value: sent.append(value), NOW + 0.5)
    out = [
        s.on_checkin(
            ev.DeviceCheckin(
                event_id=f"c{i}",
                time=NOW + 1 + i,
                device_id=f"probe-{i}",
                attrs={"probe": 1.0},
                speed_ms_per_sample=60.0,
                bandwidth_kbps=12000.0,
            ),
            NOW + 1 + i,
        )
        for i in range(3)
    ]
    assert all(a is not None and a.job_id == "probe" for a in out)
    publish_status(s, lambda topic, key, value: sent.append(value), NOW + 5)
    status = decode_status(sent[-1])
    assert [d.feeds for d in status.device_groups] == [[0]]
    job = status.job("probe")
    assert job is not None and job.served and job.remaining == 997
