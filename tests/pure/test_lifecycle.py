"""The fold of a job's life over its events: replay rules, any order, conflicts."""

from __future__ import annotations

import itertools
import random
from typing import Literal

from tests import factories
from venn import events as ev
from venn.core.lifecycle import Applied, JobBook, JobLife

JOB = "j1"


def registered() -> ev.JobRegistered:
    return factories.registered(JOB, demand=3, event_id="reg", time=1.0)


def request(index: int) -> ev.RoundRequested:
    return factories.requested(JOB, index, 3, event_id=f"rr{index}", time=10.0 + index)


def close(
    index: int, outcome: Literal["succeeded", "failed"] = "succeeded", event_id: str = ""
) -> ev.RoundClosed:
    return factories.closed(
        JOB, index, outcome, demand=3, results=3 if outcome == "succeeded" else 1,
        opened_at=10.0 + index, closed_at=20.0 + index, response_time_s=2.0,
        event_id=event_id or f"rc{index}",
    )  # fmt: skip


def finished() -> ev.JobFinished:
    return factories.finished(JOB, finished_at=40.0, event_id="fin")


LIFE = [registered(), request(0), close(0, "failed"), request(1), close(1), request(2), close(2)]


def test_a_whole_life() -> None:
    life = JobLife(JOB)
    assert life.status == "submitted" and life.next_index == 0
    assert [life.apply(e) for e in LIFE[:4]] == [Applied.CHANGED] * 4
    assert life.status == "running"
    open_attempt = life.open_attempt
    assert open_attempt is not None and open_attempt.index == 1 and open_attempt.demand == 3
    assert (life.rounds_done, life.next_index) == (0, 2)
    for event in LIFE[4:]:
        life.apply(event)
    assert life.open_attempt is None and life.rounds_done == 2 and life.next_index == 3
    assert life.apply(finished()) == Applied.CHANGED
    assert life.status == "finished" and life.ended
    assert life.apply(request(3)) == Applied.STALE  # nothing reopens an ended job


def test_replays_change_nothing_and_any_order_gives_the_same_position() -> None:
    reference = JobLife(JOB)
    for event in LIFE:
        reference.apply(event)
    rng = random.Random(3)
    for _ in range(200):
        events = LIFE * 2
        rng.shuffle(events)
        life = JobLife(JOB)
        for event in events:
            life.apply(event)
        assert (life.rounds_done, life.next_index, life.closes) == (
            reference.rounds_done,
            reference.next_index,
            reference.closes,
        )
        assert life.conflicts == []


def test_stale_requests_and_second_closes() -> None:
    life = JobLife(JOB)
    for event in (registered(), request(0), close(0), request(1)):
        life.apply(event)
    assert life.apply(request(0)) == Applied.REPLAY
    assert life.apply(
        ev.RoundRequested(event_id="x", time=1, job_id=JOB, round_index=0, demand=3)
    ) in (Applied.REPLAY, Applied.STALE)
    assert life.apply(close(0)) == Applied.REPLAY
    assert life.apply(close(0, event_id="resent")) == Applied.REPLAY  # same content
    conflicting = close(0, "failed", event_id="other")
    assert life.apply(conflicting) == Applied.CONFLICT
    assert life.conflicts == [conflicting]
    assert life.closes[0].outcome == "succeeded"  # the first close stands


def test_a_book_keeps_jobs_apart() -> None:
    book = JobBook()
    other = ev.RoundRequested(event_id="o", time=1, job_id="j2", round_index=4, demand=1)
    for event in itertools.chain(LIFE[:2], [other]):
        book.apply(event)
    assert book.get(JOB).next_index == 1 and book.get("j2").next_index == 5
    assert book.get("never").status == "submitted"
    assert (
        book.apply(ev.CheckinsDeclined(event_id="d", time=1, reply_to="g", checkin_ids=[]))
        == Applied.IGNORED
    )


def test_admission_decisions_in_a_jobs_life() -> None:
    def admission(decision: Literal["admitted", "queued", "refused"], n: int) -> ev.JobAdmission:
        return ev.JobAdmission(
            event_id=f"adm{n}", time=float(n), job_id="q", decision=decision, reason="r"
        )

    life = JobLife("q")
    life.apply(admission("refused", 1))
    assert life.status == "refused" and not life.waiting_admission
    life.apply(admission("queued", 2))
    assert life.status == "queued" and life.waiting_admission
    assert life.apply(admission("queued", 2)) is Applied.REPLAY
    life.apply(admission("admitted", 3))
    life.apply(ev.JobRegistered(event_id="reg", time=3.0, job_id="q", requirement={},
                                demand=1, rounds=1, deadline_s=10.0, workload_s=1.0))  # fmt: skip
    assert life.status == "submitted" and not life.waiting_admission
    assert life.queued is not None and life.queued.event_id == "adm2"
    # A later submission refused under the registered id changes nothing.
    assert life.apply(admission("refused", 4)) is Applied.STALE
