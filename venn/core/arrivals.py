"""Jobs expected to arrive later: an arrival model learned from the arrivals seen.

A completion estimate made from the live state alone misses the jobs that arrive later
and go first (under `venn`'s least-remaining-work order, every shorter one).
``ArrivalModel`` draws scenarios of those arrivals from the history the scheduler has
seen: arrival times and each job's shape (requirement, demand, rounds, deadline).

Arrivals come in *bursts*: runs of arrivals no gap in which is longer than
``BURST_GAP`` times the median gap. In a scenario the current burst goes on

- at its own rate so far (arrivals after the first over the time since the first), as a
  Poisson process;
- for as many more arrivals as a past burst that was at least this long had left
  (drawn among them), or, with no such past burst, for a time drawn from the Copernican
  law of a process of unknown length seen for time T: P(more than x) = T / (T + x), so
  the median is T, the 90th percentile 9 T (J. R. Gott, 1993);

and every arrival has the shape of a job drawn from the history (a bootstrap of the mix
seen). A scheduler that has run for a while has past bursts (a day's submissions); one
that has seen only the current burst falls back to the Copernican law, which knows
nothing of the future beyond how long the burst has lasted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from venn.core.model import JobSpec, Requirement

BURST_GAP = 20.0
"""A gap this many times the median gap between arrivals ends a burst."""
MAX_ARRIVALS = 500
"""Arrivals of one scenario at most (the Copernican law's tail is unbounded)."""


@dataclass(frozen=True)
class Arrival:
    """A job as it arrived: when, and the shape a scenario copies."""

    time: float
    requirement: Requirement
    demand: int
    rounds: int
    needed: int
    deadline_s: float

    @classmethod
    def of(cls, spec: JobSpec, time: float) -> Arrival:
        return cls(
            time, spec.requirement, spec.demand, spec.rounds, spec.results_needed, spec.deadline
        )


def bursts(times: Sequence[float], gap_factor: float = BURST_GAP) -> list[list[float]]:
    """Arrival times (ascending) cut into bursts at gaps longer than ``gap_factor`` times
    the median gap."""
    if not times:
        return []
    gaps = np.diff(times)
    cut = gap_factor * float(np.median(gaps)) if len(gaps) else math.inf
    out = [[times[0]]]
    for prev, t in pairwise(times):
        if t - prev > cut:
            out.append([t])
        else:
            out[-1].append(t)
    return out


class ArrivalModel:
    """Scenarios of the arrivals after ``now``, from ``history`` (this scheduler's
    arrivals) and ``prior`` (arrivals it saw before, e.g. earlier runs: their bursts tell
    how long a burst lasts)."""

    def __init__(self, history: Sequence[Arrival], prior: Sequence[Arrival] = ()) -> None:
        self.history = sorted(history, key=lambda a: a.time)
        times = [a.time for a in self.history]
        self.current = bursts(times)[-1] if times else []
        gaps = np.diff(times)
        self.burst_gap = BURST_GAP * float(np.median(gaps)) if len(gaps) else math.inf
        self.past_sizes = [len(b) for b in bursts(sorted(a.time for a in prior))]
        if len(self.history) > len(self.current):  # finished bursts of this history
            self.past_sizes += [len(b) for b in bursts(times)[:-1]]
        self.mix = [*prior, *self.history]

    @property
    def rate_per_s(self) -> float:
        """The current burst's arrival rate (0 before its second arrival)."""
        span = self.current[-1] - self.current[0] if self.current else 0.0
        return (len(self.current) - 1) / span if span > 0 else 0.0

    def _more(self, now: float, rng: np.random.Generator) -> tuple[int | None, float]:
        """(arrivals left, or None: unbounded; time left) of the current burst."""
        seen = len(self.current)
        longer = [n for n in self.past_sizes if n >= seen]
        if longer:
            return int(longer[int(rng.integers(len(longer)))]) - seen, math.inf
        span = now - self.current[0]
        u = float(rng.random())
        return None, span * u / (1.0 - u) if u < 1.0 else math.inf

    def scenario(self, now: float, rng: np.random.Generator) -> list[Arrival]:
        """One draw of the arrivals after ``now`` (ascending), shaped as jobs of the mix."""
        rate = self.rate_per_s
        if rate <= 0 or not self.mix or now - self.current[-1] > self.burst_gap:
            return []  # no burst seen, or the last one ended
        count, span = self._more(now, rng)
        out: list[Arrival] = []
        t = now
        while len(out) < (MAX_ARRIVALS if count is None else count):
            t += float(rng.exponential(1.0 / rate))
            if t > now + span:
                break
            shape = self.mix[int(rng.integers(len(self.mix)))]
            out.append(
                Arrival(
                    t, shape.requirement, shape.demand, shape.rounds, shape.needed, shape.deadline_s
                )
            )
        return out
