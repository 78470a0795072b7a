"""Faust's aiokafka transport with a configurable consumer fetch wait and a batching
producer for the scheduler's outputs; its consumer commits what the offset ledger says
(`venn.broker.faust_adapter`).

The fetch wait is ``Settings.scheduler_fetch_wait`` (`venn.broker.faust_adapter` says why
and sets it).

On Tansu, Faust's own producer runs with ``producer_max_batch_size=1`` (its ListOffsets bug
makes table recovery drop the tail of a multi-record changelog batch). With one record per
batch, aiokafka holds one batch per partition until the next produce round trip and
Faust's buffer sends in order, so every output waited for a round trip: the scheduler
could not emit more than a few hundred messages a second, and check-in -> assignment
latency grew past 100 ms at 200 check-ins/s. Outputs (assignments, replies, dead letters)
are never recovered by Faust, so they go through a second producer with normal batching.
Faust flushes its producer before it commits offsets; ``flush()`` flushes both, so the
outputs stay at-least-once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, ClassVar

import aiokafka
from aiokafka.errors import MessageSizeTooLargeError
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TransportT

from services.scheduler import metrics
from venn.broker.faust_adapter import LedgerConsumer, OffsetsApp

log = logging.getLogger(__name__)


OUTPUT_MAX_BATCH_BYTES = 1 << 20
OUTPUT_LINGER_MS = 1


class OutputProducer(faust_aiokafka.Producer):
    """Faust's producer, plus ``send_output``: in-order sends through a batching producer."""

    _outputs: aiokafka.AIOKafkaProducer | None = None
    _sender: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._pending: deque[tuple[str, bytes, bytes]] = deque()
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def send_output(self, topic: str, key: bytes, value: bytes) -> None:
        """Queue one output message (to the key's partition); sent in call order, flushed
        before each commit."""
        self._pending.append((topic, key, value))
        self._idle.clear()
        self._wakeup.set()

    async def _send_outputs(self) -> None:
        outputs = self._outputs
        assert outputs is not None
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup.clear()
                while self._pending:
                    topic, key, value = self._pending.popleft()
                    try:
                        # Appends to a batch.
                        await outputs.send(topic, value, key=key)
                    except MessageSizeTooLargeError:
                        # Outputs are bounded (venn.fields); one that is not must not stop
                        # every later one: count it, say which, go on.
                        metrics.OUTPUT_ERRORS.labels(topic, "too_large").inc()
                        log.error("dropped an output of %d bytes to %s", len(value), topic)
                self._idle.set()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            # A sender that died quietly left flush() waiting forever and the worker silent
            # (issue 12, defect 1). Crash the worker instead: it exits, and a restarted one
            # resumes from the last committed offsets.
            metrics.OUTPUT_ERRORS.labels("any", type(exc).__name__).inc()
            log.exception("the output sender failed; stopping the worker")
            self._idle.set()
            await self.crash(exc)

    async def flush(self) -> None:
        await super().flush()
        if self._outputs is None:
            return
        await self._idle.wait()
        await self._outputs.flush()

    async def on_start(self) -> None:
        await super().on_start()
        settings = {
            **self._settings_default(),
            **self._settings_auth(),
            "max_batch_size": OUTPUT_MAX_BATCH_BYTES,
            "linger_ms": OUTPUT_LINGER_MS,
        }
        settings["client_id"] = f"{settings['client_id']}-outputs"
        self._outputs = aiokafka.AIOKafkaProducer(**settings)
        await self._outputs.start()
        self._sender = asyncio.ensure_future(self._send_outputs())

    async def on_stop(self) -> None:
        if self._outputs is not None:
            await self.flush()
        if self._sender is not None:
            self._sender.cancel()
            await asyncio.gather(self._sender, return_exceptions=True)
            self._sender = None
        outputs, self._outputs = self._outputs, None
        if outputs is not None:
            await outputs.stop()
        await super().on_stop()


class _Transport(faust_aiokafka.Transport):
    Consumer: ClassVar[Any] = LedgerConsumer
    Producer: ClassVar[Any] = OutputProducer


class SchedulerApp(OffsetsApp):
    """An `OffsetsApp` (commits follow its offset ledger; its consumer waits at most
    ``fetch_wait_ms`` per fetch) with the batching output producer."""

    def _new_transport(self) -> TransportT:
        return _Transport(self.conf.broker_consumer, self)
