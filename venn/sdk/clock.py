"""Trace time on the wall clock: an emulated fleet and its coordinators share one."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TraceClock:
    """``trace = origin + (wall - epoch) * speedup``.

    Processes that must agree on trace time (device fleet, coordinators) are given the
    same ``epoch`` (a ``time.time()`` value) and ``speedup``.
    """

    speedup: float = 1.0
    epoch: float = field(default_factory=time.time)
    origin: float = 0.0

    def __post_init__(self) -> None:
        if self.speedup <= 0:
            raise ValueError("speedup must be > 0")

    def now(self) -> float:
        """Current trace time (seconds)."""
        return self.origin + (time.time() - self.epoch) * self.speedup

    def trace_at(self, wall_time: float) -> float:
        """The trace time at wall-clock time ``wall_time`` (``time.time()`` scale)."""
        return self.origin + (wall_time - self.epoch) * self.speedup

    def wall_at(self, trace_time: float) -> float:
        """The wall-clock time (``time.time()`` scale) at which ``trace_time`` comes."""
        return self.epoch + (trace_time - self.origin) / self.speedup

    def wall_seconds(self, trace_seconds: float) -> float:
        """A trace duration in wall seconds."""
        return trace_seconds / self.speedup

    async def sleep_until(self, trace_time: float) -> None:
        """Sleep until ``trace_time`` (returns at once if it has passed)."""
        delay = self.wall_at(trace_time) - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
