"""The replay rules of an open round's assignments and results (`venn.core.round_tally`),
and the coordinator's close built on them."""

from __future__ import annotations

from services.coordinator.ledger import RoundLedger
from services.gateway.demand import DemandView
from tests import factories
from venn import events as ev
from venn.core.round_tally import RoundTally


def assignment(device: str, round_index: int = 1, event_id: str = "") -> ev.Assignment:
    return ev.Assignment(
        event_id=event_id or f"a-{device}-{round_index}", time=5.0, job_id="j",
        round_index=round_index, device_id=device, task_url="http://t", speed_ms_per_sample=60.0,
        bandwidth_kbps=1000.0,
    )  # fmt: skip


def result(device: str, ok: bool, round_index: int = 1) -> ev.DeviceResult:
    return factories.result(
        "j", round_index, device, ok=ok, reason="" if ok else "crashed",
        event_id=f"r-{device}-{ok}", time=6.0,
    )  # fmt: skip


def test_assignments_count_once_per_device_and_only_for_their_attempt() -> None:
    t = RoundTally(round_index=1, demand=2)
    assert t.on_assignment(assignment("d1"), 10.0)
    assert not t.on_assignment(assignment("d1", event_id="again"), 11.0)
    assert not t.on_assignment(assignment("d2", round_index=0), 11.0)
    assert t.remaining == 1 and t.filled_at is None
    assert t.on_assignment(assignment("d2"), 12.0)
    assert (t.remaining, t.filled_at, t.extra_assignments) == (0, 12.0, 0)
    assert t.on_assignment(assignment("d3"), 13.0)
    assert (t.remaining, t.filled_at, t.extra_assignments) == (0, 12.0, 1)


def test_a_good_result_replaces_a_failure_and_stands() -> None:
    t = RoundTally(round_index=1, demand=2)
    t.on_assignment(assignment("d1"), 5.0)
    assert t.on_result(result("d1", ok=False))
    assert not t.on_result(result("d1", ok=False))
    assert t.on_result(result("d1", ok=True))
    assert (t.ok, t.failed) == ({"d1"}, {})
    assert not t.on_result(result("d1", ok=False))
    assert not t.on_result(result("d2", ok=True, round_index=0))


def test_only_a_device_the_attempt_assigned_counts_its_result() -> None:
    """Issue 26, item 8: a result for a device the round never had counts nothing; one that
    overtook its device's assignment counts when the assignment comes."""
    t = RoundTally(round_index=1, demand=2)
    ledger = RoundLedger("j", t, needed=1, opened_at=0.0)
    assert not t.on_result(result("never-assigned", ok=True))
    assert not t.on_result(result("early", ok=False))
    assert not t.on_result(result("early", ok=True))  # held: the good one wins
    assert (t.ok, t.failed, ledger.succeeded) == (set(), {}, False)
    t.on_assignment(assignment("early"), 7.0)
    assert (t.ok, t.failed, ledger.succeeded) == ({"early"}, {}, True)
    assert "never-assigned" not in t.ok and ledger.closing(9.0)["results"] == 1
    # Held results are bounded: a flood from devices never assigned is counted, not kept.
    for i in range(2000):
        t.on_result(result(f"flood-{i}", ok=True))
    assert len(t.held) == 1000 and t.unassigned_results == 1001


def test_the_coordinators_close_comes_from_the_tally() -> None:
    t = RoundTally(round_index=1, demand=2)
    ledger = RoundLedger("j", t, needed=1, opened_at=10.0)
    t.on_assignment(assignment("d1"), 12.0)
    closing = ledger.closing(20.0)
    assert (closing["outcome"], closing["reason"]) == ("failed", "deadline: 0/1 results")
    assert closing["sched_delay_s"] == 10.0  # never filled: it waited until the close
    t.on_assignment(assignment("d2"), 14.0)
    t.on_result(result("d2", ok=True))
    closing = ledger.closing(20.0)
    assert ledger.succeeded and closing["outcome"] == "succeeded"
    assert (closing["assigned"], closing["results"], closing["sched_delay_s"]) == (2, 1, 4.0)
    assert closing["response_time_s"] == 6.0


def test_the_gateway_counts_demand_with_the_same_rules() -> None:
    view = DemandView()
    registered = ev.JobRegistered(
        event_id="reg", time=1.0, job_id="j", requirement={}, demand=2, rounds=2,
        deadline_s=60, workload_s=5,
    )  # fmt: skip
    view.apply(registered)
    view.apply(ev.RoundRequested(event_id="rr", time=2.0, job_id="j", round_index=1, demand=2))
    view.apply(assignment("d1"))
    view.apply(assignment("d1", event_id="resent"))  # the same device again
    view.apply(assignment("d9", round_index=0))  # a stale attempt's
    life = view.book.get("j")
    assert (view.remaining(life), view.assigned(life)) == (1, 1) and view.is_open("j")
    view.apply(assignment("d2"))
    assert view.remaining(life) == 0 and not view.is_open("j")
