"""The scheduler's status publisher: every few seconds, a snapshot of its plan and supply
(`venn.core.status.SchedulerStatus`) on the compacted topic venn.status, key "plan", for the
job API (`GET /v1/plan`, `GET /v1/devices`, why a job waits) and the dashboard. Readers
never reach into a worker's memory; they read this topic."""

from __future__ import annotations

import math
import os
import socket
import time
from typing import TYPE_CHECKING

from venn.broker import topics
from venn.core.estimate import scheduler_estimates
from venn.core.scheduler import Scheduler
from venn.core.status import encode_status, scheduler_status

if TYPE_CHECKING:
    from services.scheduler.publisher import Send
    from services.scheduler.state import SchedulerState

STATUS_KEY = b"plan"
STATUS_INTERVAL_S = 2.0
ESTIMATE_SHARE = 0.05
"""Most of the deciding worker's time the completion estimates may take: they are made
again once the time since the last ones is 1/ESTIMATE_SHARE times what those took (every
snapshot with tens of jobs; every ~20 s with a thousand, whose estimate takes ~1 s)."""


def worker_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Estimates:
    """The completion estimates the snapshots carry, made again as ESTIMATE_SHARE allows."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self.made_at = -math.inf
        self.cost_s = 0.0

    def of(self, core: Scheduler, now: float) -> dict[str, float]:
        if now - self.made_at >= self.cost_s / ESTIMATE_SHARE:
            started = time.perf_counter()
            self.values = scheduler_estimates(core, now)
            self.cost_s = time.perf_counter() - started
            self.made_at = now
        return self.values


def publish_status(state: SchedulerState, send: Send, now: float) -> bool:
    """Send one snapshot of ``state``'s core; False (nothing sent) before the state loaded."""
    if not state.loaded:
        return False
    state.report_direct(now)
    core = state.core
    snapshot = scheduler_status(
        core,
        core.table(now),
        now,
        worker_name(),
        state.config.policy,
        state.mix,
        state.estimates.of(core, now),
    )
    send(topics.STATUS, STATUS_KEY, encode_status(snapshot))
    return True
