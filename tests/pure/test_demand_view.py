"""The gateway's demand view: open rounds with demand left, on the core's lifecycle fold."""

from __future__ import annotations

from services.gateway.demand import DemandView
from tests import factories
from venn import events as ev


def reg(job: str, need: float) -> ev.JobRegistered:
    return factories.registered(
        job, requirement={"ram": need}, rounds=3, event_id=f"reg-{job}", time=1.0
    )


def req(job: str, index: int) -> ev.RoundRequested:
    return factories.requested(job, index, event_id=f"rr-{job}-{index}", time=2.0)


def asg(job: str, index: int, device: str) -> ev.Assignment:
    return ev.Assignment(
        event_id=f"asg:{device}:{job}:{index}", time=3.0, job_id=job, round_index=index,
        device_id=device, task_url="u", speed_ms_per_sample=1, bandwidth_kbps=1,
    )  # fmt: skip


def test_open_demand_follows_requests_assignments_closes_and_ends() -> None:
    view = DemandView()
    for event in (reg("a", 8), reg("b", 2), req("a", 0)):
        view.apply(event)
    assert view.is_open("a") and not view.is_open("b")
    assert view.may_assign({"ram": 9}) and not view.may_assign({"ram": 4})
    view.apply(asg("a", 0, "d1"))
    view.apply(asg("a", 0, "d1"))  # a replay: counted once
    assert view.is_open("a")
    view.apply(
        ev.AssignmentBatch(event_id="b1", time=3.0, job_id="a", assignments=[asg("a", 0, "d2")])
    )
    assert not view.is_open("a") and not view.may_assign({"ram": 9})
    view.apply(req("a", 0))  # a replayed request does not reopen it
    assert not view.is_open("a")
    view.apply(req("a", 1))  # the next attempt does
    view.apply(asg("a", 0, "d3"))  # a late assignment of the old one counts for nothing
    assert view.is_open("a")
    view.apply(ev.JobCancelled(event_id="c", time=4.0, job_id="a", reason="x"))
    assert not view.is_open("a") and view.open_requirements() == ()
