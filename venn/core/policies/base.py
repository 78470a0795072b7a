"""The one interface every policy implements.

A policy is pure preference: for each device signature it orders the open jobs that may
take the device. The mechanism (``venn.core.scheduler.Scheduler``) applies tier
restrictions, compiles the orders into a dispatch table and keeps the bookkeeping.

The view holds the open jobs as numpy columns (sorted by job idx), so a policy states
its preference with arrays rather than one list per signature:

- ``preference(view)``: positions into the view's columns, best first (one global
  order; ``None`` means idx order);
- ``section_masks(view, groups)``: ``None`` (one section), or one boolean
  [signatures, jobs] mask per section, in section order, over the jobs in preference
  order (``groups`` are their groups). A signature's candidates are its eligible jobs,
  section by section, each section in preference order.

``sections(view, signature)`` spells the same thing out as lists of ``OpenJob`` (for
readers and tests; the scheduler does not call it).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, Protocol

import numpy as np


@dataclass(frozen=True)
class OpenJob:
    """A job whose current round still needs devices."""

    idx: int  # registration order; the last tie-breaker everywhere
    job_id: str
    group: int
    remaining: int
    weight: float = 1.0  # fairness multiplier on remaining demand

    @property
    def order_key(self) -> tuple[float, int]:
        return (self.remaining * self.weight, self.idx)


_EMPTY_I = np.zeros(0, dtype=np.int64)


class PolicyView:
    """Everything a policy may look at when the plan is recomputed.

    ``idx``, ``group``, ``remaining`` and ``weight`` are columns over the open jobs,
    sorted by idx; ``supply`` (recent check-ins per signature) is computed on first use.
    """

    def __init__(
        self,
        sig_matrix: np.ndarray,
        supply: np.ndarray | Any,
        idx: np.ndarray = _EMPTY_I,
        group: np.ndarray = _EMPTY_I,
        remaining: np.ndarray = _EMPTY_I,
        weight: np.ndarray | None = None,
        group_scale: dict[int, float] | None = None,
        job_ids: Any = None,
    ) -> None:
        self.sig_matrix = sig_matrix  # bool [signatures, groups]
        if callable(supply):
            self._supply_fn = supply
        else:
            self.__dict__["supply"] = supply
        self.idx = idx
        self.group = group
        self.remaining = remaining
        self.weighted = weight is not None
        self.weight = weight if weight is not None else np.ones(len(idx))
        self.group_scale = group_scale or {}
        self._job_ids = job_ids

    @classmethod
    def from_jobs(
        cls,
        sig_matrix: np.ndarray,
        supply: np.ndarray,
        open_jobs: tuple[OpenJob, ...] | list[OpenJob],
        group_scale: dict[int, float] | None = None,
    ) -> PolicyView:
        jobs = sorted(open_jobs, key=lambda j: j.idx)
        weighted = any(j.weight != 1.0 for j in jobs)
        view = cls(
            sig_matrix,
            supply,
            np.array([j.idx for j in jobs], dtype=np.int64),
            np.array([j.group for j in jobs], dtype=np.int64),
            np.array([j.remaining for j in jobs], dtype=np.int64),
            np.array([j.weight for j in jobs], dtype=np.float64) if weighted else None,
            group_scale,
            [j.job_id for j in jobs],
        )
        return view

    def __len__(self) -> int:
        return len(self.idx)

    @cached_property
    def supply(self) -> np.ndarray:
        return self._supply_fn()

    @cached_property
    def keys(self) -> np.ndarray:
        """Weighted remaining demand (the first part of ``OpenJob.order_key``)."""
        return self.remaining * self.weight

    @cached_property
    def by_key(self) -> np.ndarray:
        """Positions sorted by ``OpenJob.order_key``: (remaining * weight, idx)."""
        if len(self.idx) < 2:
            return np.arange(len(self.idx))
        if self.weighted:
            return np.lexsort((self.idx, self.keys))
        # idx is ascending, so a stable sort by remaining breaks ties by idx.
        return np.argsort(self.remaining, kind="stable")

    @cached_property
    def open_jobs(self) -> tuple[OpenJob, ...]:
        ids = self._job_ids
        if callable(ids):
            ids = ids()
        if ids is None:
            ids = [str(i) for i in self.idx.tolist()]
        return tuple(
            OpenJob(i, job_id, g, r, w)
            for i, job_id, g, r, w in zip(
                self.idx.tolist(),
                ids,
                self.group.tolist(),
                self.remaining.tolist(),
                self.weight.tolist(),
                strict=True,
            )
        )


Sections = list[list[OpenJob]]
"""Ordered candidate sections of one signature; order inside a section may change as
remaining demands shrink, order between sections may not."""


class Policy(Protocol):
    name: str
    mode: Literal["first", "uniform"]
    remaining_ordered: bool  # does order depend on remaining demand?

    def replan(self, view: PolicyView) -> None:
        """Recompute any plan (called on round request, demand filled, round close)."""

    def preference(self, view: PolicyView) -> np.ndarray | None:
        """Positions into the view's columns, best first (None: idx order)."""
        ...

    def section_masks(self, view: PolicyView, groups: np.ndarray) -> list[np.ndarray] | None:
        """Per-section [signatures, jobs] masks over the jobs in preference order."""
        ...

    def sections(self, view: PolicyView, signature: int) -> Sections:
        """Candidates for a device of this signature, in preference order."""
        ...


def sections_of(policy: Policy, view: PolicyView, signature: int) -> Sections:
    """The candidate lists of one signature as ``OpenJob`` sections (the reading aid)."""
    order = policy.preference(view)
    if order is None:
        order = np.arange(len(view))
    groups = view.group[order]
    eligible = view.sig_matrix[signature, groups]
    masks = policy.section_masks(view, groups)
    jobs = view.open_jobs
    if masks is None:
        return [[jobs[p] for p in order[eligible].tolist()]]
    return [[jobs[p] for p in order[eligible & m[signature]].tolist()] for m in masks]


def eligible_jobs(view: PolicyView, signature: int) -> list[OpenJob]:
    row = view.sig_matrix[signature]
    return [j for j in view.open_jobs if row[j.group]]
