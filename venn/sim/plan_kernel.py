"""The IRS plan compiled with numba, for the simulator (the core stays plain Python).

``venn.core.irs._plan_counts`` operation for operation: the same float sums in the same
order (queue sums and running drain times left to right, as Python 3.11's ``sum`` and
``accumulate`` add them; supply totals and claims are whole numbers, exact in any order),
the same comparisons and the same visiting order, so it gives the same owners. A plan
costs a few microseconds here against tens in Python, and the simulator recomputes it at
every round request, fill and close (428k times in a full Table 1 run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain

import numba as nb
import numpy as np

from venn.core.irs import IrsPlanner


@nb.njit(cache=True)
def plan_counts(
    sig_matrix: np.ndarray,
    supply: np.ndarray,
    groups: np.ndarray,
    qvals: np.ndarray,
    qlen: np.ndarray,
    scales: np.ndarray,
) -> np.ndarray:
    """Owner group of every signature: ``sig_matrix`` bool [signatures, groups],
    ``supply`` per signature, ``groups`` the active group ids, group ``groups[p]``'s
    ascending queue the next ``qlen[p]`` values of ``qvals`` and its queue scale
    ``scales[p]``. An empty array if the supply is not whole numbers summing below
    2**52 (``venn.core.irs._is_integral``: then sums depend on their order)."""
    num_sigs = sig_matrix.shape[0]
    num = groups.shape[0]
    abs_sum = 0.0
    for s in range(num_sigs):
        if np.floor(supply[s]) != supply[s]:
            return np.zeros(0, dtype=np.int64)
        abs_sum += abs(supply[s])
    if abs_sum >= 2.0**52:
        return np.zeros(0, dtype=np.int64)
    qstart = np.zeros(num + 1, dtype=np.int64)
    for p in range(num):
        qstart[p + 1] = qstart[p] + qlen[p]
    total = np.zeros(num, dtype=np.float64)
    breadth = np.zeros(num, dtype=np.int64)
    for p in range(num):
        g = groups[p]
        for s in range(num_sigs):
            if sig_matrix[s, g]:
                total[p] += supply[s]
                breadth[p] += 1
    # Ranks: ascending (total, breadth, group id), as np.lexsort orders them.
    rank_of = np.arange(num)
    for a in range(1, num):
        p = rank_of[a]
        b = a - 1
        while b >= 0:
            q = rank_of[b]
            if total[q] != total[p]:
                after = total[q] > total[p]
            elif breadth[q] != breadth[p]:
                after = breadth[q] > breadth[p]
            else:
                after = groups[q] > groups[p]
            if after:
                rank_of[b + 1] = q
                b -= 1
            else:
                break
        rank_of[b + 1] = p
    # First owner of each signature: its scarcest eligible group.
    own = np.full(num_sigs, -1, dtype=np.int64)
    claim = np.zeros(num, dtype=np.float64)
    for s in range(num_sigs):
        for r in range(num):
            if sig_matrix[s, groups[rank_of[r]]]:
                own[s] = r
                claim[r] += supply[s]
                break
    drains = np.full(num, np.nan)
    elapsed = np.zeros(qvals.shape[0] + 1, dtype=np.float64)
    holders = np.zeros(num, dtype=np.bool_)
    for j in range(num - 1, 0, -1):
        cj = claim[j]
        if cj <= 0:
            continue
        gj = groups[rank_of[j]]
        pj = rank_of[j]
        # The ranks holding one of j's eligible signatures, read before any move.
        holders[:] = False
        for s in range(num_sigs):
            if sig_matrix[s, gj]:
                holders[own[s]] = True
        have_elapsed = False
        n_j = qstart[pj + 1] - qstart[pj]
        for k in range(j - 1, -1, -1):
            if not holders[k]:
                continue
            ck = claim[k]
            if ck <= 0:
                continue
            if not have_elapsed:  # j's running drain times, added in order
                acc = 0.0
                for t in range(n_j):
                    d = qvals[qstart[pj] + t] / cj
                    acc = d if t == 0 else acc + d
                    elapsed[t] = acc
                have_elapsed = True
            pk = rank_of[k]
            drain = drains[k]
            if np.isnan(drain):
                drain = 0.0
                for t in range(qstart[pk], qstart[pk + 1]):
                    drain += qvals[t]
                drains[k] = drain
            x = drain / ck
            lo, hi = 0, n_j  # bisect_left(elapsed[:n_j], x)
            while lo < hi:
                mid = (lo + hi) // 2
                if elapsed[mid] < x:
                    lo = mid + 1
                else:
                    hi = mid
            m_j = lo
            n_k = qstart[pk + 1] - qstart[pk]
            if m_j * scales[pj] / cj > n_k * scales[pk] / ck:
                moved = 0.0
                for s in range(num_sigs):
                    if sig_matrix[s, gj] and own[s] == k:
                        own[s] = j
                        moved += supply[s]
                claim[j] += moved
                claim[k] -= moved
                cj = claim[j]
                have_elapsed = False
            else:
                break
    owner = np.full(num_sigs, -1, dtype=np.int64)
    for s in range(num_sigs):
        if own[s] >= 0:
            owner[s] = groups[rank_of[own[s]]]
    return owner


class CompiledPlanner(IrsPlanner):
    """``IrsPlanner`` whose plans are computed from scratch by ``plan_counts`` (faster
    than resuming in Python); supply that is not whole numbers takes the Python path."""

    def __init__(self) -> None:
        super().__init__()
        self._ones = np.ones(16, dtype=np.float64)  # the scales without fairness

    def plan(
        self,
        sig_matrix: np.ndarray,
        supply: np.ndarray,
        groups: Sequence[int],
        queues: Sequence[Sequence[float]],
        queue_scale: Mapping[int, float] | None = None,
    ) -> np.ndarray:
        num = len(groups)
        if num and sig_matrix.shape[0]:
            owner: np.ndarray = plan_counts(
                sig_matrix,
                np.asarray(supply, dtype=np.float64),
                np.fromiter(groups, dtype=np.int64, count=num),
                np.fromiter(chain.from_iterable(queues), dtype=np.float64),
                np.fromiter(map(len, queues), dtype=np.int64, count=num),
                self._scales(groups, queue_scale),
            )
            if owner.shape[0]:
                return owner
        return super().plan(sig_matrix, supply, groups, queues, queue_scale)

    def _scales(self, groups: Sequence[int], scale: Mapping[int, float] | None) -> np.ndarray:
        num = len(groups)
        if not scale:
            ones = self._ones
            if ones.shape[0] < num:
                ones = self._ones = np.ones(2 * num, dtype=np.float64)
            return ones
        return np.fromiter((scale.get(g, 1.0) for g in groups), dtype=np.float64, count=num)
