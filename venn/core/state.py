"""What the core tracks of one job, and the deterministic per-round draw.

``JobState`` is read by the policies (their order weights), the mechanism
(``venn.core.scheduler``) and the snapshots (``venn.core.snapshot``); only the mechanism
and snapshot restoration write it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from venn.core.model import JobSpec
from venn.core.round_cursor import RoundCursor

_MASK64 = (1 << 64) - 1


def splitmix(*parts: int) -> int:
    """A tiny deterministic hash (splitmix64) for per-round random draws."""
    x = 0x9E3779B97F4A7C15
    for p in parts:
        x = (x ^ (p & _MASK64)) * 0xBF58476D1CE4E5B9 & _MASK64
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK64
        x ^= x >> 31
    return x


def mean(values: deque[float]) -> float:
    """``float(np.mean(values))`` (the same sum and division), without its overhead."""
    return float(np.add.reduce(np.array(values, dtype=np.float64))) / len(values)


@dataclass
class JobState:
    """Everything the core tracks of one job."""

    spec: JobSpec
    idx: int
    group: int
    registered_at: float
    rounds_done: int = 0
    attempts: int = 0
    """Attempts closed (each close counts once, whether or not its round was open here)."""
    rounds: RoundCursor = field(default_factory=RoundCursor)
    """What the job's round events said (their replay rules)."""
    round_index: int = -1
    round_open: bool = False
    """``round_index`` is the attempt this core assigns devices to while ``round_open``."""
    demand: int = 0
    remaining: int = 0
    requested_at: float = 0.0
    filled_at: float | None = None
    tier: int | None = None  # capacity tier the current round is restricted to
    held_back: int = 0
    """Devices of the open round's demand not offered yet (``Scheduler``'s dispatch
    margin): offered only if the round reaches its margin with little time left."""
    assigned: int = 0  # devices assigned to the current round
    service: int = 0  # devices assigned over the job's life
    devices: set[Hashable] = field(default_factory=set)
    sched_delays: deque[float] = field(default_factory=lambda: deque(maxlen=10))
    response_times: deque[float] = field(default_factory=lambda: deque(maxlen=10))

    @property
    def finished(self) -> bool:
        return self.rounds_done >= self.spec.rounds

    @property
    def wants_devices(self) -> bool:
        """Its round is open and still needs devices."""
        return self.round_open and self.remaining > 0
