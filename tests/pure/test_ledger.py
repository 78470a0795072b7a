"""The offset ledger (venn/broker/ledger.py): what may be committed is the lowest offset
not accounted for."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from venn.broker.ledger import OUTCOMES, OffsetLedger, Outcome


def test_the_next_offset_stops_at_the_first_hole() -> None:
    ledger = OffsetLedger()
    ledger.begin("t", 0, 10)
    assert ledger.next_offset("t", 0) == 10
    assert ledger.account("t", 0, 10, "handled")
    assert ledger.account("t", 0, 12, "dead_lettered")
    assert ledger.next_offset("t", 0) == 11  # 11 is not accounted for: 12 may not be committed
    assert ledger.account("t", 0, 11, "deduplicated")
    assert ledger.next_offset("t", 0) == 13


def test_a_redelivered_offset_is_not_counted_twice() -> None:
    seen: list[tuple[str, int, Outcome]] = []
    ledger = OffsetLedger(observe=lambda t, p, o: seen.append((t, p, o)))
    ledger.begin("t", 1, 0)
    assert ledger.account("t", 1, 0, "handled")
    assert ledger.accounted("t", 1, 0)
    assert not ledger.account("t", 1, 0, "handled")
    assert seen == [("t", 1, "handled")]
    assert ledger.counts == {("t", 1, "handled"): 1}


def test_offsets_below_the_start_were_accounted_by_whoever_committed_them() -> None:
    ledger = OffsetLedger()
    ledger.begin("t", 0, 5)
    assert ledger.accounted("t", 0, 4)
    assert not ledger.account("t", 0, 3, "handled")
    assert ledger.next_offset("t", 0) == 5


def test_records_accounted_before_the_start_is_known() -> None:
    ledger = OffsetLedger()
    ledger.account("t", 0, 7, "handled")
    ledger.account("t", 0, 8, "handled")
    assert ledger.next_offset("t", 0) is None  # nothing may be committed yet
    ledger.begin("t", 0, 7)
    assert ledger.next_offset("t", 0) == 9
    ledger.begin("t", 0, 2)  # begun already: keeps its place
    assert ledger.next_offset("t", 0) == 9


def test_forget_a_revoked_partition() -> None:
    ledger = OffsetLedger()
    ledger.begin("t", 0, 0)
    ledger.account("t", 0, 0, "handled")
    ledger.forget("t", 0)
    assert not ledger.begun("t", 0)
    assert ledger.next_offset("t", 0) is None
    assert not ledger.accounted("t", 0, 0)
    assert ledger.total("t", 0) == 1  # counts are since the process started


@given(
    start=st.integers(0, 50),
    order=st.permutations(list(range(30))),
    outcomes=st.lists(st.sampled_from(OUTCOMES), min_size=30, max_size=30),
    held=st.sets(st.integers(0, 29)),
)
def test_never_past_an_offset_not_accounted_for(
    start: int, order: list[int], outcomes: list[Outcome], held: set[int]
) -> None:
    """Whatever the order, the committable offset is the lowest offset not accounted for."""
    ledger = OffsetLedger()
    ledger.begin("t", 0, start)
    done: set[int] = set()
    for i, outcome in zip(order, outcomes, strict=True):
        if i in held:
            continue
        ledger.account("t", 0, start + i, outcome)
        done.add(start + i)
        expected = start
        while expected in done:
            expected += 1
        assert ledger.next_offset("t", 0) == expected
    assert ledger.total("t", 0) == len(done)
