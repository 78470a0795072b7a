"""The dashboard's snapshot (services/gateway/dashboard_view.py): jobs with their rounds,
open demand per job group, supply and plan from the scheduler's snapshot, the assignment
rate and the dead letters, from plain inputs."""

from __future__ import annotations

import msgspec

from services.gateway.dashboard_view import (
    DeadLetterTally,
    RateMeter,
    dashboard_snapshot,
)
from services.gateway.demand import DemandView
from tests import factories
from venn import events as ev
from venn.core.status import DeviceGroup, JobGroup, JobPlacement, SchedulerStatus


def reg(job: str, at: float, need: float = 2.0) -> ev.JobRegistered:
    return factories.registered(job, requirement={"ram": need}, event_id=f"reg-{job}", time=at)


def req(job: str, index: int, at: float) -> ev.RoundRequested:
    return factories.requested(job, index, event_id=f"rr-{job}-{index}", time=at)


def asg(job: str, index: int, device: str) -> ev.Assignment:
    return ev.Assignment(
        event_id=f"asg:{device}:{job}:{index}", time=3.0, job_id=job, round_index=index,
        device_id=device, task_url="u", speed_ms_per_sample=1, bandwidth_kbps=1,
    )  # fmt: skip


def closed(job: str, index: int, at: float) -> ev.RoundClosed:
    return factories.closed(
        job, index, opened_at=at - 5, closed_at=at, sched_delay_s=1.5, response_time_s=3.0,
        event_id=f"rc-{job}-{index}",
    )  # fmt: skip


def letter(offset: int, reason: str = "schema: not an event") -> ev.DeadLetter:
    return ev.dead_letter_for(b"\xff", reason, "venn.checkins", 0, offset, 50.0 + offset)


STATUS = SchedulerStatus(
    time=99.0,
    worker="w",
    policy="venn",
    window=40,
    checkin_rate_per_s=4.0,
    busy_devices=3,
    device_groups=[DeviceGroup(0, [0], 30, 3.0, [0]), DeviceGroup(1, [], 10, 1.0, [])],
    job_groups=[JobGroup(0, {"ram": 2.0}, ["b"], [0], 3.0)],
    jobs=[JobPlacement("b", 0, True, 2, True)],
)


def test_snapshot_of_a_finished_a_running_and_an_unknown_scheduler() -> None:
    view = DemandView()
    history: list[ev.Event] = [reg("a", 10.0), req("a", 0, 11.0), asg("a", 0, "d1")]
    history += [asg("a", 0, "d2"), closed("a", 0, 20.0), req("a", 1, 21.0), closed("a", 1, 30.0)]
    for event in history:
        view.apply(event)
    view.apply(
        ev.JobFinished(
            event_id="fin-a", time=31.0, job_id="a", rounds_completed=2, arrival=10.0,
            finished_at=31.0, jct_s=21.0,
        )
    )  # fmt: skip
    for later in (reg("b", 40.0), req("b", 0, 41.0), asg("b", 0, "d3")):
        view.apply(later)
    meter = RateMeter(window_s=5.0)
    meter.observe(90.0, 0)
    meter.observe(100.0, view.assignments_seen)  # 3 in 10 s
    tally = DeadLetterTally()
    for dead_letter in (letter(1), letter(1), letter(2, "x" * 500)):  # a replay counts once
        tally.add(dead_letter)

    snap = dashboard_snapshot(
        view, STATUS, 100.0, assignments=meter, dead_letters=tally, gateway={"id": "gw"}
    )
    msgspec.json.encode(snap)  # what the stream sends: plain JSON
    jobs = {j["job_id"]: j for j in snap["jobs"]}
    assert [j["job_id"] for j in snap["jobs"]] == ["b", "a"]  # running first, then ended
    a, b = jobs["a"], jobs["b"]
    assert (a["state"], a["rounds_done"], a["rounds"], a["jct_s"]) == ("finished", 2, 2, 21.0)
    assert a["elapsed_s"] == 21.0  # registration to its end, not to now
    assert a["open_round"] is None and a["sched_delay_s"] == 3.0
    assert (b["state"], b["round"], b["rounds"], b["rounds_done"]) == ("running", 1, 2, 0)
    assert b["open_round"]["assigned"] == 1 and b["open_round"]["demand"] == 2
    assert b["elapsed_s"] == 60.0 and b["jct_s"] is None
    assert snap["job_counts"] == {"total": 2, "finished": 1, "running": 1}

    assert snap["open_demand"] == [
        {
            "group": 0,
            "requirement": {"ram": 2.0},
            "open_jobs": ["b"],
            "open_demand": 2,
            "eligible_rate_per_s": 3.0,
            "fed_by": [0],
        }
    ]
    assert snap["supply"]["checkin_rate_per_s"] == 4.0
    assert [d["checkin_rate_per_s"] for d in snap["supply"]["device_groups"]] == [3.0, 1.0]
    assert [d["feeds"] for d in snap["plan"]["device_groups"]] == [[0], []]
    assert snap["assignments"] == {"seen": 3, "per_s": 0.3}
    dead = snap["dead_letters"]
    assert (dead["available"], dead["total"], dead["by_source"]) == (True, 2, {"venn.checkins": 2})
    assert [d["offset"] for d in dead["recent"]] == [2, 1]  # newest first
    assert len(dead["recent"][0]["reason"]) == 120
    assert snap["gateway"] == {"id": "gw"}

    # No snapshot from the scheduler yet: jobs still show, the rest says so.
    bare = dashboard_snapshot(view, None, 100.0, assignments=RateMeter(), dead_letters=tally)
    assert bare["open_demand"] == [] and bare["supply"]["available"] is False
    assert bare["plan"]["available"] is False and bare["assignments"]["per_s"] == 0.0
    assert bare["jobs"][0]["waiting"] == "unknown"


def test_ended_jobs_beyond_the_limit_are_left_out_but_counted() -> None:
    view = DemandView()
    for i in range(5):
        view.apply(reg(f"j{i}", float(i)))
        view.apply(ev.JobCancelled(event_id=f"c{i}", time=10.0 + i, job_id=f"j{i}", reason="x"))
    view.apply(reg("live", 1.0))
    snap = dashboard_snapshot(
        view, None, 20.0, assignments=RateMeter(), dead_letters=DeadLetterTally(), max_ended=2
    )
    assert [j["job_id"] for j in snap["jobs"]] == ["live", "j4", "j3"]
    assert snap["job_counts"] == {"total": 6, "cancelled": 5, "submitted": 1}


def test_rate_meter_keeps_its_window_and_ignores_a_counter_reset() -> None:
    meter = RateMeter(window_s=5.0)
    assert meter.rate() == 0.0
    for t in range(11):
        meter.observe(float(t), t * 10)
    assert meter.rate() == 10.0 and meter.samples[0][0] >= 4.0
    meter.observe(11.0, 0)  # the gateway restarted its count
    assert meter.rate() == 0.0
