"""The completion estimates a scheduler's status snapshots carry (`Estimates`), made again as
their share of the deciding worker's time allows."""

from __future__ import annotations

import math
import time

from venn.core.estimate import Band, scheduler_bands
from venn.core.scheduler import Scheduler

ESTIMATE_SHARE = 0.05
"""Most of the deciding worker's time the completion estimates may take: they are made
again once the time since the last ones is 1/ESTIMATE_SHARE times what those took (every
snapshot with tens of jobs; every ~20 s with a thousand, whose estimate takes ~1 s)."""


class Estimates:
    """The completion estimates (P50 / P90 bands) the snapshots carry, made again as
    ESTIMATE_SHARE allows."""

    def __init__(self) -> None:
        self.values: dict[str, Band] = {}
        self.made_at = -math.inf
        self.cost_s = 0.0

    def of(self, core: Scheduler, now: float) -> dict[str, Band]:
        if now - self.made_at >= self.cost_s / ESTIMATE_SHARE:
            started = time.perf_counter()
            self.values = scheduler_bands(core, now)
            self.cost_s = time.perf_counter() - started
            self.made_at = now
        return self.values
