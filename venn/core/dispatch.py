"""A compiled dispatch rule: who gets a device of signature s and tier t.

Between two plan changes the rule is static, so it can be applied to one check-in at a
time (the pipeline, the event-by-event simulator) or to a run of them (the fast
simulator) with identical results. ``budget`` says how many more assignments each job
can take before the rule must be recompiled (its demand fills, or its shrinking demand
overtakes a job ahead of it in some preference list).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from venn.core.policies.base import cached

NO_LIMIT = np.iinfo(np.int64).max // 4


@dataclass(frozen=True)
class DispatchTable:
    # int64 [signatures, tiers, width]: job idx, -1 padded; a first pick keeps only each
    # row's head (width 1), a uniform pick the whole row. One row per signature known at
    # the compile (none before any device was seen): a signature at or past the last row
    # was first seen since, and the plan must be recomputed to include it.
    candidates: np.ndarray
    counts: np.ndarray  # int64 [signatures, tiers]: candidates listed (a first pick: 1 or 0)
    uniform: bool  # pick uniformly among candidates (else the first)
    budget: np.ndarray  # int64 [jobs]: assignments until the table must be recompiled
    # The same rows as Python lists, if the compiler had them (else made on first use).
    head_list: list[int] | None = field(default=None, compare=False, repr=False)
    row_lists: list[list[int]] | None = field(default=None, compare=False, repr=False)

    def pick(self, signature: int, tier: int, u: float) -> int:
        """Job idx for one device, or -1."""
        if signature >= self.counts.shape[0]:
            return -1
        n = int(self.counts[signature, tier])
        if n == 0:
            return -1
        choice = min(int(u * n), n - 1) if self.uniform else 0
        return int(self.candidates[signature, tier, choice])

    @cached
    def any_candidate(self) -> bool:
        """Can any device be assigned at all?"""
        if self.head_list is not None:
            return max(self.head_list, default=-1) >= 0
        return bool(self.counts.any())

    @property
    def num_rows(self) -> int:
        return int(self.counts.size)

    def heads(self) -> list[int]:
        """First candidate of each row (signature * tiers + tier), -1 if none, as a list."""
        out = self.head_list
        if out is None:
            out = self.candidates[:, :, 0].ravel().tolist()
            object.__setattr__(self, "head_list", out)
        return out

    def rows(self) -> list[list[int]]:
        """Candidates of each row (signature * tiers + tier), as lists (a first pick's
        rows hold only the head)."""
        out = self.row_lists
        if out is None:
            width = self.candidates.shape[2]
            flat = self.candidates.reshape(-1, width).tolist()
            counts = self.counts.ravel().tolist()
            out = [row[: min(c, width)] for row, c in zip(flat, counts, strict=True)]
            object.__setattr__(self, "row_lists", out)
        return out


def overtake_count(rem_b: int, w_b: float, idx_b: int, rem_a: int, w_a: float, idx_a: int) -> int:
    """Assignments to job b (behind) after which its shrinking key ``(rem * w, idx)``
    is ordered before job a's (ahead), its weight fixed."""
    if w_b == w_a == 1.0:
        n = rem_b - rem_a + (0 if idx_b < idx_a else 1)
        return max(1, n)
    target = (rem_a * w_a, idx_a)
    guess = math.floor(rem_b - rem_a * w_a / w_b)
    for n in range(max(1, guess - 1), max(1, guess - 1) + 4):
        if ((rem_b - n) * w_b, idx_b) < target:
            return n
    return max(1, guess + 3)


def empty_table(num_jobs: int) -> DispatchTable:
    """A table for no signature (a scheduler's before its first compile)."""
    return DispatchTable(
        candidates=np.full((0, 1, 1), -1, dtype=np.int64),
        counts=np.zeros((0, 1), dtype=np.int64),
        uniform=False,
        budget=np.full(num_jobs, NO_LIMIT, dtype=np.int64),
    )
