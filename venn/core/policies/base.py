"""The one interface every policy implements.

A policy is pure preference: for each device signature it orders the open jobs that may
take the device. The mechanism (``venn.core.scheduler.Scheduler``) keeps the bookkeeping,
applies tier restrictions and fairness, and compiles the preference into a dispatch table
(``venn.core.compile``); it never asks which policy it runs.

A policy states its preference declaratively, so the mechanism can evaluate it for all
signatures at once:

- ``mode``: ``"first"`` (a device goes to the first candidate) or ``"uniform"`` (to a
  uniformly drawn one);
- ``ordering``: ``"idx"`` (arrival order) or ``"key"`` (the order key: the job's
  remaining demand times ``weight(job)``, then idx);
- ``weight(job)``: what the order key multiplies the open round's remaining demand by.
  It is read when the job's state changes (an assignment, a round event), so between
  two such events a job's key shrinks with its remaining demand at a fixed rate, which
  is what lets the compiled table say how long it stays valid;
- ``section_table(view)``: ``None`` (one section), or an int [signatures, groups] array:
  the section (below ``num_sections``) that group's jobs fall in for a device of that
  signature. A signature's candidates are its eligible jobs, section by section
  (ascending), each section in ``ordering``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar, overload

import numpy as np

from venn.core.lp_plan import Backlog
from venn.core.state import JobState

_T = TypeVar("_T")


class cached(Generic[_T]):
    """``functools.cached_property`` without the lock Python 3.11 takes on every access
    (the view and table properties are read once or twice per compile)."""

    def __init__(self, fn: Callable[[Any], _T]) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> cached[_T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> _T: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> _T | cached[_T]:
        if obj is None:
            return self
        value = self.fn(obj)
        obj.__dict__[self.name] = value  # later reads find it before this descriptor
        return value


GroupQueues = tuple[list[int], Sequence[Sequence[float]]]


@dataclass(frozen=True)
class PlanContext:
    """The time, the fleet's check-in rate and every unfinished job (its group, work
    left and the most devices per second it can take): what a plan over a horizon reads
    (``venn.core.lp_plan``)."""

    now: float
    rate_per_s: float
    backlog: list[Backlog]


class PolicyView:
    """What a policy may look at when the plan is recomputed.

    ``supply`` (recent check-ins per signature) and the group queues are computed on
    first use: a policy without a plan reads neither.
    """

    def __init__(
        self,
        sig_matrix: np.ndarray,
        supply: np.ndarray | Callable[[], np.ndarray],
        num_open: int,
        group_queues: GroupQueues | Callable[[], GroupQueues],
        group_scale: dict[int, float] | None = None,
        context: Callable[[], PlanContext] | None = None,
    ) -> None:
        self.sig_matrix = sig_matrix  # bool [signatures, groups]
        # What a plan over a horizon needs (the time, the fleet's rate, every unfinished
        # job); None where the mechanism does not give it (a tenant layer's base view).
        self.context = context
        if callable(supply):
            self._supply_fn = supply
        else:
            self.__dict__["supply"] = np.asarray(supply, dtype=np.float64)
        self.num_open = num_open
        self._queues = group_queues
        self.group_scale = group_scale or {}

    def __len__(self) -> int:
        return self.num_open

    @property
    def num_signatures(self) -> int:
        return int(self.sig_matrix.shape[0])

    @cached
    def supply(self) -> np.ndarray:
        return self._supply_fn()

    def group_queues(self) -> GroupQueues:
        """Groups with open jobs (ascending) and each one's order keys, ascending."""
        queues = self._queues
        return queues() if callable(queues) else queues


class Policy(Protocol):
    mode: Literal["first", "uniform"]
    ordering: Literal["idx", "key"]
    num_sections: int  # section ids in ``section_table`` are below this

    def weight(self, job: JobState) -> float:
        """Multiplier of the job's remaining demand in its order key and group queue
        (1.0: the open round's remaining demand itself). Read again whenever the job's
        state changes."""
        ...

    def replan(self, view: PolicyView) -> None:
        """Recompute any plan (called on round request, demand filled, round close)."""

    def section_table(self, view: PolicyView) -> np.ndarray | None:
        """Section of each group's jobs per signature (int [signatures, groups])."""
        ...
