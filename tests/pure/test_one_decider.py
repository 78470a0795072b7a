"""Which scheduler worker decides (`venn.broker.faust_adapter.choose_decider`): the one
deciding now while it is a member, so that a worker joining never moves the decisions."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

import pytest

from venn.broker.faust_adapter import RejoinWatch, choose_decider, contain_cancellation
from venn.diagnostics import awaits, task_stacks


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


async def until(condition: Callable[[], bool]) -> None:
    """Wait for ``condition`` (a busy machine makes the watch's short periods long)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not within 10 s")


async def test_a_rebalance_that_does_not_complete_is_reported_with_what_each_task_awaits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def waiting_for_the_broker() -> None:
        await asyncio.sleep(30)

    stuck = asyncio.ensure_future(waiting_for_the_broker())
    watch = RejoinWatch(None, after_s=0.05)
    try:
        with caplog.at_level(logging.WARNING, logger="venn.broker.faust_adapter"):
            watch.revoked()
            await until(lambda: watch.reports >= 1)
    finally:
        stuck.cancel()
        watch.completed()
    record = caplog.records[0]
    assert "no rebalance completed" in record.getMessage()
    assert "waiting_for_the_broker" in record.getMessage()


async def test_a_worker_never_given_its_partitions_again_is_restarted() -> None:
    """test_faults in CI: after a revoke the consumer never joined the group again."""
    calls: list[bool] = []
    answers = [False, True]  # the first time the broker is away: asked again

    def restart() -> bool:
        calls.append(answers[len(calls)])
        return calls[-1]

    watch = RejoinWatch(restart, after_s=0.01)
    watch.revoked()
    await until(lambda: watch.task is not None and watch.task.done())
    assert calls == [False, True]

    # Given its partitions again (recovery under way): reported, not restarted.
    calls.clear()
    watch.revoked()
    watch.assigned()
    await until(lambda: watch.reports >= 3)
    assert calls == []
    watch.completed()
    assert watch.task is None


async def test_the_report_covers_the_loops_other_threads_run() -> None:
    """Faust runs aiokafka's group membership on a loop of its own thread."""
    started, done = threading.Event(), threading.Event()

    async def member_of_the_group() -> None:
        started.set()
        while not done.is_set():
            await asyncio.sleep(0.01)

    thread = threading.Thread(target=lambda: asyncio.run(member_of_the_group()))
    thread.start()
    try:
        assert started.wait(5)
        assert "member_of_the_group" in task_stacks()
    finally:
        done.set()
        thread.join(5)


async def test_the_report_follows_a_task_down_to_what_it_awaits() -> None:
    gate = asyncio.Event()

    async def innermost() -> None:
        await gate.wait()

    async def outer() -> None:
        await innermost()

    task = asyncio.ensure_future(outer())
    await asyncio.sleep(0)
    try:
        chain = awaits(task.get_coro())
        assert [line.rsplit(" in ", 1)[1] for line in chain[:2]] == ["outer", "innermost"]
    finally:
        gate.set()
        await task


async def test_a_cancellation_a_rebalance_callback_did_not_ask_for_stays_in_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """aiokafka catches only Exception around its rebalance listener: a CancelledError
    handed back from Faust's callback ends the consumer's group coordination silently."""

    async def stop_of_a_cancelled_loop() -> None:
        cancelled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        cancelled.cancel()
        await cancelled

    with caplog.at_level(logging.ERROR, logger="venn.broker.faust_adapter"):
        await contain_cancellation(stop_of_a_cancelled_loop(), "on_partitions_revoked")
    assert "a cancellation not asked for" in caplog.text

    # The callback's own cancellation (a shutdown) still ends it.
    started = asyncio.Event()

    async def slow() -> None:
        started.set()
        await asyncio.sleep(60)

    task = asyncio.ensure_future(contain_cancellation(slow(), "on_partitions_revoked"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
