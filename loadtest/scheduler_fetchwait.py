"""`python -m loadtest.scheduler_fetchwait worker -l warn`: the scheduler worker with a
shorter consumer fetch wait, to measure what the fix below would gain (bench/ and the
load test use it only when asked to).

Faust hard-codes `fetch_max_wait_ms=1500` for its worker consumer, and Tansu does not
answer a parked fetch when data arrives, so an idle or lightly loaded scheduler reads each
check-in only when its parked fetch expires (hundreds of ms). Apache Kafka answers a
parked fetch as soon as data arrives, so there this wait costs nothing. The wait is taken
from `VENN_SCHEDULER_FETCH_WAIT_MS` (default 10). The real fix belongs in
services/scheduler (a consumer subclass or this same override, set from settings).
"""

from __future__ import annotations

import os
from typing import Any

import aiokafka

FETCH_WAIT_MS = int(os.environ.get("VENN_SCHEDULER_FETCH_WAIT_MS", "10"))
_init = aiokafka.AIOKafkaConsumer.__init__


def _patched_init(self: aiokafka.AIOKafkaConsumer, *args: Any, **kwargs: Any) -> None:
    if "fetch_max_wait_ms" in kwargs:
        kwargs["fetch_max_wait_ms"] = FETCH_WAIT_MS
    _init(self, *args, **kwargs)


aiokafka.AIOKafkaConsumer.__init__ = _patched_init  # type: ignore[method-assign]

if __name__ == "__main__":
    from services.scheduler.app import create_app

    create_app().main()
