"""Supply measured as rates: the slots of the most recent check-ins, or gateways' counts.

The reference simulator estimates each group's supply from the last 1,000 check-ins;
this window is the same idea with a ring buffer, fed one check-in or a batch at a time
(both give the same contents, which the simulator's fast mode relies on).
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

import numpy as np


class SupplyWindow:
    """Ring buffer of the last ``size`` check-ins (slot id and time)."""

    def __init__(self, size: int = 1000) -> None:
        if size < 1:
            raise ValueError("window size must be >= 1")
        self.size = size
        self._slots = np.zeros(size, dtype=np.int64)
        self._times = np.zeros(size, dtype=np.float64)
        self._count = 0  # total check-ins ever observed

    def observe(self, slot: int, time: float) -> None:
        """Add one check-in."""
        pos = self._count % self.size
        self._slots[pos] = slot
        self._times[pos] = time
        self._count += 1

    def observe_many(self, slots: np.ndarray, times: np.ndarray) -> None:
        """Add check-ins in arrival order (the same result as calling observe for each)."""
        n = len(slots)
        if n == 0:
            return
        size = self.size
        if n >= size:
            slots, times = slots[-size:], times[-size:]
            start = (self._count + n - size) % size
            m = size
        else:
            start = self._count % size
            m = n
        # At most two slices: up to the end of the buffer, then from its start.
        head = min(m, size - start)
        self._slots[start : start + head] = slots[:head]
        self._times[start : start + head] = times[:head]
        if head < m:
            self._slots[: m - head] = slots[head:]
            self._times[: m - head] = times[head:]
        self._count += n

    @property
    def filled(self) -> int:
        return min(self._count, self.size)

    @property
    def total_observed(self) -> int:
        return self._count

    def window_slots(self) -> np.ndarray:
        """Slots of the check-ins in the window (in buffer order, not arrival order)."""
        return self._slots[: self.filled]

    def slot_counts(self, num_slots: int) -> np.ndarray:
        """Check-ins per slot within the window."""
        k = self.filled
        return np.bincount(self._slots[:k], minlength=num_slots)[:num_slots].astype(np.float64)

    def rate_per_s(self) -> float:
        """Check-ins per second over the window (0 when it spans no time)."""
        k = self.filled
        if k < 2:
            return 0.0
        span = float(self._times[:k].max() - self._times[:k].min())
        return (k - 1) / span if span > 0 else 0.0


class ReportedSupply:
    """Supply as gateways count it: each source's reports of the last ``horizon_s`` seconds.

    A gateway answers most check-ins itself and forwards only those that may be assigned,
    so the scheduler cannot count supply from what it reads. Each gateway reports, per
    interval, how many check-ins of each attribute set it received; the mix is the sum of
    the recent reports of every gateway and the rate their total over the time each
    gateway's reports cover. A gateway that stops reporting drops out after ``horizon_s``.
    """

    def __init__(self, horizon_s: float = 10.0) -> None:
        if horizon_s <= 0:
            raise ValueError("horizon_s must be > 0")
        self.horizon_s = horizon_s
        self._reports: dict[str, deque[_Report]] = {}
        self._count = 0
        self._slots = 0

    def observe_report(
        self, source: str, slots: np.ndarray, counts: np.ndarray, interval_s: float, now: float
    ) -> None:
        """Add one report: ``counts[i]`` check-ins of slot ``slots[i]`` over ``interval_s``."""
        slots = np.asarray(slots, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.float64)
        self._reports.setdefault(source, deque()).append(_Report(now, interval_s, slots, counts))
        self._count += int(counts.sum())
        if len(slots):
            self._slots = max(self._slots, int(slots.max()) + 1)
        cutoff = now - self.horizon_s
        for name in list(self._reports):
            kept = self._reports[name]
            while kept and kept[0].time <= cutoff:
                kept.popleft()
            if not kept:
                del self._reports[name]

    @property
    def total_observed(self) -> int:
        return self._count

    def slot_counts(self, num_slots: int) -> np.ndarray:
        """Check-ins per slot in the reports held."""
        out = np.zeros(max(num_slots, self._slots), dtype=np.float64)
        for kept in self._reports.values():
            for r in kept:
                np.add.at(out, r.slots, r.counts)
        return out[:num_slots]

    def rate_per_s(self) -> float:
        """Check-ins per second: per source, its counts over the time its reports cover."""
        rate = 0.0
        for kept in self._reports.values():
            span = sum(r.interval_s for r in kept)
            if span > 0:
                rate += sum(float(r.counts.sum()) for r in kept) / span
        return rate


class _Report(NamedTuple):
    time: float
    interval_s: float
    slots: np.ndarray
    counts: np.ndarray


Supply = SupplyWindow | ReportedSupply
"""Where a scheduler's supply mix comes from: the check-ins it reads, or gateways' reports."""
