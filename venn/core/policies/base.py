"""The one interface every policy implements.

A policy is pure preference: for each device signature it lists the open jobs that may
take the device, in order. The mechanism (``venn.core.scheduler.Scheduler``) applies
tier restrictions, compiles the lists into a dispatch table and keeps the bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

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


@dataclass(frozen=True)
class PolicyView:
    """Everything a policy may look at when the plan is recomputed."""

    sig_matrix: np.ndarray  # bool [signatures, groups]
    supply: np.ndarray  # recent check-ins per signature
    open_jobs: tuple[OpenJob, ...]  # sorted by idx
    group_scale: dict[int, float] = field(default_factory=dict)


Sections = list[list[OpenJob]]
"""Ordered candidate sections of one signature; order inside a section may change as
remaining demands shrink, order between sections may not."""


class Policy(Protocol):
    name: str
    mode: Literal["first", "uniform"]
    remaining_ordered: bool  # does order depend on remaining demand?

    def replan(self, view: PolicyView) -> None:
        """Recompute any plan (called on round request, demand filled, round close)."""

    def sections(self, view: PolicyView, signature: int) -> Sections:
        """Candidates for a device of this signature, in preference order."""
        ...


def eligible_jobs(view: PolicyView, signature: int) -> list[OpenJob]:
    row = view.sig_matrix[signature]
    return [j for j in view.open_jobs if row[j.group]]
