"""Simulator-side bookkeeping of jobs and rounds (the core keeps only what it decides on)."""

from __future__ import annotations

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


@dataclass
class LiveRound:
    """Successful results of the open round, as arrays appended per batch."""

    record: RoundRecord
    finish: list[np.ndarray] = field(default_factory=list)
    tiers: list[np.ndarray] = field(default_factory=list)
    resp: list[np.ndarray] = field(default_factory=list)  # dispatch -> result, seconds
    seq: list[np.ndarray] = field(default_factory=list)  # global check-in number (ties)
    close_candidate: float = float("inf")
    count: int = 0  # successful results so far

    def add(self, finish: np.ndarray, tiers: np.ndarray, resp: np.ndarray, seq: np.ndarray) -> None:
        if len(finish):
            self.count += len(finish)
            self.finish.append(finish)
            self.tiers.append(tiers)
            self.resp.append(resp)
            self.seq.append(seq)

    def kth_finish(self, k: int) -> float:
        """Time of the k-th successful result so far (inf if fewer)."""
        if self.count < k:
            return float("inf")
        if len(self.finish) > 1:
            self.finish = [np.concatenate(self.finish)]
            self.tiers = [np.concatenate(self.tiers)]
            self.resp = [np.concatenate(self.resp)]
            self.seq = [np.concatenate(self.seq)]
        return float(np.partition(self.finish[0], k - 1)[k - 1])

    def arrived_by(self, t: float) -> tuple[np.ndarray, np.ndarray, int]:
        """(tiers, response times) of results that arrived by ``t`` in arrival order, and
        the number that arrived later (stragglers)."""
        if not self.finish:
            return np.empty(0, dtype=np.int64), np.empty(0), 0
        finish = np.concatenate(self.finish)
        order = np.lexsort((np.concatenate(self.seq), finish))
        finish = finish[order]
        keep = finish <= t
        tiers = np.concatenate(self.tiers)[order][keep]
        resp = np.concatenate(self.resp)[order][keep]
        return tiers, resp, int((~keep).sum())


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
