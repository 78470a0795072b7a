"""Which scheduler worker decides (`venn.broker.faust_adapter.choose_decider`): the one
deciding now while it is a member, so that a worker joining never moves the decisions."""

from __future__ import annotations

import pytest

from venn.broker.faust_adapter import choose_decider


def test_the_decider_stays_while_it_is_a_member() -> None:
    assert choose_decider(["a", "b", "c"], ["c"]) == "c"


def test_a_new_group_takes_the_lowest_member_id() -> None:
    assert choose_decider(["m-2", "m-1", "m-3"], []) == "m-1"


def test_a_dead_decider_is_replaced_by_the_lowest_member_id() -> None:
    assert choose_decider(["b", "c"], ["a"]) == "b"


def test_of_two_that_say_they_decide_the_lowest_keeps_it() -> None:
    assert choose_decider(["b", "c", "d"], ["d", "c"]) == "c"


def test_no_members_is_an_error() -> None:
    with pytest.raises(ValueError, match="no members"):
        choose_decider([], ["a"])
