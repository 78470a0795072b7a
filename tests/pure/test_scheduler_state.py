"""The scheduler worker's state machine on a memory store (the Faust tables' stand-in):
what its tables hold is enough to rebuild the same core after a crash, and every effect of
a decision is in the tables when the decision is returned."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from services.scheduler.expiry import expire_silent_jobs
from services.scheduler.rows import decode_job_row, key_bytes
from services.scheduler.state import SchedulerState
from services.scheduler.store import MemoryStore
from tests import factories
from venn import events as ev
from venn.broker.stream import Refused
from venn.settings import SchedulerSettings

NOW = 1000.0
ATTRS = {"ram": 8.0}
Table = dict[bytes, Any]


def state(jobs: Table, rounds: Table, **changes: Any) -> SchedulerState:
    s = SchedulerState(SchedulerSettings(policy="fifo", **changes), MemoryStore(jobs, rounds))
    s.ensure_loaded(NOW)
    return s


def job_row(jobs: Table, job_id: str) -> Any:
    return decode_job_row(jobs[key_bytes(job_id)])


def checkin(device: str) -> ev.DeviceCheckin:
    return factories.checkin(device, ATTRS, event_id=f"c-{device}", time=NOW)


def result(device: str, ok: bool = True) -> ev.DeviceResult:
    return factories.result(
        "j", 0, device, ok=ok, response_time_s=7.0, event_id=f"r-{device}", time=NOW
    )


def round_requested(index: int = 0, demand: int = 5) -> ev.RoundRequested:
    return ev.RoundRequested(
        event_id=f"rr{index}", time=NOW, job_id="j", round_index=index, demand=demand
    )


def test_tables_rebuild_demand_busy_devices_and_results() -> None:
    jobs: Table = {}
    rounds: Table = {}
    s = state(jobs, rounds)
    s.on_job_event(registered("j"), NOW)
    s.on_job_event(round_requested(), NOW)
    batch = ev.CheckinBatch(event_id="b1", time=NOW, checkins=[checkin(f"d{i}") for i in range(4)])
    (out,) = s.on_checkin_batch(batch, NOW)
    assert isinstance(out, ev.AssignmentBatch) and len(out.assignments) == 4
    assert len(rounds) == 1, "the decision's row is written with it: one per batch"
    s.on_result(result("d0"), NOW)
    s.on_result(result("d1", ok=False), NOW)
    assert len(rounds) == 3

    rebuilt = state(jobs, rounds)  # a new worker on the same tables
    view = rebuilt.core.round_view("j")
    assert view is not None and view.round_open
    assert rebuilt.core.jobs["j"].remaining == 1
    assert {d for d in ("d0", "d1", "d2", "d3") if rebuilt.core.holder(d)} == {"d2", "d3"}
    # Released devices may check in again; busy ones may not; demand left is one.
    again = ev.CheckinBatch(
        event_id="b2", time=NOW, checkins=[checkin(d) for d in ("d2", "d0", "d1")], reply_to="g"
    )
    assigned, declined = rebuilt.on_checkin_batch(again, NOW)
    assert isinstance(assigned, ev.AssignmentBatch) and isinstance(declined, ev.CheckinsDeclined)
    assert [a.device_id for a in assigned.assignments] == ["d0"]
    assert set(declined.checkin_ids) == {"c-d2", "c-d1"}
    # The round's good results survive the rebuild, and its rows go when it closes.
    good = rebuilt.rounds.good_results("j", 0)
    assert [r.response_time_s for r in good] == [7.0]
    rebuilt.on_round_event(round_closed(), NOW + 10)
    assert rounds == {}
    assert job_row(jobs, "j").core.rounds_done == 1


def test_a_decision_is_in_the_tables_before_it_is_returned() -> None:
    """A successor rebuilt from the tables right after a decision, before anything was
    read back, knows its devices are busy and its demand taken: it cannot fill the round
    again, whichever of the decision's outputs went out (the read-back window is gone)."""
    jobs: Table = {}
    rounds: Table = {}
    first = state(jobs, rounds)
    first.on_job_event(registered("j"), NOW)
    first.on_job_event(round_requested(), NOW)
    old = ev.CheckinBatch(event_id="b1", time=NOW, checkins=[checkin(f"d{i}") for i in range(4)])
    (published,) = first.on_checkin_batch(old, NOW)  # then SIGKILL
    assert isinstance(published, ev.AssignmentBatch)

    successor = state(jobs, rounds)
    fresh = [checkin(f"e{i}") for i in range(3)]
    replayed = ev.CheckinBatch(event_id="b1", time=NOW, checkins=list(old.checkins) + fresh)
    out = successor.on_checkin_batch(replayed, NOW)
    given = [a.device_id for o in out if isinstance(o, ev.AssignmentBatch) for a in o.assignments]
    assert len(published.assignments) + len(given) == 5, given
    assert not {f"d{i}" for i in range(4)} & set(given)


def test_an_expired_job_gets_no_device_once_its_expiry_is_decided() -> None:
    """Issue 32, failure 2 (CI of 7b90043, test_job_lifecycle): the scheduler published a
    silent job's expiry, then assigned that job two devices, because the expiry reached its
    state only when it read the JobExpired back from venn.jobs. Now the expiry removes the
    job at once (its tombstone written), before the next decision."""
    jobs: Table = {}
    s = state(jobs, {}, job_timeout_s=100.0)
    s.on_job_event(registered("j"), NOW)
    s.on_job_event(round_requested(), NOW)
    sent: list[str] = []
    assert expire_silent_jobs(s, None, lambda topic, k, v: sent.append(topic), NOW + 200) == 1
    assert sent == ["venn.jobs"] and job_row(jobs, "j").removed
    late = factories.checkin("d0", ATTRS, event_id="c-d0", time=NOW + 200)
    out = s.on_checkin_batch(
        ev.CheckinBatch(event_id="b", time=NOW + 200, checkins=[late]), NOW + 200
    )
    assert [o for o in out if isinstance(o, ev.AssignmentBatch)] == []
    expired = ev.JobExpired(
        event_id="x", time=NOW + 200, job_id="j", last_seen=NOW, reason="silent"
    )
    s.on_job_event(expired, NOW + 201)  # its own expiry read back: nothing more
    assert expire_silent_jobs(s, None, lambda topic, k, v: sent.append(topic), NOW + 400) == 0


def test_a_new_decider_announces_again_what_the_rows_say_devices_hold() -> None:
    """Failover bench at 0dbf9cc, run 2: the decider died after its rows were durable and
    before its assignments went out; the successor restored six devices as busy that no
    one was told about, and declined every later check-in of a round it thought full. Now
    a new decider publishes again every assignment its rows hold, with the id it had."""
    jobs: Table = {}
    rounds: Table = {}
    first = state(jobs, rounds)
    first.on_job_event(registered("j"), NOW)
    first.on_job_event(round_requested(), NOW)
    batch = ev.CheckinBatch(event_id="b1", time=NOW, checkins=[checkin(f"d{i}") for i in range(3)])
    (decided,) = first.on_checkin_batch(batch, NOW)  # rows durable; then SIGKILL
    assert isinstance(decided, ev.AssignmentBatch)
    first.on_result(result("d0"), NOW)  # d0 is done: nothing to announce for it

    successor = state(jobs, rounds)
    again = successor.held_assignments(NOW + 5)
    announced = {a.event_id: a for b in again for a in b.assignments}
    original = {a.event_id: a for a in decided.assignments if a.device_id != "d0"}
    assert set(announced) == set(original)
    for event_id, a in announced.items():
        was = original[event_id]
        assert (a.device_id, a.job_id, a.round_index, a.checkin_id, a.task_url) == (
            was.device_id, was.job_id, was.round_index, was.checkin_id, was.task_url
        )  # fmt: skip
        assert (a.speed_ms_per_sample, a.bandwidth_kbps, a.time) == (
            was.speed_ms_per_sample, was.bandwidth_kbps, was.time
        )  # fmt: skip


def test_a_silent_job_is_expired_once_and_a_heartbeat_keeps_it() -> None:
    s = state({}, {}, job_timeout_s=100.0)
    s.on_job_event(registered("j"), NOW)
    s.on_job_event(round_requested(), NOW)
    assert s.expire_silent_jobs(NOW + 50) == []
    s.on_job_event(ev.JobHeartbeat(event_id="hb", time=NOW + 80, job_id="j"), NOW + 80)
    assert s.expire_silent_jobs(NOW + 150) == []
    assert s.expire_silent_jobs(NOW + 200) == [("j", NOW + 80)]
    assert s.expire_silent_jobs(NOW + 300) == []
    assert s.core.round_view("j") is None and "j" in s.jobs.removed
    s.on_job_event(round_requested(1), NOW + 210)  # nothing reopens an expired job
    assert s.core.round_view("j") is None


def test_a_retried_submission_is_a_no_op_and_a_second_one_is_refused() -> None:
    s = state({}, {})
    s.on_job_event(registered("j", "submit-1"), NOW)
    s.on_job_event(registered("j", "submit-1"), NOW)  # the client's retry
    with pytest.raises(Refused, match="already registered"):
        s.on_job_event(registered("j", "submit-2"), NOW)
    assert list(s.core.jobs) == ["j"]


def test_a_device_holding_an_assignment_past_its_deadline_is_released() -> None:
    s = state({}, {})
    s.on_job_event(registered("j", deadline=60), NOW)
    s.on_job_event(round_requested(), NOW)
    assert s.on_checkin(checkin("d"), NOW) is not None
    again = msgspec.structs.replace(checkin("d"), event_id="c-d-2", time=NOW + 30)
    assert s.on_checkin(again, NOW + 30) is None  # still working on its task
    later = msgspec.structs.replace(checkin("d"), event_id="c-d-3", time=NOW + 61)
    assert s.on_checkin(later, NOW + 61) is not None  # it vanished with the task: released
    assert s.liveness.overdue_released == 1


def test_round_rows_keep_their_stored_shape_and_a_bad_one_is_skipped() -> None:
    jobs: Table = {}
    rounds: Table = {}
    s = state(jobs, rounds)
    s.on_job_event(registered("j"), NOW)
    s.on_job_event(round_requested(), NOW)
    s.on_checkin_batch(ev.CheckinBatch(event_id="b1", time=NOW, checkins=[checkin("d0")]), NOW)
    (row,) = [msgspec.json.decode(v) for k, v in rounds.items() if k.startswith(b'"a:')]
    # [id, device, tier, active, speed, bandwidth, time]
    assert [item[1:] for item in row["items"]] == [["d0", 0, True, 60.0, 12000.0, NOW]]
    # A row an older worker wrote (with the partition it carried, without speed and
    # bandwidth) still reads.
    rounds[key_bytes("a:old")] = encode_row_like(
        {"partition": 0, "job": "j", "round": 0, "items": [["asg:x", "d7", 0, True]]}
    )
    rounds[key_bytes("a:bad")] = b'{"job": "j", "round": 0, "items": [["x", "d9"]]}'
    rounds[b"not json"] = b"\xff"
    rebuilt = state(jobs, rounds)
    assert rebuilt.core.holder("d0") == ("j", 0) and rebuilt.core.holder("d7") == ("j", 0)
    assert rebuilt.core.holder("d9") is None
    assert rebuilt.unreadable_rows == 2


def encode_row_like(value: dict[str, Any]) -> bytes:
    return msgspec.json.encode(value)


def test_a_job_cancelled_before_its_registration_is_never_run() -> None:
    """The job API cancels a job it still queued: the scheduler never saw it (the cancel was
    dead-lettered as an unknown job); now its tombstone keeps out a registration that
    crossed the cancel, across a rebuild too."""
    jobs: Table = {}
    s = state(jobs, {})
    cancel = ev.JobCancelled(event_id="cancel:j", time=NOW, job_id="j", reason="queued")
    s.on_job_event(cancel, NOW)  # old code raised Refused (unknown job)
    s.on_job_event(registered("j"), NOW)
    assert s.core.round_view("j") is None
    assert job_row(jobs, "j").removed is True
    rebuilt = state(jobs, {})
    rebuilt.on_job_event(registered("j"), NOW)
    assert rebuilt.core.round_view("j") is None and "j" in rebuilt.jobs.removed


def test_direct_checkins_reach_the_rate_and_the_mix_together_without_a_later_checkin() -> None:
    # A burst straight to Kafka after 38 s of silence: the first check-in is reported at
    # once (1 over the 38 s), the rest at the next status snapshot, not at a later check-in.
    s = SchedulerState(SchedulerSettings(policy="fifo"), MemoryStore({}, {}))
    s.rebuild(NOW - 38)
    supply = s.supply
    s.on_checkin(checkin("first"), NOW)
    assert s.core.supply.rate_per_s() == pytest.approx(1 / 38)
    assert sum(n for _, n in supply.mix.counts()) == 1
    rest = [factories.checkin(f"d{i}", ATTRS, event_id=f"c-d{i}", time=NOW) for i in range(29)]
    s.on_checkin_batch(ev.CheckinBatch(event_id="burst", time=NOW, checkins=rest), NOW + 0.1)
    assert sum(n for _, n in supply.mix.counts()) == 1  # counted, not reported yet
    supply.report_direct(s.core, NOW + 0.5)  # within DIRECT_REPORT_S of the last report
    assert sum(n for _, n in supply.mix.counts()) == 1
    supply.report_direct(s.core, NOW + 2.0)
    assert s.core.supply.rate_per_s() == pytest.approx(29 / 2.0)
    assert supply.mix.counts() == [(ATTRS, 30)]
    supply.report_direct(s.core, NOW + 10.0)  # nothing new: the latest report stands
    assert s.core.supply.rate_per_s() == pytest.approx(29 / 2.0)


def registered(job: str, submit_token: str | None = None, deadline: float = 60) -> ev.JobRegistered:
    return factories.registered(
        job, requirement={"ram": 4.0}, demand=5, deadline_s=deadline,
        event_id=f"reg-{job}-{submit_token}", time=NOW, submit_token=submit_token,
    )  # fmt: skip


def round_closed() -> ev.RoundClosed:
    return ev.RoundClosed(
        event_id="close", time=NOW, job_id="j", round_index=0, outcome="succeeded", demand=5,
        assigned=5, results=1, opened_at=NOW, closed_at=NOW + 10, reason="",
        sched_delay_s=1.0, response_time_s=7.0,
    )  # fmt: skip


def test_a_gateways_checkin_read_after_its_answer_is_not_assigned() -> None:
    """Issue 34, item 12: after a scheduler restart, check-ins a gateway had answered
    already (it waits VENN_GATEWAY_WAIT_S for the decision, then says retry) were still
    assigned, and their rounds waited for devices that had gone away. A gateway's batch is
    decided only within its wait; a device producing to Kafka directly has no such bound."""
    s = SchedulerState(SchedulerSettings(policy="fifo"), MemoryStore(), answer_wait_s=2.0)
    s.ensure_loaded(NOW)
    s.on_job_event(registered("j"), NOW)
    s.on_job_event(round_requested(), NOW)
    late = ev.CheckinBatch(event_id="g1", time=NOW, checkins=[checkin("a")], reply_to="gw-1")
    (declined,) = s.on_checkin_batch(late, NOW + 3.0)  # read 3 s after the gateway got it
    assert isinstance(declined, ev.CheckinsDeclined) and s.stale_checkins == 1
    in_time = ev.CheckinBatch(event_id="g2", time=NOW, checkins=[checkin("b")], reply_to="gw-1")
    (assigned,) = s.on_checkin_batch(in_time, NOW + 1.5)
    assert isinstance(assigned, ev.AssignmentBatch)
    direct = ev.CheckinBatch(event_id="d1", time=NOW, checkins=[checkin("c")])
    (also,) = s.on_checkin_batch(direct, NOW + 3.0)  # no gateway waits: fresh for 10 s
    assert isinstance(also, ev.AssignmentBatch)
