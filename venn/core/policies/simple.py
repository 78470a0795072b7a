"""The paper's baselines (the paper's §5): Random, FIFO and SRSF, and the reference
driver's random-order baseline."""

from __future__ import annotations

from typing import Literal

import numpy as np

from venn.core.policies.base import PolicyView
from venn.core.state import JobState, splitmix


class _Unplanned:
    """A policy with no plan: one section, ordered by ``ordering`` alone."""

    mode: Literal["first", "uniform"]
    ordering: Literal["idx", "key"]
    num_sections = 1

    def weight(self, job: JobState) -> float:
        return 1.0

    def replan(self, view: PolicyView) -> None:
        return None

    def section_table(self, view: PolicyView) -> np.ndarray | None:
        return None


class RandomPolicy(_Unplanned):
    """A device goes to a uniformly random eligible job with open demand."""

    mode: Literal["first", "uniform"] = "uniform"
    ordering: Literal["idx", "key"] = "idx"


class FifoPolicy(_Unplanned):
    """The earliest-arrived eligible job with open demand."""

    mode: Literal["first", "uniform"] = "first"
    ordering: Literal["idx", "key"] = "idx"  # idx is arrival order


class SrsfPolicy(_Unplanned):
    """The eligible job with the smallest remaining demand in its current round."""

    mode: Literal["first", "uniform"] = "first"
    ordering: Literal["idx", "key"] = "key"


class RandomOrderPolicy(_Unplanned):
    """The reference repository's random baseline (`RandomOrderScheduler` in its driver
    script): each round request draws a random priority, and a device goes to the
    eligible job with the best one, which keeps it until its round fills or closes.
    Unlike ``random`` it concentrates devices on one job at a time, so it cannot livelock.
    """

    mode: Literal["first", "uniform"] = "first"
    ordering: Literal["idx", "key"] = "key"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def weight(self, job: JobState) -> float:
        # The order key is a priority in (0, 1] drawn per round attempt: remaining
        # demand times this weight, whatever the remaining demand.
        draw = ((splitmix(self.seed, job.idx, job.attempts, 1) >> 11) + 1) / 2.0**53
        return draw / job.remaining
