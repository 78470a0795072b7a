"""Venn's contention-aware scheduling: IRS ownership, smallest demand first in a group."""

from __future__ import annotations

from collections import defaultdict
from typing import Literal

import numpy as np

from venn.core.irs import irs_plan
from venn.core.policies.base import OpenJob, PolicyView, Sections, eligible_jobs


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
        queues: dict[int, list[float]] = defaultdict(list)
        for j in view.open_jobs:
            queues[j.group].append(j.remaining * j.weight)
        for q in queues.values():
            q.sort()
        self.owner = irs_plan(view.sig_matrix, view.supply, queues, view.group_scale)

    def sections(self, view: PolicyView, signature: int) -> Sections:
        candidates = sorted(eligible_jobs(view, signature), key=lambda j: j.order_key)
        owner = int(self.owner[signature]) if signature < len(self.owner) else -1
        own: list[OpenJob] = [j for j in candidates if j.group == owner]
        rest: list[OpenJob] = [j for j in candidates if j.group != owner]
        return [own, rest]
