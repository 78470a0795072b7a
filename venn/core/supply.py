"""Supply measured as rates: the slots of the most recent check-ins.

The reference simulator estimates each group's supply from the last 1,000 check-ins;
this window is the same idea with a ring buffer, fed one check-in or a batch at a time
(both give the same contents, which the simulator's fast mode relies on).
"""

from __future__ import annotations

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
