"""Resource-aware device-to-job matching (Algorithm 2 of the paper).

Devices fall into V capacity tiers (equal-count quantiles of a speed proxy). Restricting a
round to tier u multiplies its scheduling delay by about V and its response time by
g_u = p95(tier u) / p95(fleet). With c = T_resp / T_sched from the job's earlier rounds,
restricting pays off iff ``V + g_u * c < 1 + c``. The tiers themselves are
``venn.core.capacity.TierModel``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def p95(values: np.ndarray) -> float:
    """``np.percentile(values, 95)`` (linear), by partial sort: this runs at every round."""
    pos = 0.95 * (len(values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    part = np.partition(values, [lo, hi])
    return float(part[lo] + (part[hi] - part[lo]) * (pos - lo))


class TailTracker:
    """95th-percentile response time per tier and for the fleet, from closed rounds."""

    MIN_SAMPLES = 20

    def __init__(self, num_tiers: int, window: int = 2000) -> None:
        self.num_tiers = num_tiers
        self.window = window
        self._samples: list[np.ndarray] = [np.empty(0) for _ in range(num_tiers)]
        # Computed on demand and kept until the next record: the fleet p95 and each
        # tier's ratio (a request asks for one tier).
        self._fleet: float | None = None
        self._ratios: dict[int, float | None] = {}

    def record(
        self, tiers: Sequence[int] | np.ndarray, seconds: Sequence[float] | np.ndarray
    ) -> None:
        """Add response times of one round (tier of each responding device)."""
        if len(seconds) == 0:
            return
        if isinstance(tiers, list) and isinstance(seconds, list):
            # Plain lists (the simulator's case, a few hundred values): split in Python.
            by_tier: list[list[float]] = [[] for _ in range(self.num_tiers)]
            for u, x in zip(tiers, seconds, strict=True):
                by_tier[u].append(x)
            parts = [np.array(b, dtype=np.float64) for b in by_tier]
        else:
            tiers_a = np.asarray(tiers, dtype=np.int64)
            secs = np.asarray(seconds, dtype=np.float64)
            parts = [secs[tiers_a == u] for u in range(self.num_tiers)]
        for u, picked in enumerate(parts):
            if len(picked):
                self._samples[u] = np.concatenate([self._samples[u], picked])[-self.window :]
        self._fleet = None
        self._ratios = {}

    def _ratio(self, tier: int) -> float | None:
        fleet = self._fleet
        if fleet is None:
            every = np.concatenate(self._samples)
            fleet = self._fleet = p95(every) if len(every) else 0.0
        own = self._samples[tier]
        if len(own) >= self.MIN_SAMPLES and fleet > 0:
            return p95(own) / fleet
        return None

    def tail_ratio(self, tier: int, prior: Sequence[float] | None = None) -> float:
        """g_u; falls back to the prior (or 1.0, which never restricts) without data."""
        ratios = self._ratios
        if tier in ratios:
            own = ratios[tier]
        else:
            own = ratios[tier] = self._ratio(tier)
        if own is not None:
            return own
        return float(prior[tier]) if prior is not None else 1.0


def should_restrict(num_tiers: int, tail_ratio: float, resp_s: float, sched_s: float) -> bool:
    """The paper's test ``V + g*c < 1 + c`` with c = resp/sched; safe when sched is 0.

    The reference code divided by a zero scheduling delay here; with no scheduling
    delay at all, c is infinite and the test reduces to ``g < 1``.
    """
    if resp_s <= 0:
        return False
    if sched_s <= 0:
        return tail_ratio < 1.0
    c = resp_s / sched_s
    return num_tiers + tail_ratio * c < 1 + c
