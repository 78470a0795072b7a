"""Simulator-side bookkeeping of jobs and rounds (the core keeps only what it decides on)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from venn.core.model import JobSpec
from venn.sim.kernels import (
    arrivals,
    dispatched_after,
    ensure_sorted,
    insert_sorted,
    kth_finish,
    merge_sorted,
)

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
    # Of the stragglers of a round that succeeded, those dispatched after the last device
    # whose result it counted: it would have closed at the same time without them.
    surplus: int = 0


class RoundStore:
    """Successful results of every job's open round, one row per job idx (a job has at
    most one open round): finish times, tiers and response times in check-in order, and
    the finish times sorted (``is_sorted``) once the round could close (before that no
    close time exists). The fast mode's compiled steps (``venn.sim.kernels``) write it
    directly."""

    def __init__(self, num_jobs: int, capacity: int) -> None:
        rows, cap = max(1, num_jobs), max(1, capacity)
        self.finish = np.zeros((rows, cap), dtype=np.float64)
        self.tiers = np.zeros((rows, cap), dtype=np.int64)
        self.resp = np.zeros((rows, cap), dtype=np.float64)
        self.ordered = np.zeros((rows, cap), dtype=np.float64)
        self.is_sorted = np.zeros(rows, dtype=np.bool_)
        self.count = np.zeros(rows, dtype=np.int64)

    @property
    def columns(self) -> tuple[np.ndarray, ...]:
        """The arrays in ``venn.sim.kernels.commit``'s order."""
        return (self.finish, self.tiers, self.resp, self.ordered, self.is_sorted, self.count)

    def reserve(self, job: int, size: int) -> None:
        """Room for row ``job`` and ``size`` results in it."""
        rows, cap = self.finish.shape
        if job < rows and size <= cap:
            return
        new_rows, new_cap = max(rows, job + 1), max(cap, 2 * size)
        for name in ("finish", "tiers", "resp", "ordered"):
            old = getattr(self, name)
            grown = np.zeros((new_rows, new_cap), dtype=old.dtype)
            grown[:rows, :cap] = old
            setattr(self, name, grown)
        for name in ("is_sorted", "count"):
            old = getattr(self, name)
            grown = np.zeros(new_rows, dtype=old.dtype)
            grown[:rows] = old
            setattr(self, name, grown)


class LiveRound:
    """The open round of job ``idx``: its record, and its results in a ``RoundStore``
    row. The results' tiers and response times are read only with ``detail`` (tier
    matching learns from them)."""

    __slots__ = ("close_candidate", "detail", "idx", "record", "store")

    def __init__(
        self, record: RoundRecord, store: RoundStore, idx: int, detail: bool = True
    ) -> None:
        self.record = record
        self.store = store
        self.idx = idx
        self.detail = detail
        self.close_candidate = float("inf")
        store.reserve(idx, record.demand)
        store.count[idx] = 0
        store.is_sorted[idx] = False

    @property
    def count(self) -> int:
        """Successful results so far."""
        return int(self.store.count[self.idx])

    def add(
        self, finish: list[float], tiers: list[int] | None = None, resp: list[float] | None = None
    ) -> None:
        """Add results in check-in order (``tiers`` and ``resp`` are read only with
        ``detail``)."""
        m = len(finish)
        if not m:
            return
        store, idx = self.store, self.idx
        n = int(store.count[idx])
        if n + m > store.finish.shape[1]:
            store.reserve(idx, n + m)
        if m == 1:  # the event mode's case: one result at a time
            store.finish[idx, n] = finish[0]
        else:
            store.finish[idx, n : n + m] = finish
        if self.detail:
            assert tiers is not None and resp is not None
            store.tiers[idx, n : n + m] = tiers
            store.resp[idx, n : n + m] = resp
        if store.is_sorted[idx]:
            if m == 1:
                insert_sorted(store.ordered[idx], n, finish[0])
            else:
                merge_sorted(store.ordered[idx], n, np.sort(np.array(finish, dtype=np.float64)))
        store.count[idx] = n + m

    def sorted_finish(self) -> np.ndarray:
        """Finish times, ascending."""
        store, idx = self.store, self.idx
        ensure_sorted(store.finish, store.ordered, store.is_sorted, store.count, idx)
        return store.ordered[idx, : store.count[idx]]

    def kth_finish(self, k: int) -> float:
        """Time of the k-th successful result so far (inf if fewer)."""
        store = self.store
        return kth_finish(  # type: ignore[no-any-return]
            store.finish, store.ordered, store.is_sorted, store.count, self.idx, k
        )

    def arrived_by(self, t: float) -> tuple[int, np.ndarray, np.ndarray, int]:
        """Results that arrived by ``t``: their number, their tiers and response times in
        arrival order (empty without ``detail``), and the number that arrived later
        (stragglers)."""
        store, idx = self.store, self.idx
        arrived, tiers, resp = arrivals(
            store.finish,
            store.tiers,
            store.resp,
            store.ordered,
            store.is_sorted,
            store.count,
            idx,
            t,
            self.detail,
        )
        return arrived, tiers, resp, int(store.count[idx]) - arrived

    def dispatched_after_counted(self, t: float) -> int:
        """Results that arrived after ``t`` from devices dispatched after the last device
        whose result arrived by ``t``."""
        store = self.store
        return int(dispatched_after(store.finish, store.count, self.idx, t))


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
