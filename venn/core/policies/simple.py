"""The paper's baselines (venn-paper.md §5): Random, FIFO and SRSF, and the reference
driver's random-order baseline."""

from __future__ import annotations

from typing import Literal

import numpy as np

from venn.core.policies.base import PolicyView, QueueKey, Sections, sections_of


class _Unplanned:
    """A policy with no plan: one section, ordered by ``ordering`` alone."""

    name: str
    mode: Literal["first", "uniform"]
    ordering: Literal["idx", "key"]
    remaining_ordered: bool
    queue_key: QueueKey = "round"
    num_sections = 1

    def replan(self, view: PolicyView) -> None:
        return None

    def section_table(self, view: PolicyView) -> np.ndarray | None:
        return None

    def sections(self, view: PolicyView, signature: int) -> Sections:
        return sections_of(self, view, signature)


class RandomPolicy(_Unplanned):
    """A device goes to a uniformly random eligible job with open demand."""

    name = "random"
    mode: Literal["first", "uniform"] = "uniform"
    ordering: Literal["idx", "key"] = "idx"
    remaining_ordered = False


class FifoPolicy(_Unplanned):
    """The earliest-arrived eligible job with open demand."""

    name = "fifo"
    mode: Literal["first", "uniform"] = "first"
    ordering: Literal["idx", "key"] = "idx"  # idx is arrival order
    remaining_ordered = False


class SrsfPolicy(_Unplanned):
    """The eligible job with the smallest remaining demand in its current round."""

    name = "srsf"
    mode: Literal["first", "uniform"] = "first"
    ordering: Literal["idx", "key"] = "key"
    remaining_ordered = True


class RandomOrderPolicy(_Unplanned):
    """The reference repository's random baseline (`RandomOrderScheduler` in its driver
    script): each round request draws a random priority, and a device goes to the
    eligible job with the best one, which keeps it until its round fills or closes.
    Unlike ``random`` it concentrates devices on one job at a time, so it cannot livelock.
    """

    name = "random-order"
    mode: Literal["first", "uniform"] = "first"
    ordering: Literal["idx", "key"] = "key"
    remaining_ordered = True
    queue_key: QueueKey = "random"
