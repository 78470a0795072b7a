"""Simulator-side bookkeeping of jobs and rounds (the core keeps only what it decides on)."""

from __future__ import annotations

from bisect import bisect_right, insort
from dataclasses import dataclass, field

import numpy as np

from venn.core.model import JobSpec

ROUND_GAP_S = 0.1  # the next round is requested this long after a round closes
WINDOW_SLACK_S = 80.0  # a task may run this long past its device's window end


@dataclass
class RoundRecord:
    """One round attempt as it happened."""

    job_id: str
    attempt: int
    requested_at: float
    demand: int
    deadline_at: float
    filled_at: float | None = None
    closed_at: float | None = None
    succeeded: bool = False
    assigned: int = 0
    results: int = 0  # successful results received by the close
    failures: int = 0  # tasks that passed their window (+ slack)
    stragglers: int = 0  # successful results that came after the close


class LiveRound:
    """Successful results of the open round, as plain lists (appended per batch).

    ``finish`` is in check-in order. Its sorted copy is made when the round first could
    close (``results_needed`` results), and kept sorted from then on: before that no
    close time exists, and most of a round's results come before it. The results' tiers
    and response times are kept only with ``detail`` (tier matching learns from them).
    """

    __slots__ = ("_sorted", "close_candidate", "detail", "finish", "record", "resp", "tiers")

    def __init__(self, record: RoundRecord, detail: bool = True) -> None:
        self.record = record
        self.detail = detail
        self.finish: list[float] = []
        self.tiers: list[int] = []
        self.resp: list[float] = []  # dispatch -> result, seconds
        self._sorted: list[float] | None = None
        self.close_candidate = float("inf")

    @property
    def count(self) -> int:
        """Successful results so far."""
        return len(self.finish)

    def add(
        self, finish: list[float], tiers: list[int] | None = None, resp: list[float] | None = None
    ) -> None:
        """Add results (``tiers`` and ``resp`` are read only with ``detail``)."""
        if not finish:
            return
        self.finish += finish
        if self.detail:
            assert tiers is not None and resp is not None
            self.tiers += tiers
            self.resp += resp
        ordered = self._sorted
        if ordered is not None:
            if len(finish) <= 8:
                for f in finish:
                    insort(ordered, f)
            else:
                ordered += finish
                ordered.sort()

    def sorted_finish(self) -> list[float]:
        """Finish times, ascending."""
        ordered = self._sorted
        if ordered is None:
            ordered = self._sorted = sorted(self.finish)
        return ordered

    def kth_finish(self, k: int) -> float:
        """Time of the k-th successful result so far (inf if fewer)."""
        if len(self.finish) < k:
            return float("inf")
        return self.sorted_finish()[k - 1]

    def arrived_by(
        self, t: float
    ) -> tuple[int, list[int] | np.ndarray, list[float] | np.ndarray, int]:
        """Results that arrived by ``t``: their number, their tiers and response times in
        arrival order (empty without ``detail``), and the number that arrived later
        (stragglers)."""
        finish = self.finish
        n = len(finish)
        arrived = bisect_right(self.sorted_finish(), t)
        if not self.detail:
            return arrived, [], [], n - arrived
        # Results are added in check-in order, so a stable sort by finish time breaks
        # ties by check-in (numpy's stable sort orders as Python's does; it pays for
        # itself past a few dozen results).
        if n > 64:
            kept_a = np.argsort(np.array(finish), kind="stable")[:arrived]
            tiers_a = np.array(self.tiers, dtype=np.int64)[kept_a]
            resp_a = np.array(self.resp, dtype=np.float64)[kept_a]
            return arrived, tiers_a, resp_a, n - arrived
        kept = sorted(range(n), key=finish.__getitem__)[:arrived]
        tiers = list(map(self.tiers.__getitem__, kept))
        resp = list(map(self.resp.__getitem__, kept))
        return arrived, tiers, resp, n - arrived


def kth_of_union(a: list[float], b: list[float], k: int) -> float:
    """The k-th smallest (1-based) value of two sorted lists together (k <= total)."""
    lo, hi = max(0, k - len(a)), min(k, len(b))
    while lo < hi:  # smallest count t taken from b with b[t] >= a[k - t - 1]
        t = (lo + hi) // 2
        if b[t] < a[k - t - 1]:
            lo = t + 1
        else:
            hi = t
    if lo == 0:
        return a[k - 1]
    if lo == k:
        return b[k - 1]
    return max(a[k - lo - 1], b[lo - 1])


@dataclass
class JobRecord:
    """One job's life in the simulation."""

    spec: JobSpec
    rounds: list[RoundRecord] = field(default_factory=list)
    finished_at: float | None = None
    succeeded_rounds: int = 0

    @property
    def jct(self) -> float | None:
        return None if self.finished_at is None else self.finished_at - self.spec.arrival
