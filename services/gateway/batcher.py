"""Check-ins gathered for a few milliseconds and produced as CheckinBatch events.

The scheduler pays a few hundred microseconds per Kafka message whatever its size, so the
gateway sends one message per partition every `linger_s` (sooner when a batch reaches
`batch_max` check-ins, or when the next check-in would push it past the event size
limit) instead of one per device. A batch only holds devices of one partition of
venn.checkins (the partition their device_id key maps to), so a device's check-ins stay
on its partition as design.md's partitioning by device asks.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from venn import events as ev
from venn.broker import topics

log = logging.getLogger("venn.gateway")

ENVELOPE_BYTES = 512
"""Room left in a batch for its own fields."""


class BatcherBusy(Exception):
    """Too many batches are waiting for the broker: refuse new check-ins for now."""


@dataclass
class _Pending:
    items: list[bytes] = field(default_factory=list)
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    size: int = 0


class CheckinBatcher:
    def __init__(
        self,
        producer: AIOKafkaProducer,
        partitions: int,
        reply_to: str,
        linger_s: float,
        batch_max: int,
        max_bytes: int,
        max_unsent: int = 64,
    ) -> None:
        self.producer = producer
        self.partitions = list(range(partitions))
        self.reply_to = reply_to
        self.linger_s = linger_s
        self.batch_max = batch_max
        self.max_bytes = max_bytes - ENVELOPE_BYTES
        self.max_unsent = max_unsent
        self.batches = 0
        self._partitioner = DefaultPartitioner()
        self._pending: dict[int, _Pending] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._unsent = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._prefix = "cb-" + os.urandom(6).hex()

    def partition_of(self, device_id: str) -> int:
        """The partition a DeviceCheckin keyed by this device would go to."""
        return int(self._partitioner(device_id.encode(), self.partitions, self.partitions))

    def submit(self, checkin: ev.DeviceCheckin) -> asyncio.Future[None]:
        """Queue one check-in; the future resolves when its batch is acknowledged (or
        fails with the producer's error). Raises BatcherBusy when the broker lags."""
        if self._unsent >= self.max_unsent:
            raise BatcherBusy(f"{self._unsent} batches waiting for the broker")
        raw = ev.encode(checkin)
        partition = self.partition_of(checkin.device_id)
        pending = self._pending.get(partition)
        if pending is not None and pending.size + len(raw) + 1 > self.max_bytes:
            self._flush(partition)
            pending = None
        if pending is None:
            pending = self._pending[partition] = _Pending()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        pending.items.append(raw)
        pending.waiters.append(fut)
        pending.size += len(raw) + 1
        if len(pending.items) >= self.batch_max:
            self._flush(partition)
        elif self._timer is None:
            self._timer = loop.call_later(self.linger_s, self.flush)
        return fut

    def flush(self) -> None:
        """Send every pending batch now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for partition in list(self._pending):
            self._flush(partition)

    def _flush(self, partition: int) -> None:
        pending = self._pending.pop(partition, None)
        if pending is None or not pending.items:
            return
        self.batches += 1
        batch_id = f"{self._prefix}-{self.batches}"
        raw = ev.encode_checkin_batch(batch_id, time.time(), pending.items, self.reply_to)
        self._unsent += 1
        task = asyncio.ensure_future(self._send(batch_id, partition, raw, pending.waiters))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(
        self, batch_id: str, partition: int, raw: bytes, waiters: list[asyncio.Future[None]]
    ) -> None:
        error: BaseException | None = None
        try:
            delivery = await self.producer.send(
                topics.CHECKINS, raw, key=batch_id.encode(), partition=partition
            )
            await delivery
        except Exception as exc:
            error = exc
            log.debug("check-in batch %s not produced: %r", batch_id, exc)
        finally:
            self._unsent -= 1
        for fut in waiters:
            if fut.done():
                continue
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)

    async def close(self) -> None:
        self.flush()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5.0)
