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


# A reallocation step's record: the ranks below it whose claim it read (in the order it
# read them; it compared the queues of those with supply), and its moves (from rank,
# the signatures moved, their supply).
_Move = tuple[int, list[int], float]
_Step = tuple[list[int], list[_Move]]
_SKIPPED: _Step = ([], [])  # a step whose group held no supply: it read only its claim


def _sig_ranks(elig: np.ndarray) -> list[list[int]]:
    """The ranks eligible for each signature (``elig`` [signatures, rank])."""
    sig_of, rank_at = np.nonzero(elig)
    bounds = np.searchsorted(sig_of, np.arange(elig.shape[0] + 1)).tolist()
    ranks = rank_at.tolist()
    return [ranks[bounds[i] : bounds[i + 1]] for i in range(elig.shape[0])]


def _as_list(queue: Sequence[float] | np.ndarray) -> list[float]:
    """A queue as ``_plan_counts`` reads it (lists as given, anything else as floats)."""
    if isinstance(queue, list):
        return queue
    return np.asarray(queue, dtype=np.float64).tolist()  # type: ignore[no-any-return]


class _PlanState:
    """One plan's inputs and reallocation log, for ``IrsPlanner`` to resume from."""

    __slots__ = (
        "abs_sum",
        "asc",
        "breadth",
        "breadth_by_pos",
        "claim",
        "claim_init",
        "cols",
        "drains",
        "garr",
        "groups",
        "matrix",
        "mine",
        "own",
        "own_init",
        "owner",
        "qs",
        "rank_pos",
        "scaled",
        "scales",
        "sig_ranks",
        "steps",
        "sup",
        "total",
    )

    matrix: np.ndarray  # the eligibility matrix planned for (the same object)
    groups: list[int]  # groups with open demand, as given
    sup: list[float]  # supply per signature
    abs_sum: float
    rank_pos: list[int]  # rank -> position in ``groups``
    asc: list[int]  # rank -> group
    total: list[float]  # rank -> its group's eligible supply
    breadth: list[int]  # rank -> its group's eligible signatures
    garr: np.ndarray  # ``groups`` as an array
    cols: np.ndarray  # eligibility [signatures, position in ``groups``]
    breadth_by_pos: np.ndarray  # eligible signatures per position in ``groups``
    # Signature -> ranks eligible for it (small instances: totals updated in Python).
    sig_ranks: list[list[int]] | None
    scaled: bool  # whether any fairness scale was given
    own_init: list[int]
    claim_init: list[float]
    mine: list[list[int]]
    qs: list[list[float]]
    scales: list[float]
    drains: list[float | None]
    steps: list[_Step]
    own: list[int]
    claim: list[float]
    owner: np.ndarray


class IrsPlanner:
    """``irs_plan_grouped`` that remembers its last plan and resumes from it.

    The reallocation visits groups from the most abundant down; each step reads its own
    claim and queue and those of the scarcer groups it compares with, and moves
    signatures from them. A signature moves at most once (from its first owner to the
    step that takes it: a later step takes only from groups below itself), so a plan is
    the first allocation plus every step's moves. Between two plans usually one queue
    changed (a round opened, closed or filled): the planner replays the old steps that
    read nothing that changed, and recomputes the others; once a recomputed step moves
    differently, every later step is recomputed. The result is the plan a full
    recompute gives (``tests/pure/test_irs.py`` checks it on random event sequences).

    A full recompute happens when the eligibility matrix, the set of groups with open
    demand or the groups' supply order changed, or the supply is not whole numbers.
    A supply change that keeps the order marks the first owners of the signatures whose
    supply changed (their claims change), like a changed queue.
    """

    def __init__(self) -> None:
        self._state: _PlanState | None = None
        self.full = 0  # plans computed from scratch
        self.resumed = 0  # plans resumed from the last one
        self.recomputed_steps = 0  # reallocation steps recomputed by resumed plans

    def plan(
        self,
        sig_matrix: np.ndarray,
        supply: np.ndarray,
        groups: Sequence[int],
        queues: Sequence[Sequence[float]],
        queue_scale: Mapping[int, float] | None = None,
    ) -> np.ndarray:
        """Owner group of every signature, as ``irs_plan_grouped`` gives it."""
        supply = np.asarray(supply, dtype=np.float64)
        st = self._state
        num = len(groups)
        group_list = groups if isinstance(groups, list) else [int(g) for g in groups]
        scale = queue_scale or {}
        if st is None or st.matrix is not sig_matrix or st.groups != group_list or num == 0:
            return self._full(sig_matrix, supply, group_list, queues, scale)
        changed: set[int] = set()  # ranks whose claim, queue or scale changed
        dirty: set[int] = set()  # steps to recompute whatever they read
        # New rank -> old rank and back, when the supply order changed (the log's steps
        # are in the old ranks).
        reranked: tuple[list[int], list[int]] | None = None
        sup = supply.tolist()
        old_sup = st.sup
        if sup != old_sup:
            moved = [s for s, (a, b) in enumerate(zip(sup, old_sup, strict=True)) if a != b]
            abs_sum = st.abs_sum + sum(abs(sup[s]) - abs(old_sup[s]) for s in moved)
            if not all(sup[s].is_integer() for s in moved) or abs_sum >= 2.0**52:
                return self._full(sig_matrix, supply, group_list, queues, scale)
            st.sup = sup
            st.abs_sum = abs_sum
            if self._same_order(st, supply, moved, old_sup):
                claim_init, own_init = st.claim_init, st.own_init
                for s in moved:
                    r = own_init[s]
                    if r >= 0:
                        claim_init[r] += sup[s] - old_sup[s]
                        changed.add(r)
            else:
                reranked = self._reorder(st, supply, moved, changed, dirty)
        qs, scales, drains, rank_pos = st.qs, st.scales, st.drains, st.rank_pos
        if scale or st.scaled:
            new_scales = [scale.get(g, 1.0) for g in st.asc]
            for r in range(num):
                if new_scales[r] != scales[r]:
                    changed.add(r)
            st.scales = new_scales
            st.scaled = bool(scale)
        for r, p in enumerate(rank_pos):
            q = queues[p]
            if not isinstance(q, list):
                q = _as_list(q)
            if q != qs[r]:
                qs[r] = q.copy()
                drains[r] = None
                changed.add(r)
        self.resumed += 1
        if changed or dirty:
            self._reallocate(st, changed, dirty, reranked)
        return st.owner.copy()

    @staticmethod
    def _same_order(st: _PlanState, supply: np.ndarray, moved: list[int], old: list[float]) -> bool:
        """Update the groups' totals for the signatures whose supply moved; whether the
        supply order of the groups stayed the same."""
        if st.sig_ranks is None:  # a large instance: numpy does it faster
            total = supply @ st.cols
            rank_of = np.lexsort((st.garr, st.breadth_by_pos, total))
            st.total = total[rank_of].tolist()
            return rank_of.tolist() == st.rank_pos
        # Totals of whole numbers are exact in any order: update them by the deltas.
        sup = st.sup
        total = st.total
        touched: set[int] = set()
        for s in moved:
            d = sup[s] - old[s]
            for r in st.sig_ranks[s]:
                total[r] += d
                touched.add(r)
        breadth, asc = st.breadth, st.asc
        num = len(asc)
        for r in touched:
            key = (total[r], breadth[r], asc[r])
            if (r > 0 and (total[r - 1], breadth[r - 1], asc[r - 1]) > key) or (
                r + 1 < num and key > (total[r + 1], breadth[r + 1], asc[r + 1])
            ):
                return False
        return True

    @staticmethod
    def _reorder(
        st: _PlanState, supply: np.ndarray, moved: list[int], changed: set[int], dirty: set[int]
    ) -> tuple[list[int], list[int]]:
        """Carry the log over to the groups' new supply order (``st.sup`` is the new
        supply), marking what the new order may change.

        Every group whose order with some other group flipped is changed (a step may
        now meet it among the groups below itself, or no longer; the groups processed
        before a group whose order flipped with none are the same as before);
        so is every group whose first-allocation claim differs. A signature whose first
        owner differs changes what every step eligible for it sees: those steps are
        recomputed.
        """
        num = len(st.asc)
        cols = st.cols
        total = supply @ cols
        rank_of = np.lexsort((st.garr, st.breadth_by_pos, total))
        new_pos = rank_of.tolist()
        old_rank = {p: r for r, p in enumerate(st.rank_pos)}
        inv = [old_rank[p] for p in new_pos]  # new rank -> old rank
        perm = [0] * num  # old rank -> new rank
        for r, o in enumerate(inv):
            perm[o] = r
        # Groups in an inversion: some group ahead of it was behind it, or the reverse.
        high = -1
        for r, o in enumerate(inv):
            if high > o:
                changed.add(r)
            high = max(high, o)
        low = num
        for r in range(num - 1, -1, -1):
            o = inv[r]
            if low < o:
                changed.add(r)
            low = min(low, o)

        # The steps stay in the old ranks: ``_reallocate`` maps those it replays.
        st.qs = [st.qs[o] for o in inv]
        st.scales = [st.scales[o] for o in inv]
        st.drains = [st.drains[o] for o in inv]
        st.mine = [st.mine[o] for o in inv]
        st.rank_pos = new_pos
        st.asc = st.garr[rank_of].tolist()
        st.total = total[rank_of].tolist()
        st.breadth = st.breadth_by_pos[rank_of].tolist()
        elig = cols[:, rank_of]
        has = elig.any(axis=1)
        own_a = np.where(has, elig.argmax(axis=1), -1)
        own_init = own_a.tolist()
        claim_init = np.bincount(own_a[has], weights=supply[has], minlength=num).tolist()
        old_own, old_claim = st.own_init, st.claim_init
        for s, (a, b) in enumerate(zip(own_init, old_own, strict=True)):
            if b >= 0:
                b = perm[b]
            if a != b:
                changed.add(a)
                changed.add(b)
                dirty.update(np.flatnonzero(elig[s]).tolist())
        for r, o in enumerate(inv):
            if claim_init[r] != old_claim[o]:
                changed.add(r)
        for s in moved:  # the supply a move from its first owner carries changed
            if own_init[s] >= 0:
                changed.add(own_init[s])
        changed.discard(-1)
        st.own_init = own_init
        st.claim_init = claim_init
        if st.sig_ranks is not None:
            st.sig_ranks = _sig_ranks(elig)
        st.own = []  # rank numbers mean other groups now: rebuild the owners
        return inv, perm

    def _full(
        self,
        sig_matrix: np.ndarray,
        supply: np.ndarray,
        groups: list[int],
        queues: Sequence[Sequence[float]],
        scale: Mapping[int, float],
    ) -> np.ndarray:
        """The plan from scratch, as ``_plan_counts`` computes it, with its log."""
        self.full += 1
        num = len(groups)
        if num == 0 or sig_matrix.shape[0] == 0 or not _is_integral(supply):
            self._state = None
            return irs_plan_grouped(sig_matrix, supply, groups, queues, scale)
        garr = np.asarray(groups, dtype=np.int64)
        st = _PlanState()
        st.matrix = sig_matrix
        st.groups = groups.copy()
        st.garr = garr
        st.cols = cols = sig_matrix[:, garr]
        st.sup = supply.tolist()
        st.abs_sum = float(np.abs(supply).sum())
        total = supply @ cols
        st.breadth_by_pos = breadth = cols.sum(axis=0)
        rank_of = np.lexsort((garr, breadth, total))
        st.rank_pos = rank_of.tolist()
        st.asc = garr[rank_of].tolist()
        st.total = total[rank_of].tolist()
        st.breadth = breadth[rank_of].tolist()
        elig = cols[:, rank_of]
        st.sig_ranks = _sig_ranks(elig) if elig.size <= SMALL_CELLS else None
        has = elig.any(axis=1)
        own_a = np.where(has, elig.argmax(axis=1), -1)
        st.own_init = own_a.tolist()
        st.claim_init = np.bincount(own_a[has], weights=supply[has], minlength=num).tolist()
        ranks, sigs = np.nonzero(elig.T)
        bounds = np.searchsorted(ranks, np.arange(num + 1)).tolist()
        sig_list = sigs.tolist()
        st.mine = [sig_list[bounds[r] : bounds[r + 1]] for r in range(num)]
        st.qs = [_as_list(queues[p]).copy() for p in st.rank_pos]
        st.scales = [scale.get(g, 1.0) for g in st.asc]
        st.scaled = bool(scale)
        st.drains = [None] * num
        st.steps = [_SKIPPED] * num
        self._state = st
        self._reallocate(st, None)
        return st.owner.copy()

    def _reallocate(
        self,
        st: _PlanState,
        changed: set[int] | None,
        dirty: set[int] | None = None,
        reranked: tuple[list[int], list[int]] | None = None,
    ) -> None:
        """The reallocation loop of ``_plan_counts`` from the first allocation; with
        ``changed`` (ranks whose queue, scale or claim changed since the logged plan),
        an old step that read none of them and follows only unchanged steps is replayed
        from the log instead."""
        num = len(st.asc)
        own = st.own_init.copy()
        claim = st.claim_init.copy()
        sup, qs, scales, drains, mine_of = st.sup, st.qs, st.scales, st.drains, st.mine
        old_steps = st.steps  # in the old ranks if ``reranked``
        steps = old_steps if reranked is None else [_SKIPPED] * num
        inv, perm = reranked if reranked is not None else (None, None)
        replay = changed is not None
        changed_ranks: set[int] = changed if changed is not None else set()
        redo: set[int] = changed_ranks | dirty if dirty else changed_ranks
        # What the old steps' reads are checked against, in their ranks.
        changed_old = changed_ranks if inv is None else {inv[r] for r in changed_ranks}
        recomputed = 0
        for j in range(num - 1, 0, -1):
            if replay:
                reads, moves = old_steps[j if inv is None else inv[j]]
                if j not in redo and changed_old.isdisjoint(reads):
                    if perm is not None:
                        moves = [(perm[k], sigs, amount) for k, sigs, amount in moves]
                        steps[j] = ([perm[k] for k in reads], moves)
                    for k, moved_sigs, amount in moves:
                        for s in moved_sigs:
                            own[s] = j
                        claim[j] += amount
                        claim[k] -= amount
                    continue
            recomputed += 1
            cj = claim[j]
            if cj <= 0:
                step = _SKIPPED
            else:
                mine = mine_of[j]
                read: list[int] = []
                made: list[_Move] = []
                elapsed: list[float] | None = None
                for k in sorted(set(map(own.__getitem__, mine)), reverse=True):
                    if k >= j:
                        continue
                    read.append(k)
                    ck = claim[k]
                    if ck <= 0:
                        continue
                    if elapsed is None:  # j's running drain times, added in order
                        elapsed = list(accumulate([d / cj for d in qs[j]]))
                    drain = drains[k]
                    if drain is None:
                        drain = drains[k] = sum(qs[k])
                    m_j = bisect_left(elapsed, drain / ck)
                    if m_j * scales[j] / cj > len(qs[k]) * scales[k] / ck:
                        moved = 0.0
                        taken = []
                        for s in mine:
                            if own[s] == k:
                                own[s] = j
                                moved += sup[s]
                                taken.append(s)
                        made.append((k, taken, moved))
                        claim[j] += moved
                        claim[k] -= moved
                        cj = claim[j]
                        elapsed = None
                    else:
                        break
                step = (read, made)
            if replay:
                old_moves = old_steps[j if inv is None else inv[j]][1]
                if perm is not None:
                    old_moves = [(perm[k], sigs, amount) for k, sigs, amount in old_moves]
                if len(old_moves) != len(step[1]) or any(
                    a[0] != b[0] or a[1] != b[1] for a, b in zip(old_moves, step[1], strict=False)
                ):
                    replay = False  # the state now differs from the log's
            steps[j] = step
        st.steps = steps
        if changed is not None:
            self.recomputed_steps += recomputed
        if changed is None or own != st.own:
            asc = st.asc
            st.owner = np.array([asc[r] if r >= 0 else -1 for r in own], dtype=np.int64)
        st.own = own
        st.claim = claim
