"""Check-ins gathered for a few milliseconds and produced as one CheckinBatch.

The scheduler pays a few hundred microseconds per Kafka message whatever its size, so the
gateway sends one message per `linger_s` (or per `batch_max` check-ins, or when the next
check-in would push the batch past the event size limit) instead of one per device.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from aiokafka import AIOKafkaProducer

from venn import events as ev
from venn.broker import topics

log = logging.getLogger("venn.gateway")

ENVELOPE_BYTES = 512
"""Room left in a batch for its own fields."""


class BatcherBusy(Exception):
    """Too many batches are waiting for the broker: refuse new check-ins for now."""


class CheckinBatcher:
    def __init__(
        self,
        producer: AIOKafkaProducer,
        reply_to: str,
        linger_s: float,
        batch_max: int,
        max_bytes: int,
        max_unsent: int = 64,
    ) -> None:
        self.producer = producer
        self.reply_to = reply_to
        self.linger_s = linger_s
        self.batch_max = batch_max
        self.max_bytes = max_bytes - ENVELOPE_BYTES
        self.max_unsent = max_unsent
        self.batches = 0
        self._items: list[bytes] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._size = 0
        self._timer: asyncio.TimerHandle | None = None
        self._unsent = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._prefix = "cb-" + os.urandom(6).hex()

    def submit(self, checkin: ev.DeviceCheckin) -> asyncio.Future[None]:
        """Queue one check-in; the future resolves when its batch is acknowledged (or
        fails with the producer's error). Raises BatcherBusy when the broker lags."""
        if self._unsent >= self.max_unsent:
            raise BatcherBusy(f"{self._unsent} batches waiting for the broker")
        raw = ev.encode(checkin)
        if self._items and self._size + len(raw) + 1 > self.max_bytes:
            self.flush()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._items.append(raw)
        self._waiters.append(fut)
        self._size += len(raw) + 1
        if len(self._items) >= self.batch_max:
            self.flush()
        elif self._timer is None:
            self._timer = loop.call_later(self.linger_s, self.flush)
        return fut

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._items:
            return
        self.batches += 1
        batch_id = f"{self._prefix}-{self.batches}"
        raw = ev.encode_checkin_batch(batch_id, time.time(), self._items, self.reply_to)
        waiters = self._waiters
        self._items, self._waiters, self._size = [], [], 0
        self._unsent += 1
        task = asyncio.ensure_future(self._send(batch_id, raw, waiters))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, batch_id: str, raw: bytes, waiters: list[asyncio.Future[None]]) -> None:
        error: BaseException | None = None
        try:
            delivery = await self.producer.send(topics.CHECKINS, raw, key=batch_id.encode())
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
