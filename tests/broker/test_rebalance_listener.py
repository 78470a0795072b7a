"""What a rebalance callback may raise into aiokafka 0.14, on the session's Apache Kafka.

aiokafka calls its listener's `on_partitions_revoked` inside the task that keeps the
consumer in its group and catches only `Exception` there: a `CancelledError` out of the
callback (Faust hands back whatever its main-thread handler raised) ends that task
without a log line, and the consumer never joins its group again. That is the stall
test_faults met after a Kafka node's SIGKILL: "Revoking previously assigned partitions",
then no "(Re-)joining group" and no decision. `faust_adapter.contain_cancellation` keeps such a
cancellation in Venn's callbacks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from venn.aio import being_cancelled
from venn.broker.faust_adapter import contain_cancellation


async def stop_of_a_cancelled_loop() -> None:
    """What DeciderLoop.stop raised before it was mended: its task had ended cancelled."""
    cancelled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    cancelled.cancel()
    await cancelled


class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, on_revoke: Callable[[], Awaitable[None]]) -> None:
        self.on_revoke = on_revoke
        self.revokes = 0

    async def on_partitions_revoked(self, revoked: object) -> None:
        self.revokes += 1
        if self.revokes > 1:  # the first comes before the first join, with nothing revoked
            await self.on_revoke()

    async def on_partitions_assigned(self, assigned: object) -> None:
        pass


async def joined(
    consumers: list[AIOKafkaConsumer], timeout: float, ended: set[int] | None = None
) -> bool:
    """Poll every consumer until each holds partitions (False at the timeout); the index
    of each whose poll raised the end of its group coordination goes in ``ended``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for i, consumer in enumerate(consumers):
            try:
                await consumer.getmany(timeout_ms=100)
            except asyncio.CancelledError:  # how a dead coordination task shows
                if being_cancelled():
                    raise
                if ended is not None:
                    ended.add(i)
            except KafkaError:
                pass
        if all(consumer.assignment() for consumer in consumers):
            return True
    return False


@pytest.mark.parametrize("contained", [False, True], ids=["raw", "contained"])
async def test_a_cancellation_out_of_the_revoke_callback_ends_the_group_membership(
    broker: str, unique: str, contained: bool
) -> None:
    topic, group = f"rebalance-{unique}", f"rebalance-{unique}"
    admin = AIOKafkaAdminClient(bootstrap_servers=broker)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    finally:
        await admin.close()

    async def on_revoke() -> None:
        if contained:
            await contain_cancellation(stop_of_a_cancelled_loop(), "on_partitions_revoked")
        else:
            await stop_of_a_cancelled_loop()

    def member() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            bootstrap_servers=broker,
            group_id=group,
            session_timeout_ms=6000,
            heartbeat_interval_ms=300,
            metadata_max_age_ms=1000,
        )

    first, second = member(), member()
    listener = Listener(on_revoke)
    first.subscribe([topic], listener=listener)
    await first.start()
    try:
        assert await joined([first], 30), "the first member never joined"
        second.subscribe([topic])
        await second.start()
        try:
            # The second member's join revokes the first one's partitions.
            ended: set[int] = set()
            assert await joined([first, second], 30, ended), "the second member never joined"
            assert listener.revokes >= 2
            mine, theirs = first.assignment(), second.assignment()
            if contained:
                # The first joined again and the group split the partitions between them.
                assert not ended
                assert not mine & theirs and len(mine | theirs) == 2
            else:
                # The first's coordination ended (its polls say so) and it never joined
                # again: the group gave its partitions to the second once its heartbeats
                # stopped, and it still reads them, a zombie.
                assert ended == {0}
                assert mine & theirs, (mine, theirs)
        finally:
            await second.stop()
    finally:
        await first.stop()
