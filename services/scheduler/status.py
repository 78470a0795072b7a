"""The scheduler's status publisher: every few seconds, a snapshot of its plan and supply
(`venn.core.status.SchedulerStatus`) on the compacted topic venn.status, key "plan", for the
job API (`GET /v1/plan`, `GET /v1/devices`, why a job waits) and the dashboard. Readers
never reach into a worker's memory; they read this topic."""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

from venn.broker import topics
from venn.core.status import encode_status, scheduler_status

if TYPE_CHECKING:
    from services.scheduler.publisher import Send
    from services.scheduler.state import SchedulerState

STATUS_KEY = b"plan"
STATUS_INTERVAL_S = 2.0


def worker_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def publish_status(state: SchedulerState, send: Send, now: float) -> bool:
    """Send one snapshot of ``state``'s core; False (nothing sent) before the state loaded."""
    if not state.loaded:
        return False
    core = state.core
    state.supply.report_direct(core, now)
    snapshot = scheduler_status(
        core,
        core.table(now),
        now,
        worker_name(),
        state.config.policy,
        state.supply.mix,
        state.estimates.of(core, now),
    )
    send(topics.STATUS, STATUS_KEY, encode_status(snapshot))
    return True
