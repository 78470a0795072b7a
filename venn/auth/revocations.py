"""Follow venn.revocations: every service that checks tokens reads every revocation.

A group-less consumer from the beginning of every partition (the topic is compacted, so it
stays small), whatever share of the other topics this process's consumer group gives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiokafka import AIOKafkaConsumer, TopicPartition

from venn import events as ev
from venn.auth.tokens import Revocations
from venn.broker import topics

log = logging.getLogger(__name__)


async def follow_revocations(
    bootstrap: str, revocations: Revocations, consumer_options: dict[str, object] | None = None
) -> None:
    """Apply every TokenRevoked to ``revocations`` until cancelled."""
    while True:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            client_id="venn-revocations",
            **(consumer_options or {}),
        )
        try:
            await consumer.start()
            parts = [
                TopicPartition(topics.REVOCATIONS, p)
                for p in sorted(consumer.partitions_for_topic(topics.REVOCATIONS) or ())
            ] or await topics.partitions_of(bootstrap, (topics.REVOCATIONS,), consumer_options)
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            while True:
                batches = await consumer.getmany(timeout_ms=1000)
                for records in batches.values():
                    for record in records:
                        try:
                            event = ev.decode(record.value, (ev.TokenRevoked,))
                        except ev.InvalidEvent:
                            continue  # its owner dead-letters it
                        assert isinstance(event, ev.TokenRevoked)
                        revocations.revoke(event.token_id, event.time)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("following venn.revocations failed; retrying")
            await asyncio.sleep(1.0)
        finally:
            with contextlib.suppress(Exception):
                await consumer.stop()
