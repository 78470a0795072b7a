"""The scheduler worker's state machine on plain dicts (the Faust tables' stand-ins):
what its tables hold is enough to rebuild the same core after a crash."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from services.scheduler.readback import READBACK_MAX_S, ReadBack
from services.scheduler.state import SchedulerState
from services.scheduler.store import MemoryStore
from tests import factories
from venn import events as ev
from venn.broker.stream import Refused
from venn.settings import SchedulerSettings

NOW = 1000.0
ATTRS = {"ram": 8.0}


def state(jobs: dict[str, Any], rounds: dict[str, Any]) -> SchedulerState:
    s = SchedulerState(SchedulerSettings(policy="fifo"), MemoryStore(jobs, rounds))
    s.ensure_loaded(NOW)
    return s


def checkin(device: str) -> ev.DeviceCheckin:
    return factories.checkin(device, ATTRS, event_id=f"c-{device}", time=NOW)


def result(device: str, ok: bool = True) -> ev.DeviceResult:
    return factories.result(
        "j", 0, device, ok=ok, response_time_s=7.0, event_id=f"r-{device}", time=NOW
    )


def test_tables_rebuild_demand_busy_devices_and_results() -> None:
    jobs: dict[str, Any] = {}
    rounds: dict[str, Any] = {}
    s = state(jobs, rounds)
    s.on_job_event(
        ev.JobRegistered(
            event_id="reg",
            time=NOW,
            job_id="j",
            requirement={"ram": 4.0},
            demand=5,
            rounds=2,
            deadline_s=60,
            workload_s=5,
        ),
        0,
        NOW,
    )
    s.on_job_event(
        ev.RoundRequested(event_id="rr", time=NOW, job_id="j", round_index=0, demand=5), 0, NOW
    )
    batch = ev.CheckinBatch(event_id="b1", time=NOW, checkins=[checkin(f"d{i}") for i in range(4)])
    (out,) = s.on_checkin_batch(batch, NOW)
    assert isinstance(out, ev.AssignmentBatch) and len(out.assignments) == 4
    assert s.on_assignment(out, 0, NOW) == 0
    assert s.on_assignment(out, 0, NOW) == 0  # a replayed read-back writes nothing new
    assert len(rounds) == 1, "one row per read-back batch, not per assignment"
    s.on_result(result("d0"), 0, NOW)
    s.on_result(result("d1", ok=False), 0, NOW)
    assert len(rounds) == 3

    rebuilt = state(jobs, rounds)  # a new worker on the same tables
    js = rebuilt.core.jobs["j"]
    assert (js.remaining, js.assigned) == (1, 4)
    assert set(rebuilt.core.active_devices) == {"d2", "d3"}
    # Released devices may check in again; busy ones may not; demand left is one.
    again = ev.CheckinBatch(
        event_id="b2", time=NOW, checkins=[checkin(d) for d in ("d2", "d0", "d1")], reply_to="g"
    )
    assigned, declined = rebuilt.on_checkin_batch(again, NOW)
    assert isinstance(assigned, ev.AssignmentBatch) and isinstance(declined, ev.CheckinsDeclined)
    assert [a.device_id for a in assigned.assignments] == ["d0"]
    assert set(declined.checkin_ids) == {"c-d2", "c-d1"}
    # The round's good results survive the rebuild, and its rows go when it closes.
    ledger = rebuilt.ledgers["j"]
    good = ledger.results["d0"]
    assert good is not None and good.response_time_s == 7.0
    assert ledger.results["d1"] is None
    rebuilt.on_assignment(assigned, 0, NOW)
    rebuilt.on_round_event(
        ev.RoundClosed(
            event_id="close",
            time=NOW,
            job_id="j",
            round_index=0,
            outcome="succeeded",
            demand=5,
            assigned=5,
            results=1,
            opened_at=NOW,
            closed_at=NOW + 10,
            reason="",
            sched_delay_s=1.0,
            response_time_s=7.0,
        ),
        0,
        NOW + 10,
    )
    assert rounds == {}
    assert jobs["j"]["core"]["rounds_done"] == 1


def registered(job: str, submit_token: str | None = None, deadline: float = 60) -> ev.JobRegistered:
    return factories.registered(
        job, requirement={"ram": 4.0}, demand=5, deadline_s=deadline,
        event_id=f"reg-{job}-{submit_token}", time=NOW, submit_token=submit_token,
    )  # fmt: skip


def config(**changes: Any) -> SchedulerSettings:
    return SchedulerSettings(policy="fifo", **changes)


def test_a_silent_job_is_reported_once_and_its_expiry_removes_it() -> None:
    s = SchedulerState(config(job_timeout_s=100.0), MemoryStore())
    s.ensure_loaded(NOW)
    s.on_job_event(registered("j"), 0, NOW)
    s.on_job_event(
        ev.RoundRequested(event_id="rr", time=NOW, job_id="j", round_index=0, demand=5), 0, NOW
    )
    assert s.silent_jobs(NOW + 50) == []
    s.on_job_event(ev.JobHeartbeat(event_id="hb", time=NOW + 80, job_id="j"), 0, NOW + 80)
    assert s.silent_jobs(NOW + 150) == []
    assert s.silent_jobs(NOW + 200) == [("j", NOW + 80)]
    assert s.silent_jobs(NOW + 300) == []  # reported once; the expiry event follows
    assert s.on_checkin(checkin("d0"), NOW) is not None  # the round still takes devices
    expired = ev.JobExpired(
        event_id="x", time=NOW + 200, job_id="j", last_seen=NOW + 80, reason="silent"
    )
    s.on_job_event(expired, 0, NOW + 200)
    assert "j" not in s.core.jobs and "j" in s.removed and s.core.active_devices == {}
    assert s.on_checkin(checkin("d1"), NOW + 200) is None  # its demand is released
    late = ev.RoundRequested(event_id="rr1", time=NOW, job_id="j", round_index=1, demand=5)
    s.on_job_event(late, 0, NOW + 210)  # nothing reopens an expired job
    assert "j" not in s.core.jobs


def test_a_retried_submission_is_a_no_op_and_a_second_one_is_refused() -> None:
    s = SchedulerState(config(), MemoryStore())
    s.ensure_loaded(NOW)
    s.on_job_event(registered("j", "submit-1"), 0, NOW)
    s.on_job_event(registered("j", "submit-1"), 0, NOW)  # the client's retry
    with pytest.raises(Refused, match="already registered"):
        s.on_job_event(registered("j", "submit-2"), 0, NOW)
    assert list(s.core.jobs) == ["j"]


def test_a_device_holding_an_assignment_past_its_deadline_is_released() -> None:
    s = SchedulerState(config(), MemoryStore())
    s.ensure_loaded(NOW)
    s.on_job_event(registered("j", deadline=60), 0, NOW)
    s.on_job_event(
        ev.RoundRequested(event_id="rr", time=NOW, job_id="j", round_index=0, demand=5), 0, NOW
    )
    assert s.on_checkin(checkin("d"), NOW) is not None
    again = msgspec.structs.replace(checkin("d"), event_id="c-d-2", time=NOW + 30)
    assert s.on_checkin(again, NOW + 30) is None  # still working on its task
    later = msgspec.structs.replace(checkin("d"), event_id="c-d-3", time=NOW + 61)
    assert s.on_checkin(later, NOW + 61) is not None  # it vanished with the task: released
    assert s.overdue_released == 1


def test_round_rows_keep_their_stored_shape_and_a_bad_one_is_skipped() -> None:
    jobs: dict[str, Any] = {}
    rounds: dict[str, Any] = {}
    s = state(jobs, rounds)
    registered = ev.JobRegistered(
        event_id="reg", time=NOW, job_id="j", requirement={"ram": 4.0}, demand=5, rounds=2,
        deadline_s=60, workload_s=5,
    )  # fmt: skip
    s.on_job_event(registered, 0, NOW)
    requested = ev.RoundRequested(event_id="rr", time=NOW, job_id="j", round_index=0, demand=5)
    s.on_job_event(requested, 0, NOW)
    batch = ev.CheckinBatch(event_id="b1", time=NOW, checkins=[checkin("d0")])
    for out in s.on_checkin_batch(batch, NOW):
        if isinstance(out, ev.AssignmentBatch):
            s.on_assignment(out, 0, NOW)
    (row,) = [v for k, v in rounds.items() if k.startswith("a:")]
    assert [item[1:] for item in row["items"]] == [["d0", 0, True]]  # [id, device, tier, active]
    rounds["a:bad"] = {"partition": 0, "job": "j", "round": 0, "items": [["x", "d9"]]}
    rebuilt = state(jobs, rounds)
    assert rebuilt.core.active_devices == {"d0": ("j", 0)}


@pytest.mark.parametrize("held", [True, False])
def test_a_takeover_reads_the_predecessors_assignments_back_before_deciding(held: bool) -> None:
    """The predecessor assigned 4 of 5 and died before reading them back (CI: a round over
    its demand in test_ledger_chaos). Its successor decides only once they are read back;
    without the hold (held=False, the defect) it fills the round again."""
    jobs: dict[str, Any] = {}
    rounds: dict[str, Any] = {}
    first = state(jobs, rounds)
    first.on_job_event(registered("j"), 0, NOW)
    first.on_job_event(
        ev.RoundRequested(event_id="rr", time=NOW, job_id="j", round_index=0, demand=5), 0, NOW
    )
    old = ev.CheckinBatch(event_id="b1", time=NOW, checkins=[checkin(f"d{i}") for i in range(4)])
    (published,) = first.on_checkin_batch(old, NOW)  # on venn.assignments, then SIGKILL
    assert isinstance(published, ev.AssignmentBatch)

    read_to: dict[int, int] = {0: 10}  # venn.assignments partition 0: 10 read, 11 its end
    readback = ReadBack(read_to.get, clock=lambda: NOW)
    successor = SchedulerState(
        SchedulerSettings(policy="fifo"), MemoryStore(jobs, rounds), readback
    )
    successor.ensure_loaded(NOW)
    if held:
        readback.expect(readback.arm(), {0: 11, 1: 0})
    new = ev.CheckinBatch(
        event_id="b2", time=NOW, checkins=[checkin(f"e{i}") for i in range(3)], reply_to="g"
    )
    out = successor.on_checkin_batch(new, NOW)
    if held:
        assert [type(o) for o in out] == [ev.CheckinsDeclined]
    successor.on_assignment(published, 0, NOW)
    read_to[0] = 11
    assert readback.may_decide()
    out += successor.on_checkin_batch(
        msgspec.structs.replace(new, event_id="b3", checkins=[checkin(f"f{i}") for i in range(3)]),
        NOW,
    )
    given = [a for o in out if isinstance(o, ev.AssignmentBatch) for a in o.assignments]
    total = len(published.assignments) + len(given)
    assert (total <= 5) == held, f"{total} devices for a demand of 5"


def test_a_readback_that_does_not_move_holds_decisions_only_for_a_while() -> None:
    now = [NOW]
    readback = ReadBack(lambda partition: None, clock=lambda: now[0])
    assert readback.may_decide()  # nothing to wait for before a takeover
    generation = readback.arm()
    assert not readback.may_decide()  # end offsets not known yet
    readback.expect(generation - 1, {})  # a stale takeover's answer changes nothing
    assert not readback.may_decide()
    now[0] += READBACK_MAX_S + 1
    assert readback.may_decide() and readback.gave_up == 1


def test_a_job_cancelled_before_its_registration_is_never_run() -> None:
    """The job API cancels a job it still queued: the scheduler never saw it (the cancel was
    dead-lettered as an unknown job); now its tombstone keeps out a registration that
    crossed the cancel, across a rebuild too."""
    jobs: dict[str, Any] = {}
    s = state(jobs, {})
    cancel = ev.JobCancelled(event_id="cancel:j", time=NOW, job_id="j", reason="queued")
    s.on_job_event(cancel, 0, NOW)  # old code raised Refused (unknown job)
    s.on_job_event(registered("j"), 0, NOW)
    assert "j" not in s.core.jobs
    assert jobs["j"]["removed"] is True
    rebuilt = state(jobs, {})
    rebuilt.on_job_event(registered("j"), 0, NOW)
    assert "j" not in rebuilt.core.jobs and "j" in rebuilt.removed


def test_direct_checkins_reach_the_rate_and_the_mix_together_without_a_later_checkin() -> None:
    # A burst straight to Kafka after 38 s of silence: the first check-in is reported at
    # once (1 over the 38 s), the rest at the next status snapshot, not at a later check-in.
    s = SchedulerState(SchedulerSettings(policy="fifo"), MemoryStore({}, {}))
    s.ensure_loaded(NOW - 38)
    s.on_checkin(checkin("first"), NOW)
    assert s.core.supply.rate_per_s() == pytest.approx(1 / 38)
    assert sum(n for _, n in s.mix.counts()) == 1
    rest = [factories.checkin(f"d{i}", ATTRS, event_id=f"c-d{i}", time=NOW) for i in range(29)]
    s.on_checkin_batch(ev.CheckinBatch(event_id="burst", time=NOW, checkins=rest), NOW + 0.1)
    assert sum(n for _, n in s.mix.counts()) == 1  # counted, not reported yet
    s.report_direct(NOW + 0.5)  # within DIRECT_REPORT_S of the last report: waits
    assert sum(n for _, n in s.mix.counts()) == 1
    s.report_direct(NOW + 2.0)
    assert s.core.supply.rate_per_s() == pytest.approx(29 / 2.0)
    assert s.mix.counts() == [(ATTRS, 30)]
    s.report_direct(NOW + 10.0)  # nothing new: the latest report stands
    assert s.core.supply.rate_per_s() == pytest.approx(29 / 2.0)
