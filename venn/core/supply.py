"""Supply measured as rates: the slots of the most recent check-ins, or gateways' counts.

The reference simulator estimates each group's supply from the last 1,000 check-ins;
this window is the same idea with a ring buffer, fed one check-in or a batch at a time
(both give the same contents, which the simulator's fast mode relies on).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np


class SupplyWindow:
    """Ring buffer of the last ``size`` check-ins (slot id and time, and a weight: the
    check-ins one stands for at the base pace of ``venn.core.pace``; 1 unless given)."""

    def __init__(self, size: int = 1000) -> None:
        if size < 1:
            raise ValueError("window size must be >= 1")
        self.size = size
        self._slots = np.zeros(size, dtype=np.int64)
        self._times = np.zeros(size, dtype=np.float64)
        self._weights: np.ndarray | None = None  # made at the first weight other than 1
        self._count = 0  # total check-ins ever observed

    def observe(self, slot: int, time: float, weight: float = 1.0) -> None:
        """Add one check-in (standing for ``weight`` at the base pace)."""
        pos = self._count % self.size
        self._slots[pos] = slot
        self._times[pos] = time
        if weight != 1.0 and self._weights is None:
            self._weights = np.ones(self.size, dtype=np.float64)
        if self._weights is not None:
            self._weights[pos] = weight
        self._count += 1

    def observe_many(self, slots: np.ndarray, times: np.ndarray) -> None:
        """Add check-ins in arrival order (the same result as calling observe for each)."""
        n = len(slots)
        if n == 0:
            return
        if self._weights is not None:  # unweighted check-ins among weighted ones
            for slot, time in zip(slots.tolist(), times.tolist(), strict=True):
                self.observe(slot, time)
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
        weights = None if self._weights is None else self._weights[:k]
        counts = np.bincount(self._slots[:k], weights=weights, minlength=num_slots)
        return counts[:num_slots].astype(np.float64)

    def rate_per_s(self) -> float:
        """Check-ins per second over the window (0 when it spans no time), weighted."""
        k = self.filled
        if k < 2:
            return 0.0
        span = float(self._times[:k].max() - self._times[:k].min())
        if span <= 0:
            return 0.0
        mean = 1.0 if self._weights is None else float(self._weights[:k].mean())
        return (k - 1) * mean / span


SOURCE_STALE_INTERVALS = 3.0
"""A gateway whose last report is older than this many of its report intervals is gone: its
rate no longer counts, nor does it count as a live gateway."""


class ReportedSupply:
    """Supply as gateways count it: the most recent reports holding ``window`` check-ins.

    A gateway answers most check-ins itself and forwards only those that may be assigned,
    so the scheduler cannot count supply from what it reads. Each gateway reports, per
    interval, how many check-ins of each attribute set it received. The mix is that of the
    most recent reports (of every gateway) that together hold at least ``window`` check-ins:
    the supply window's estimate at a report's granularity. The rate adds each live
    gateway's latest report (its count over its interval): with many gateways one report
    can hold the whole window, so the window's reports alone would count one gateway's rate.
    """

    def __init__(self, window: int = 1000) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        self.window = window
        self._reports: deque[_Report] = deque()
        self._held = 0.0
        self._count = 0
        self._latest: dict[str, _Report] = {}
        self._now = -np.inf

    def observe_report(
        self, source: str, slots: np.ndarray, counts: np.ndarray, interval_s: float, now: float
    ) -> None:
        """Add one report: ``counts[i]`` check-ins of slot ``slots[i]`` over ``interval_s``."""
        report = _Report(
            source, now, interval_s, np.asarray(slots, np.int64), np.asarray(counts, np.float64)
        )
        self._reports.append(report)
        self._latest[source] = report
        self._now = max(self._now, now)
        self._held += report.total
        self._count += int(report.total)
        reports = self._reports
        while len(reports) > 1 and self._held - reports[0].total >= self.window:
            self._held -= reports.popleft().total

    @property
    def total_observed(self) -> int:
        return self._count

    def slot_counts(self, num_slots: int) -> np.ndarray:
        """Check-ins per slot in the reports held."""
        size = max([num_slots, *(int(r.slots.max()) + 1 for r in self._reports if len(r.slots))])
        out = np.zeros(size, dtype=np.float64)
        for r in self._reports:
            np.add.at(out, r.slots, r.counts)
        return out[:num_slots]

    def _live(self) -> list[_Report]:
        """The latest report of each source not gone (dropping those that are)."""
        gone = [
            source
            for source, r in self._latest.items()
            if self._now - r.time > SOURCE_STALE_INTERVALS * max(r.interval_s, 1.0)
        ]
        for source in gone:
            del self._latest[source]
        return list(self._latest.values())

    def rate_per_s(self) -> float:
        """Check-ins per second: the sum over live sources of their latest report's rate."""
        return sum(r.total / r.interval_s for r in self._live() if r.interval_s > 0)

    def sources(self) -> int:
        """Live sources: gateways (or parts of a report) heard within their staleness."""
        return len(self._live())


class SlotCounts:
    """Check-ins per slot since the last drain: a report a scheduler makes of the check-ins
    it reads that no gateway counted."""

    def __init__(self, since: float) -> None:
        self.since = since
        self._parts: list[np.ndarray] = []

    def add(self, slots: np.ndarray) -> None:
        self._parts.append(slots)

    def drain(self, now: float) -> tuple[np.ndarray, np.ndarray, float]:
        """(slots, their counts, seconds covered) since the last drain, and reset."""
        interval = max(now - self.since, 1e-3)
        self.since = now
        if not self._parts:
            return np.zeros(0, dtype=np.int64), np.zeros(0), interval
        counts = np.bincount(np.concatenate(self._parts))
        self._parts = []
        found = np.flatnonzero(counts)
        return found, counts[found].astype(np.float64), interval


class _Report(NamedTuple):
    source: str
    time: float
    interval_s: float
    slots: np.ndarray
    counts: np.ndarray

    @property
    def total(self) -> float:
        return float(self.counts.sum())


Supply = SupplyWindow | ReportedSupply
"""Where a scheduler's supply mix comes from: the check-ins it reads, or gateways' reports."""


class AttributeMix:
    """The attribute sets of the most recent check-ins, as devices reported them: what a
    new requirement is judged against (the scheduler's slots keep only projections onto the
    thresholds of the jobs it has seen, which say nothing of an attribute no job tested).
    Holds the most recent counts that together hold at least ``window`` check-ins, so at
    most ``window`` distinct sets plus one report's."""

    def __init__(self, window: int = 1000) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        self.window = window
        self._entries: deque[tuple[tuple[tuple[str, float], ...], int]] = deque()
        self._held = 0

    def observe(self, attrs: Mapping[str, float], count: int = 1) -> None:
        """Add ``count`` check-ins of one attribute set."""
        if count <= 0:
            return
        self._entries.append((tuple(sorted(attrs.items())), count))
        self._held += count
        entries = self._entries
        while len(entries) > 1 and self._held - entries[0][1] >= self.window:
            self._held -= entries.popleft()[1]

    def counts(self) -> list[tuple[dict[str, float], int]]:
        """Each attribute set held and its check-ins."""
        merged: dict[tuple[tuple[str, float], ...], int] = {}
        for key, n in self._entries:
            merged[key] = merged.get(key, 0) + n
        return [(dict(key), n) for key, n in merged.items()]
