"""Venn's contention-aware scheduling: IRS ownership, smallest demand first in a group."""

from __future__ import annotations

from typing import Literal

import numpy as np

from venn.core.irs import IrsPlanner
from venn.core.lp_plan import lp_owner
from venn.core.policies.base import PolicyView
from venn.core.state import JobState


class IrsPolicy:
    """Algorithm 1: each signature is owned by one group; within a group the job with the
    smallest (fairness-weighted) remaining work goes first; a device whose owner has no
    open demand falls through to the other eligible jobs instead of idling.

    ``queue_key`` says what "remaining" counts: ``"round"`` is the paper's (the open
    round's remaining demand), ``"job"`` (the default) the job's remaining work, the
    open round's remaining demand plus its later rounds' demands, as a job declares them
    at registration. Average JCT is a job-level objective: in a loaded fleet, ordering by
    the round alone serves a 4,000-round job before a 100-round one with a slightly
    larger round (docs/results/reproduction.md measures both).
    """

    mode: Literal["first", "uniform"] = "first"
    ordering: Literal["idx", "key"] = "key"
    num_sections = 2  # the owner group's jobs, then every other eligible job

    def __init__(self, queue_key: Literal["round", "job"] = "job") -> None:
        self.queue_key = queue_key
        self.owner = np.zeros(0, dtype=np.int64)
        self._table: np.ndarray | None = None
        self.planner = IrsPlanner()  # resumes each plan from the one before

    def weight(self, job: JobState) -> float:
        if self.queue_key == "round":
            return 1.0
        # The job's remaining work over the round's remaining demand (an open round
        # belongs to an unfinished job, so later rounds are rounds - done - 1).
        later = (job.spec.rounds - job.rounds_done - 1) * job.demand
        return (job.remaining + later) / job.remaining

    def plan_owner(self, view: PolicyView) -> np.ndarray:
        """The owner group of each signature (-1: none): the IRS plan."""
        if len(view) == 0:
            return np.full(view.num_signatures, -1, dtype=np.int64)
        groups, queues = view.group_queues()
        return self.planner.plan(view.sig_matrix, view.supply, groups, queues, view.group_scale)

    def replan(self, view: PolicyView) -> None:
        owner = self.plan_owner(view)
        if owner.tolist() != self.owner.tolist():
            self._table = None  # the section table follows the owners
        self.owner = owner

    def section_table(self, view: PolicyView) -> np.ndarray | None:
        num_sigs, num_groups = view.sig_matrix.shape
        table = self._table
        if table is not None and table.shape == (num_sigs, num_groups):
            return table
        owner = self.owner
        if len(owner) != num_sigs:  # signatures seen after the last plan have no owner
            pad = np.full(num_sigs, -1, dtype=np.int64)
            k = min(num_sigs, len(owner))
            pad[:k] = owner[:k]
            owner = pad
        table = (np.arange(num_groups)[None, :] != owner[:, None]).astype(np.int64)
        self._table = table
        return table


class LpPolicy(IrsPolicy):
    """``IrsPolicy`` with ownership from a receding-horizon LP over every unfinished job
    (``venn.core.lp_plan``) instead of the IRS heuristic: the same sections and the same
    order inside a group. The LP is solved again every ``period_s`` of scheduler time,
    or sooner when a group appears; a view without the context it needs (a tenant
    layer's) is planned by IRS."""

    def __init__(self, period_s: float = 600.0, first_slot_s: float = 1800.0) -> None:
        super().__init__("job")
        self.period_s = period_s
        self.first_slot_s = first_slot_s
        self.solves = 0
        self._solved_at = -np.inf
        self._lp = np.zeros(0, dtype=np.int64)
        self._groups = 0

    def plan_owner(self, view: PolicyView) -> np.ndarray:
        if view.context is None:
            return super().plan_owner(view)
        num_sigs, num_groups = view.sig_matrix.shape
        ctx = view.context()
        if (
            ctx.now - self._solved_at >= self.period_s
            or num_groups != self._groups
            or len(self._lp) != num_sigs
        ):
            supply = np.asarray(view.supply, dtype=np.float64)
            total = float(supply.sum())
            rates = ctx.rate_per_s * supply / total if total > 0 else np.zeros(num_sigs)
            self._lp = lp_owner(view.sig_matrix, rates, ctx.backlog, self.first_slot_s)
            self._solved_at = ctx.now
            self._groups = num_groups
            self.solves += 1
        return self._lp
