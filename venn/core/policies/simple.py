"""The paper's baselines (venn-paper.md §5): Random, FIFO and SRSF."""

from __future__ import annotations

from typing import Literal

from venn.core.policies.base import PolicyView, Sections, eligible_jobs


class RandomPolicy:
    """A device goes to a uniformly random eligible job with open demand."""

    name = "random"
    mode: Literal["first", "uniform"] = "uniform"
    remaining_ordered = False

    def replan(self, view: PolicyView) -> None:
        return None

    def sections(self, view: PolicyView, signature: int) -> Sections:
        return [eligible_jobs(view, signature)]


class FifoPolicy:
    """The earliest-arrived eligible job with open demand."""

    name = "fifo"
    mode: Literal["first", "uniform"] = "first"
    remaining_ordered = False

    def replan(self, view: PolicyView) -> None:
        return None

    def sections(self, view: PolicyView, signature: int) -> Sections:
        return [eligible_jobs(view, signature)]  # open_jobs are in arrival order


class SrsfPolicy:
    """The eligible job with the smallest remaining demand in its current round."""

    name = "srsf"
    mode: Literal["first", "uniform"] = "first"
    remaining_ordered = True

    def replan(self, view: PolicyView) -> None:
        return None

    def sections(self, view: PolicyView, signature: int) -> Sections:
        return [sorted(eligible_jobs(view, signature), key=lambda j: j.order_key)]
