"""A Faust worker holding the scheduler's Faust store, for the store conformance suite
(tests/broker/test_store_conformance.py).

`python -m tests.broker.store_probe worker -l info` with STORE_* variables (see
`create_app`). The store is `FaustStore.create`, as the scheduler builds it (the same
tables and memory store), on an app with the scheduler's assignor: the probe is its
group's decider. POST /ops applies store operations (`apply_op`) in order and answers once
the store says they are durable; GET /rows answers 503 until this worker decides with its
tables restored, then every row the store hands back.
"""

from __future__ import annotations

import os
from typing import Any

import faust
import msgspec
from faust.web import Request, Response, View

from services.scheduler.store import SchedulerStore
from services.scheduler.tables import FaustStore
from venn.broker.faust_adapter import STANDBY_MEMORY_STORE, OneDeciderAssignor, follow_decider

Op = dict[str, Any]
"""{"op": "put_job" | "put_round", "key": str, "row": str} or
{"op": "delete_rounds", "keys": [str, ...]}: keys and rows as the text of their bytes."""


def apply_op(store: SchedulerStore, op: Op) -> None:
    kind = op["op"]
    if kind == "put_job":
        store.put_job(op["key"].encode(), op["row"].encode())
    elif kind == "put_round":
        store.put_round(op["key"].encode(), op["row"].encode())
    elif kind == "delete_rounds":
        store.delete_rounds([key.encode() for key in op["keys"]])
    else:
        raise ValueError(f"unknown store operation {kind!r}")


def text_rows(rows: list[tuple[object, object]]) -> list[list[str]]:
    return [
        [
            k.decode() if isinstance(k, bytes) else repr(k),
            v.decode() if isinstance(v, bytes) else repr(v),
        ]
        for k, v in rows
    ]


def create_app() -> faust.App:
    app = faust.App(
        os.environ["STORE_APP_ID"],
        broker=f"kafka://{os.environ['STORE_BROKER']}",
        store=STANDBY_MEMORY_STORE,
        topic_partitions=int(os.environ["STORE_PARTITIONS"]),
        topic_replication_factor=1,
        topic_disable_leader=True,
        PartitionAssignor=OneDeciderAssignor,
        table_standby_replicas=0,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=6,
        broker_heartbeat_interval=1,
        web_bind="127.0.0.1",
        web_port=int(os.environ["STORE_WEB_PORT"]),
        datadir=os.environ["STORE_DATADIR"],
    )
    store = FaustStore.create(app, int(os.environ["STORE_PARTITIONS"]))
    deciding: list[bool] = [False]

    def start() -> None:
        deciding[0] = True

    async def stop() -> None:
        deciding[0] = False

    follow_decider(app, start, stop)

    @app.page("/ops")
    class Ops(View):  # type: ignore[misc]
        async def post(self, request: Request) -> Response:
            if not deciding[0]:
                return self.json({"ready": False}, status=503)
            for op in msgspec.json.decode(await request.read()):
                apply_op(store, op)
            await store.durable()
            return self.json({"applied": True})

    @app.page("/rows")
    class Rows(View):  # type: ignore[misc]
        async def get(self, request: Request) -> Response:
            if not deciding[0]:
                return self.json({"ready": False}, status=503)
            body = {
                "ready": True,
                "jobs": text_rows(store.job_rows()),
                "rounds": text_rows(store.round_rows()),
            }
            return self.bytes(msgspec.json.encode(body), content_type="application/json")

    return app


if __name__ == "__main__":
    create_app().main()
