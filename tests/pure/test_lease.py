"""Lease invariants under random interleavings, duplicates and replays of messages."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from venn.core.lease import Grant, LeaseBook, LeaseRule, PartitionLeases, Report


@settings(max_examples=200, deadline=None)
@given(
    partitions=st.integers(1, 12),
    demand=st.integers(0, 200),
    ops=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 11), st.integers(0, 10**6)), max_size=400
    ),
)
def test_never_more_than_demand(
    partitions: int, demand: int, ops: list[tuple[int, int, int]]
) -> None:
    rule = LeaseRule(partitions)
    book = LeaseBook(rule)
    parts = [PartitionLeases(q, rule) for q in range(partitions)]
    wire: list[Grant | Report] = list(book.open_round("j", 0, demand))
    taken = 0
    for kind, q, pick in ops:
        q %= partitions
        if kind == 0 and wire:  # deliver (a copy of) any message, possibly again
            msg = wire[pick % len(wire)]
            if isinstance(msg, Grant):
                parts[msg.partition].on_grant(msg)
            else:
                wire.extend(book.on_report(msg))
        elif kind == 1:
            if parts[q].take("j", 0):
                taken += 1
            elif parts[q].available("j", 0) > 0:
                raise AssertionError("refused a take with quota")
        else:
            wire.append(parts[q].report("j", 0))
        assert sum(book.granted("j", 0)) <= demand
        assert taken <= demand
        assert all(p.available("j", 0) >= 0 for p in parts)
