"""The supply signal of a pipeline whose gateways report counts: the simulator's model.

In the pipeline a gateway counts the check-ins it receives per attribute set and sends the
counts every ``interval_s`` seconds; the scheduler reads them a moment later. The simulator
sees every check-in, so it counts them per interval the same way and hands each interval's
counts to the scheduler ``delay_s`` after the interval ends: the scheduler plans with the
same, slightly old, signal as in the pipeline.
"""

from __future__ import annotations

import math

import numpy as np

from venn.core.scheduler import Scheduler

SOURCE = "sim"


class ReportFeed:
    """Check-ins counted per interval, delivered to a scheduler as one gateway's reports."""

    def __init__(self, sched: Scheduler, interval_s: float, delay_s: float) -> None:
        if interval_s <= 0 or delay_s < 0:
            raise ValueError("interval_s must be > 0 and delay_s >= 0")
        self.sched = sched
        self.interval_s = interval_s
        self.delay_s = delay_s
        self._slots: list[np.ndarray] = []
        self._times: list[np.ndarray] = []
        self._weights: list[np.ndarray] = []
        self.reports = 0

    def add(self, slots: np.ndarray, times: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Count check-ins (in time order), each as ``weights`` of them (venn.core.pace)."""
        if len(slots):
            self._slots.append(np.asarray(slots, dtype=np.int64))
            self._times.append(np.asarray(times, dtype=np.float64))
            w = np.ones(len(slots)) if weights is None else np.asarray(weights, np.float64)
            self._weights.append(w)

    def deliver(self, now: float) -> None:
        """Hand the scheduler every report due by ``now`` (interval end + delay)."""
        if not self._times:
            return
        step = self.interval_s
        reportable = math.floor((now - self.delay_s) / step) * step  # end of the last due one
        if self._times[0][0] >= reportable:
            return
        slots, times = np.concatenate(self._slots), np.concatenate(self._times)
        weights = np.concatenate(self._weights)
        cut = int(np.searchsorted(times, reportable, side="left"))
        if cut < len(times):
            self._slots, self._times = [slots[cut:]], [times[cut:]]
            self._weights = [weights[cut:]]
        else:
            self._slots, self._times, self._weights = [], [], []
        interval = np.floor(times[:cut] / step).astype(np.int64)
        starts = np.flatnonzero(np.r_[True, interval[1:] != interval[:-1]])
        ends = np.r_[starts[1:], cut]
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            counts = np.bincount(slots[a:b], weights=weights[a:b])
            present = np.flatnonzero(counts)
            due = (int(interval[a]) + 1) * step + self.delay_s
            self.sched.observe_report(SOURCE, present, counts[present], step, due)
            self.reports += 1
