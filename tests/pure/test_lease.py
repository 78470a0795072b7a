"""Lease invariants under random interleavings, duplicates and replays of messages:
grants, reports, offers of held devices, their answers, and recalls of unused quota."""

from __future__ import annotations

from collections import defaultdict

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from venn.core.lease import (
    Answer,
    AnswerRun,
    Grant,
    LeaseBook,
    LeaseRule,
    Message,
    Offer,
    OwnedRoundRow,
    PartitionLeases,
    Recall,
    Report,
)


class Wire:
    """Every message ever sent; delivering one leaves it on the wire, so any message can
    arrive again later (a duplicate or a replay) and in any order."""

    def __init__(self, book: LeaseBook, parts: list[PartitionLeases]) -> None:
        self.book = book
        self.parts = parts
        self.sent: list[Message] = []
        self.assigned: dict[int, int] = defaultdict(int)  # by round: takes + accepted offers

    def deliver(self, msg: Message) -> None:
        if isinstance(msg, Grant):
            self.parts[msg.partition].on_grant(msg)
        elif isinstance(msg, Report):
            self.sent.extend(self.book.on_report(msg))
        elif isinstance(msg, Offer):
            self.sent.extend(self.book.on_offer(msg))
        elif isinstance(msg, Recall):
            report = self.parts[msg.partition].on_recall(msg)
            if report is not None:
                self.sent.append(report)
        elif isinstance(msg, Answer) and self.parts[msg.partition].on_answer(msg):
            self.assigned[msg.round_index] += 1

    def drain(self) -> None:
        """Deliver every message once, in order, including those sent meanwhile."""
        k = 0
        while k < len(self.sent):
            self.deliver(self.sent[k])
            k += 1
        self.sent.clear()


@settings(max_examples=300, deadline=None)
@given(
    partitions=st.integers(1, 12),
    demands=st.lists(st.integers(0, 80), min_size=1, max_size=3),
    backstop=st.booleans(),
    in_flight=st.integers(1, 3),
    recall_when_empty=st.booleans(),
    ops=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 11), st.integers(0, 10**6)), max_size=500
    ),
)
def test_never_more_than_demand(
    partitions: int,
    demands: list[int],
    backstop: bool,
    in_flight: int,
    recall_when_empty: bool,
    ops: list[tuple[int, int, int]],
) -> None:
    """However messages interleave, repeat or replay, and whenever partitions take, report
    or offer (even when ``can_offer`` would say no), no round gets more than D
    assignments and no partition uses quota it was not granted or gave back."""
    rule = LeaseRule(
        partitions, backstop=backstop, in_flight=in_flight, recall_when_empty=recall_when_empty
    )
    book = LeaseBook(rule)
    parts = [PartitionLeases(q, rule) for q in range(partitions)]
    wire = Wire(book, parts)
    rnd = 0
    wire.sent.extend(book.open_round("j", rnd, demands[0]))
    for kind, q, pick in ops:
        q %= partitions
        r = pick % (rnd + 1)  # a partition may act on an older round too
        if kind <= 1 and wire.sent:  # deliver (a copy of) any message, possibly again
            wire.deliver(wire.sent[pick % len(wire.sent)])
        elif kind == 2:
            if parts[q].take("j", r):
                wire.assigned[r] += 1
            elif parts[q].available("j", r) > 0:
                raise AssertionError("refused a take with quota")
        elif kind == 3:
            wire.sent.append(parts[q].report("j", r))
        elif kind == 4:
            wire.sent.append(parts[q].offer("j", rnd))
        elif rnd + 1 < len(demands) and pick % 7 == 0:  # the round closes, the next opens
            book.close_round("j", rnd)
            rnd += 1
            wire.sent.extend(book.open_round("j", rnd, demands[rnd]))
        assert book.committed("j", rnd) <= demands[rnd]
        # Released quota is never granted again (the tail serves offers only).
        assert sum(book.granted("j", rnd)) <= demands[rnd]
        for r_, n in wire.assigned.items():
            assert n <= demands[r_]
        for part in parts:
            assert part.available("j", rnd) >= 0
            assert part.assigned("j", rnd) <= demands[rnd]
        if not backstop:
            assert not any(isinstance(m, Answer) and m.accepted for m in wire.sent)


@pytest.mark.parametrize("recall_when_empty", [False, True])
@pytest.mark.parametrize(("partitions", "demand"), [(12, 5), (12, 20), (12, 100), (3, 7)])
def test_backstop_fills_a_round_seen_by_one_partition(
    partitions: int, demand: int, recall_when_empty: bool
) -> None:
    """Only one partition sees eligible devices: its grants alone are at most half of
    D, but it offers the devices it has no quota for, the others' unused quota is
    recalled (at the first refusal, or as soon as the reserve is empty), and the round is
    filled up to D, never past it."""
    rule = LeaseRule(partitions, recall_when_empty=recall_when_empty)
    book = LeaseBook(rule)
    parts = [PartitionLeases(q, rule) for q in range(partitions)]
    wire = Wire(book, parts)
    wire.sent.extend(book.open_round("j", 0, demand))
    wire.drain()
    busy = parts[partitions - 1]
    for _ in range(10 * demand + 10):  # one eligible device at a time
        if busy.take("j", 0):
            wire.assigned[0] += 1
            if busy.report_due("j", 0):
                wire.sent.append(busy.report("j", 0))
        elif busy.can_offer("j", 0):
            wire.sent.append(busy.offer("j", 0))
        wire.drain()
    assert wire.assigned[0] == demand == busy.assigned("j", 0)
    assert book.committed("j", 0) == demand
    assert all(p.available("j", 0) == 0 for p in parts)


def test_without_backstop_a_round_seen_by_one_partition_stays_short() -> None:
    rule = LeaseRule(12, backstop=False)
    book = LeaseBook(rule)
    parts = [PartitionLeases(q, rule) for q in range(12)]
    wire = Wire(book, parts)
    wire.sent.extend(book.open_round("j", 0, 100))
    wire.drain()
    busy = parts[0]
    for _ in range(1000):
        if busy.take("j", 0):
            wire.assigned[0] += 1
            if busy.report_due("j", 0):
                wire.sent.append(busy.report("j", 0))
        assert not busy.can_offer("j", 0)
        wire.drain()
    # Its own grants and top-ups only: the rest stays stranded on the other eleven.
    assert 0 < wire.assigned[0] < 100


def test_duplicate_offer_gets_the_same_answer_and_counts_once() -> None:
    rule = LeaseRule(2)
    book = LeaseBook(rule)
    grants = book.open_round("j", 0, 4)  # 1 each, reserve 2
    assert [g.granted_total for g in grants] == [1, 1]
    part = PartitionLeases(0, rule)
    part.on_grant(grants[0])
    assert part.take("j", 0) and part.can_offer("j", 0)
    offer = part.offer("j", 0)
    first = book.on_offer(offer)
    again = book.on_offer(offer)
    assert first == again == [Answer("j", 0, 0, 0, True)]
    assert book.committed("j", 0) == 3  # two grants + one accepted offer
    answer = first[0]
    assert isinstance(answer, Answer)
    assert part.on_answer(answer) and not part.on_answer(answer)
    assert part.assigned("j", 0) == 2


def test_the_owner_row_keeps_answers_as_runs_and_restores_them() -> None:
    """Offers in messages of several devices: the first ones fill the reserve, the rest
    are refused. The stored row lists runs, not every offer (it is written again at each
    offer), and a restored book answers a repeated offer as the first book did."""
    rule = LeaseRule(2)
    book = LeaseBook(rule)
    book.open_round("j", 0, 10)  # 2 each, reserve 6
    answers = [a for first, count in ((0, 4), (4, 3), (7, 3)) for a in
               book.on_offer(Offer("j", 0, 1, first, count))]  # fmt: skip
    assert [(a.offer, a.count, a.accepted) for a in answers if isinstance(a, Answer)] == [
        (0, 4, True),
        (4, 2, True),
        (6, 1, False),
        (7, 3, False),
    ]
    row = book.export("j")
    assert row is not None and row.answers == [AnswerRun(1, 0, 6, True), AnswerRun(1, 6, 4, False)]
    again = LeaseBook(rule)
    again.restore(msgspec.convert(msgspec.json.decode(msgspec.json.encode(row)), OwnedRoundRow))
    assert again.export("j") == row
    replay = again.on_offer(Offer("j", 0, 1, 4, 3))
    assert [(a.offer, a.count, a.accepted) for a in replay if isinstance(a, Answer)] == [
        (4, 2, True),
        (6, 1, False),
    ]
    assert again.committed("j", 0) == 10
