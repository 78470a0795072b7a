"""A minimal Faust app for the record-loss reproduction (tests/broker/test_faust_record_loss.py).

`python -m tests.broker.faust_probe worker -l info` with PROBE_* variables (see `main`).
One agent reads PROBE_TOPIC (one partition) and, for each record, publishes its offset to
PROBE_HANDLED (waiting for the broker) before the record is acked: what was handled survives
a SIGKILL. One table with a changelog, so that a restarted worker goes through Faust's table
recovery (`Recovery.on_recovery_completed`, the fetcher running) like the scheduler does.

With PROBE_HOLD=1 the worker forces one interleaving that Faust allows and the scheduler's
CI run hit by chance: in `on_recovery_completed`, the input partitions are resumed and
`Consumer.perform_seek` runs while the fetcher is already live (flow was resumed to read
the changelogs); a fetch that lands after the seek delivers records into the agent's buffer
and moves `Consumer._read_offset` past them, and the `flow_control.resume()` that follows
clears every buffer (`clear_on_resume`). Here `perform_seek` returns only once the last
record of the input topic has been delivered to the buffer: a slow OffsetFetch answer, in
effect. A record whose value is b"slow" keeps the agent busy until recovery has completed,
so that the record after it is still in the buffer when the buffer is cleared.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka

from venn.broker.faust_adapter import LedgerConsumer, OffsetsApp, account, records

TOPIC = os.environ.get("PROBE_TOPIC", "probe-in")
HANDLED = os.environ.get("PROBE_HANDLED", "probe-handled")
HOLD = os.environ.get("PROBE_HOLD") == "1"
HOLD_LIMIT_S = 60.0


class _HoldingConsumer(LedgerConsumer):
    """Holds the first `perform_seek` (see the module doc)."""

    held = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.delivered: asyncio.Event | None = None
        self.last_delivered = -1
        forward = self.callback

        async def callback(message: Any) -> None:
            await forward(message)
            if message.topic == TOPIC:
                self.last_delivered = message.offset
                if self.delivered is not None:
                    self.delivered.set()

        self.callback = callback

    async def perform_seek(self) -> None:
        await super().perform_seek()
        if not HOLD or _HoldingConsumer.held:
            return
        _HoldingConsumer.held = True
        (tp,) = [tp for tp in self.assignment() if tp.topic == TOPIC]
        end = (await self.highwaters(tp))[tp]
        self.delivered = asyncio.Event()
        print(f"probe: holding perform_seek until offset {end - 1} is delivered", flush=True)
        async with asyncio.timeout(HOLD_LIMIT_S):
            while self.last_delivered < end - 1:
                await self.delivered.wait()
                self.delivered.clear()
        print(f"probe: offset {self.last_delivered} delivered; seek returns", flush=True)


class _Transport(faust_aiokafka.Transport):
    Consumer = _HoldingConsumer


class ProbeApp(OffsetsApp):
    def _new_transport(self) -> Any:
        return _Transport(self.conf.broker_consumer, self)


def create_app() -> faust.App:
    app = ProbeApp(
        os.environ["PROBE_APP_ID"],
        broker=f"kafka://{os.environ['PROBE_BROKER']}",
        store="memory://",
        topic_partitions=1,
        topic_replication_factor=1,
        topic_disable_leader=True,
        table_standby_replicas=0,
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=0.3,
        broker_session_timeout=6,
        broker_heartbeat_interval=1,
        web_bind="127.0.0.1",
        web_port=int(os.environ["PROBE_WEB_PORT"]),
        datadir=os.environ["PROBE_DATADIR"],
    )
    seen = app.Table("seen", key_type=str, value_type=int, partitions=1)
    source = app.topic(TOPIC, key_serializer="raw", value_serializer="raw")
    handled = app.topic(HANDLED, key_serializer="raw", value_serializer="raw")

    @app.agent(source, name="probe")
    async def probe(stream: faust.StreamT) -> None:
        async for event in records(stream, app.ledger):
            message = event.message
            if event.value == b"slow":
                await app.tables.recovery.completed.wait()  # type: ignore[attr-defined]
            seen[str(message.offset)] = 1  # a changelog to recover: the fetcher runs then
            sent = await handled.send(key=str(message.offset).encode(), value=b"handled")
            await sent  # stored before the record is acked
            account(app.ledger, message, "handled")

    return app


app = create_app()

if __name__ == "__main__":
    app.main()
