"""Faust's aiokafka transport with a configurable consumer fetch wait.

Faust hard-codes ``fetch_max_wait_ms=1500`` for the worker's consumer. Apache Kafka answers
a parked fetch as soon as data arrives, so there it costs nothing; Tansu keeps the fetch
parked for the whole wait, so every idle or lightly loaded poll adds up to 1.5 s between a
check-in and its assignment. This transport sets the wait from
``Settings.scheduler_fetch_wait_ms`` before the consumer starts.
"""

from __future__ import annotations

from typing import Any, ClassVar

import aiokafka
import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TransportT


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(
        self, transport: faust_aiokafka.Transport
    ) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # Read by AIOKafkaConsumer.start() when it builds its fetcher, i.e. after this.
        consumer._fetch_max_wait_ms = self.app.fetch_wait_ms  # type: ignore[attr-defined]
        return consumer


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class _Transport(faust_aiokafka.Transport):
    Consumer: ClassVar[Any] = _Consumer


class SchedulerApp(faust.App):
    """A faust.App whose worker consumer waits at most ``fetch_wait_ms`` per fetch."""

    def __init__(self, *args: Any, fetch_wait_ms: int = 1500, **kwargs: Any) -> None:
        self.fetch_wait_ms = fetch_wait_ms
        super().__init__(*args, **kwargs)

    def _new_transport(self) -> TransportT:
        return _Transport(self.conf.broker_consumer, self)
