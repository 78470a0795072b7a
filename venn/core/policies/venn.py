"""Venn's contention-aware scheduling: IRS ownership, smallest demand first in a group."""

from __future__ import annotations

from typing import Literal

import numpy as np

from venn.core.irs import irs_plan_grouped
from venn.core.policies.base import PolicyView, Sections, sections_of


class IrsPolicy:
    """Algorithm 1: each signature is owned by one group; within a group the job with the
    smallest (fairness-weighted) remaining demand goes first; a device whose owner has no
    open demand falls through to the other eligible jobs instead of idling."""

    name = "venn-sched"
    mode: Literal["first", "uniform"] = "first"
    remaining_ordered = True

    def __init__(self) -> None:
        self.owner = np.zeros(0, dtype=np.int64)

    def replan(self, view: PolicyView) -> None:
        n = len(view)
        if n == 0:
            self.owner = np.full(view.sig_matrix.shape[0], -1, dtype=np.int64)
            return
        keys = view.keys
        # Each group's queue: its jobs' weighted remaining demands, ascending.
        order = np.lexsort((keys, view.group))
        groups = view.group[order]
        sorted_keys = keys[order]
        cuts = (np.flatnonzero(groups[1:] != groups[:-1]) + 1).tolist()
        starts = [0, *cuts]
        ends = [*cuts, n]
        queues = [sorted_keys[a:b] for a, b in zip(starts, ends, strict=True)]
        self.owner = irs_plan_grouped(
            view.sig_matrix, view.supply, groups[starts], queues, view.group_scale
        )

    def preference(self, view: PolicyView) -> np.ndarray | None:
        return view.by_key

    def section_masks(self, view: PolicyView, groups: np.ndarray) -> list[np.ndarray] | None:
        num_sigs = view.sig_matrix.shape[0]
        owner = self.owner
        if len(owner) != num_sigs:
            pad = np.full(num_sigs, -1, dtype=np.int64)
            k = min(num_sigs, len(owner))
            pad[:k] = owner[:k]
            owner = pad
        own = groups[None, :] == owner[:, None]
        return [own, ~own]  # the owner group's jobs, then everyone else eligible

    def sections(self, view: PolicyView, signature: int) -> Sections:
        return sections_of(self, view, signature)
