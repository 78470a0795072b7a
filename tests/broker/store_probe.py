"""A Faust worker holding the scheduler's Faust store, for the store conformance suite
(tests/broker/test_store_conformance.py).

`python -m tests.broker.store_probe worker -l info` with STORE_* variables (see
`create_app`). The store is `FaustStore.create`, as the scheduler builds it (same tables,
codec and memory store). One agent reads STORE_COMMANDS: each record is one store operation
(`apply_op`), applied on the record's partition, which is the partition of the rows it
writes (the scheduler's rule: one job's rows on the job's partition). GET /rows answers
503 until table recovery completed, then the rows the store hands back and the sequence
numbers of the commands this process handled.
"""

from __future__ import annotations

import os
from typing import Any

import faust
import msgspec
from faust.web import Request, Response, View

from services.scheduler.store import SchedulerStore
from services.scheduler.tables import FaustStore
from venn.broker.faust_adapter import (
    STANDBY_MEMORY_STORE,
    OffsetsApp,
    account,
    owned_partitions,
    records,
    recovered,
)

Op = dict[str, Any]
"""{"op": "put_job" | "put_round", "key": str, "row": dict} or
{"op": "delete_rounds", "keys": [str, ...]}; each with "partition" and "seq"."""


def apply_op(store: SchedulerStore, op: Op) -> None:
    kind = op["op"]
    if kind == "put_job":
        store.put_job(op["key"], op["row"])
    elif kind == "put_round":
        store.put_round(op["key"], op["row"])
    elif kind == "delete_rounds":
        store.delete_rounds(op["keys"])
    else:
        raise ValueError(f"unknown store operation {kind!r}")


def create_app() -> faust.App:
    commands_topic = os.environ["STORE_COMMANDS"]
    partitions = int(os.environ["STORE_PARTITIONS"])
    app = OffsetsApp(
        os.environ["STORE_APP_ID"],
        broker=f"kafka://{os.environ['STORE_BROKER']}",
        store=STANDBY_MEMORY_STORE,
        topic_partitions=partitions,
        topic_replication_factor=1,
        topic_disable_leader=True,
        table_standby_replicas=0,
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=0.3,
        broker_session_timeout=6,
        broker_heartbeat_interval=1,
        web_bind="127.0.0.1",
        web_port=int(os.environ["STORE_WEB_PORT"]),
        datadir=os.environ["STORE_DATADIR"],
    )
    store = FaustStore.create(app, partitions, owned=lambda: owned_partitions(app, commands_topic))
    commands = app.topic(commands_topic, key_serializer="raw", value_serializer="raw")
    handled: list[int] = []

    @app.agent(commands, name="store-commands")
    async def apply(stream: faust.StreamT) -> None:
        async for event in records(stream, app.ledger):
            op = msgspec.json.decode(event.value)
            apply_op(store, op)
            handled.append(op["seq"])
            account(app.ledger, event.message, "handled")

    @app.page("/rows")
    class Rows(View):  # type: ignore[misc]
        async def get(self, request: Request) -> Response:
            if not recovered(app):
                return self.json({"ready": False}, status=503)
            body = {
                "ready": True,
                "handled": handled,
                "jobs": store.job_rows(),
                "rounds": store.round_rows(),
            }
            return self.bytes(msgspec.json.encode(body), content_type="application/json")

    return app


if __name__ == "__main__":
    create_app().main()
