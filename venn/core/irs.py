"""Intersection Resource Scheduling (Algorithm 1 of the paper), done right.

Given each signature's recent supply and each group's queue of open demands, decide
which group *owns* each signature. Unlike the reference code, reallocation moves only
the eligible intersection between two groups, never a scarcer group's other devices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
    num_sigs = sig_matrix.shape[0]
    owner = np.full(num_sigs, -1, dtype=np.int64)
    active = [g for g, q in queues.items() if len(q) > 0]
    if not active or num_sigs == 0:
        return owner
    scale = queue_scale or {}
    total = {g: float(supply[sig_matrix[:, g]].sum()) for g in active}
    breadth = {g: int(sig_matrix[:, g].sum()) for g in active}
    # Scarcest first; on equal supply the narrower requirement counts as scarcer, and the
    # group id breaks what is left so the plan is deterministic.
    ascending = sorted(active, key=lambda g: (total[g], breadth[g], g))

    for g in ascending:
        free = sig_matrix[:, g] & (owner < 0)
        owner[free] = g
    claimed = {g: float(supply[owner == g].sum()) for g in active}

    for j in reversed(ascending):
        if claimed[j] <= 0:
            continue
        pos_j = ascending.index(j)
        for k in reversed(ascending[:pos_j]):
            overlap = (owner == k) & sig_matrix[:, j]
            if claimed[k] <= 0 or not overlap.any():
                continue
            m_j = affected_queue_length(queues[j], claimed[j], queues[k], claimed[k])
            m_j_scaled = m_j * scale.get(j, 1.0)
            m_k_scaled = len(queues[k]) * scale.get(k, 1.0)
            if m_j_scaled / claimed[j] > m_k_scaled / claimed[k]:
                moved = float(supply[overlap].sum())
                owner[overlap] = j
                claimed[j] += moved
                claimed[k] -= moved
            else:
                break
    return owner
