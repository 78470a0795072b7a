"""Intersection Resource Scheduling (Algorithm 1 of the paper), done right.

Given each signature's recent supply and each group's queue of open demands, decide
which group *owns* each signature. Unlike the reference code, reallocation moves only
the eligible intersection between two groups, never a scarcer group's other devices.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from itertools import accumulate, compress

import numpy as np


def affected_queue_length(
    demands_j: Sequence[float], supply_j: float, demands_k: Sequence[float], supply_k: float
) -> int:
    """Number of group j's jobs (in queue order) that finish before group k's queue drains.

    If j's whole queue drains first, every job of j is affected by the move.
    """
    drain_k = sum(demands_k) / supply_k
    elapsed = 0.0
    for i, d in enumerate(demands_j):
        elapsed += d / supply_j
        if elapsed >= drain_k:
            return i
    return len(demands_j)


def irs_plan(
    sig_matrix: np.ndarray,
    supply: np.ndarray,
    queues: Mapping[int, Sequence[float]],
    queue_scale: Mapping[int, float] | None = None,
) -> np.ndarray:
    """Owner group of every signature (-1: no group with open demand is eligible).

    ``sig_matrix`` is boolean [signatures, groups]; ``supply`` the recent check-ins per
    signature; ``queues`` maps each group with open demand to its jobs' remaining
    demands in ascending order; ``queue_scale`` multiplies a group's queue length
    (the epsilon-fairness knob, 1.0 when absent).
    """
    items = [(g, q) for g, q in queues.items() if len(q) > 0]
    return irs_plan_grouped(
        sig_matrix, supply, [g for g, _ in items], [q for _, q in items], queue_scale
    )


def _is_integral(values: np.ndarray) -> bool:
    """Whole numbers small enough that any summation order gives the same float."""
    if values.size == 0:
        return True
    return bool(np.all(np.floor(values) == values)) and float(np.abs(values).sum()) < 2.0**52


SMALL_CELLS = 256  # signatures x groups up to which plain Python beats numpy
SMALL_JOBS = 1024


def irs_plan_grouped(
    sig_matrix: np.ndarray,
    supply: np.ndarray,
    groups: Sequence[int] | np.ndarray,
    queues: Sequence[Sequence[float] | np.ndarray],
    queue_scale: Mapping[int, float] | None = None,
) -> np.ndarray:
    """``irs_plan`` over sequences: ``groups`` are distinct group ids, ``queues[i]`` the
    ascending (non-empty) queue of ``groups[i]``."""
    num_sigs = sig_matrix.shape[0]
    num = len(groups)
    if num == 0 or num_sigs == 0:
        return np.full(num_sigs, -1, dtype=np.int64)
    if num_sigs * num <= SMALL_CELLS and sum(len(q) for q in queues) <= SMALL_JOBS:
        sup = np.asarray(supply, dtype=np.float64).tolist()
        if all(map(float.is_integer, sup)) and sum(map(abs, sup)) < 2.0**52:
            owner = _plan_small(
                sig_matrix.tolist(),
                sup,
                [int(g) for g in groups],
                [
                    q
                    if isinstance(q, list)
                    else q.tolist()
                    if isinstance(q, np.ndarray)
                    else list(q)
                    for q in queues
                ],
                queue_scale or {},
            )
            return np.array(owner, dtype=np.int64)
    supply = np.asarray(supply, dtype=np.float64)
    if _is_integral(supply):
        return _plan_counts(
            sig_matrix,
            supply,
            np.asarray(groups, dtype=np.int64),
            [
                q if isinstance(q, list) else np.asarray(q, dtype=np.float64).tolist()
                for q in queues
            ],
            queue_scale or {},
        )
    return _plan_numpy(
        sig_matrix,
        supply,
        np.asarray(groups, dtype=np.int64),
        [np.asarray(q, dtype=np.float64) for q in queues],
        queue_scale,
    )


def _plan_counts(
    sig_matrix: np.ndarray,
    supply: np.ndarray,
    groups: np.ndarray,
    queues: list[list[float]],
    scale: Mapping[int, float],
) -> np.ndarray:
    """``_plan_numpy`` for whole-number supply (check-in counts), with the reallocation
    loop over Python lists: its work per group is a handful of numpy calls there, here a
    pass over the group's eligible signatures. Whole numbers sum exactly in any order, so
    both give the same plan."""
    num = len(groups)
    cols = sig_matrix[:, groups]  # [signatures, active groups]
    total = supply @ cols
    breadth = cols.sum(axis=0)
    rank_of = np.lexsort((groups, breadth, total))  # rank -> position in ``groups``
    ascending = groups[rank_of]
    elig = cols[:, rank_of]  # [signatures, rank]
    has = elig.any(axis=1)
    own_a = np.where(has, elig.argmax(axis=1), -1)  # owner rank per signature
    claim = np.bincount(own_a[has], weights=supply[has], minlength=num).tolist()
    own = own_a.tolist()
    sup = supply.tolist()
    # Each rank's eligible signatures, ascending.
    ranks, sigs = np.nonzero(elig.T)
    bounds = np.searchsorted(ranks, np.arange(num + 1)).tolist()
    sig_list = sigs.tolist()
    scales = [scale.get(g, 1.0) for g in ascending.tolist()] if scale else [1.0] * num
    qs = [queues[p] for p in rank_of.tolist()]
    drains: dict[int, float] = {}  # sum of a queue, added in order as ``sum`` does
    for j in range(num - 1, 0, -1):
        cj = claim[j]
        if cj <= 0:
            continue
        mine = sig_list[bounds[j] : bounds[j + 1]]
        # Groups below j that hold part of j's eligible signatures and have supply, in
        # descending rank; whether one has supply is read before any move (a move from
        # k to j changes no other group's claim), and the loop usually stops at the first.
        elapsed: list[float] | None = None
        for k in sorted(set(map(own.__getitem__, mine)), reverse=True):
            if k >= j:
                continue
            ck = claim[k]
            if ck <= 0:
                continue
            if elapsed is None:  # j's running drain times, added in order
                elapsed = list(accumulate([d / cj for d in qs[j]]))
            drain = drains.get(k)
            if drain is None:
                drain = drains[k] = sum(qs[k])
            m_j = bisect_left(elapsed, drain / ck)
            if m_j * scales[j] / cj > len(qs[k]) * scales[k] / ck:
                moved = 0.0
                for s in mine:
                    if own[s] == k:
                        own[s] = j
                        moved += sup[s]
                claim[j] += moved
                claim[k] -= moved
                cj = claim[j]
                elapsed = None
            else:
                break
    asc = ascending.tolist()
    return np.array([asc[r] if r >= 0 else -1 for r in own], dtype=np.int64)


def _plan_small(
    rows: list[list[bool]],
    supply: list[float],
    groups: list[int],
    queues: list[list[float]],
    scale: Mapping[int, float],
) -> list[int]:
    """The plan in plain Python for small instances (whole-number supply: exact sums)."""
    num_sigs = len(rows)
    sigs = range(num_sigs)
    queue = dict(zip(groups, queues, strict=True))
    cols = list(zip(*rows, strict=True))  # eligibility column of each group
    total: dict[int, float] = {}
    breadth: dict[int, int] = {}
    for g in groups:
        col = cols[g]
        t = 0.0
        for x in compress(supply, col):
            t += x
        total[g] = t
        breadth[g] = sum(col)
    ascending = sorted(groups, key=lambda g: (total[g], breadth[g], g))
    owner = [-1] * num_sigs
    for g in ascending:
        col = cols[g]
        for s in sigs:
            if owner[s] < 0 and col[s]:
                owner[s] = g
    claimed = dict.fromkeys(groups, 0.0)
    for s in sigs:
        if owner[s] >= 0:
            claimed[owner[s]] += supply[s]
    drains: dict[int, float] = {}  # sum of each queue, added in order as ``sum`` does
    for pos_j in range(len(ascending) - 1, 0, -1):
        j = ascending[pos_j]
        if claimed[j] <= 0:
            continue
        elapsed: list[float] | None = None
        col_j = cols[j]
        for pos_k in range(pos_j - 1, -1, -1):
            k = ascending[pos_k]
            if claimed[k] <= 0:
                continue
            overlap = [s for s in sigs if owner[s] == k and col_j[s]]
            if not overlap:
                continue
            # affected_queue_length, with j's running drain times kept between calls.
            cj = claimed[j]
            if elapsed is None:
                elapsed = list(accumulate([d / cj for d in queue[j]]))
            drain = drains.get(k)
            if drain is None:
                drain = drains[k] = sum(queue[k])
            m_j = bisect_left(elapsed, drain / claimed[k])
            m_j_scaled = m_j * scale.get(j, 1.0)
            m_k_scaled = len(queue[k]) * scale.get(k, 1.0)
            if m_j_scaled / claimed[j] > m_k_scaled / claimed[k]:
                moved = 0.0
                for s in overlap:
                    moved += supply[s]
                    owner[s] = j
                claimed[j] += moved
                claimed[k] -= moved
                elapsed = None
            else:
                break
    return owner


def _plan_numpy(
    sig_matrix: np.ndarray,
    supply: np.ndarray,
    groups: np.ndarray,
    queues: Sequence[np.ndarray],
    queue_scale: Mapping[int, float] | None = None,
) -> np.ndarray:
    num_sigs = sig_matrix.shape[0]
    owner = np.full(num_sigs, -1, dtype=np.int64)
    num = len(groups)
    if num == 0 or num_sigs == 0:
        return owner
    supply = np.asarray(supply, dtype=np.float64)
    groups = np.asarray(groups, dtype=np.int64)
    cols = sig_matrix[:, groups]  # [signatures, active groups]
    # Whole-number supply (check-in counts) sums exactly in any order, so the matrix
    # forms below give the same floats as summing each group's signatures on its own.
    exact = _is_integral(supply)
    if exact:
        total = supply @ cols
    else:
        total = np.array([supply[cols[:, i]].sum() for i in range(num)], dtype=np.float64)
    breadth = cols.sum(axis=0)
    # Scarcest first; on equal supply the narrower requirement counts as scarcer, and the
    # group id breaks what is left so the plan is deterministic.
    rank_of = np.lexsort((groups, breadth, total))  # rank -> position in ``groups``
    ascending = groups[rank_of]
    elig = cols[:, rank_of]  # [signatures, rank]
    # Every signature first goes to the scarcest eligible group.
    has = elig.any(axis=1)
    own = np.where(has, elig.argmax(axis=1), -1)  # owner rank per signature
    if exact:
        claimed = np.bincount(own[has], weights=supply[has], minlength=num)
    else:
        claimed = np.array([supply[own == r].sum() for r in range(num)], dtype=np.float64)
    scale = queue_scale or {}
    scales = [scale.get(g, 1.0) for g in ascending.tolist()]
    qs = [queues[p] for p in rank_of.tolist()]
    lengths = [len(q) for q in qs]
    drains: dict[int, float] = {}  # sum of a queue, added in order as ``sum`` does
    claim = claimed.tolist()

    for j in range(num - 1, 0, -1):
        cj = claim[j]
        if cj <= 0:
            continue
        col = elig[:, j]
        # Groups below j that hold part of j's eligible signatures and have supply: the
        # only ones the loop can move from (a move to j never changes them).
        holders = set(own[col].tolist())  # col implies an owner
        ks = sorted((k for k in holders if k < j and claim[k] > 0), reverse=True)
        if not ks:
            continue
        elapsed: list[float] | None = None
        for k in ks:
            ck = claim[k]
            if elapsed is None:  # j's running drain times, added in order
                elapsed = list(accumulate([d / cj for d in qs[j].tolist()]))
            drain = drains.get(k)
            if drain is None:
                drain = drains[k] = sum(qs[k].tolist())
            m_j = bisect_left(elapsed, drain / ck)
            if m_j * scales[j] / cj > lengths[k] * scales[k] / ck:
                overlap = (own == k) & col
                moved = float(supply[overlap].sum())
                own[overlap] = j
                claim[j] += moved
                claim[k] -= moved
                cj = claim[j]
                elapsed = None
            else:
                break
    return np.where(own >= 0, ascending[np.maximum(own, 0)], -1)
