"""The one interface every policy implements.

A policy is pure preference: for each device signature it orders the open jobs that may
take the device. The mechanism (``venn.core.scheduler.Scheduler``) applies tier
restrictions, compiles the orders into a dispatch table and keeps the bookkeeping.

A policy states its preference declaratively, so the mechanism can evaluate it for all
signatures at once (with numpy, or plain Python when the instance is small):

- ``ordering``: ``"idx"`` (arrival order) or ``"key"`` (``OpenJob.order_key``: weighted
  remaining demand, then idx);
- ``section_table(view)``: ``None`` (one section), or an int [signatures, groups] array:
  the section (below ``num_sections``) that group's jobs fall in for a device of that
  signature. A signature's candidates are its eligible jobs, section by section
  (ascending), each section in ``ordering``.

``sections(view, signature)`` spells the same thing out as lists of ``OpenJob`` (for
readers and tests; the scheduler does not call it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar, overload

import numpy as np

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


class PolicyView:
    """Everything a policy may look at when the plan is recomputed.

    The open jobs are columns sorted by idx, as Python lists (``idx_list`` ...) and, on
    first use, numpy arrays (``idx`` ...). ``supply`` (recent check-ins per signature)
    is computed on first use too.
    """

    def __init__(
        self,
        sig_matrix: np.ndarray,
        supply: np.ndarray | Callable[[], np.ndarray],
        idx: Sequence[int] = (),
        group: Sequence[int] = (),
        remaining: Sequence[int] = (),
        weight: Sequence[float] | None = None,
        group_scale: dict[int, float] | None = None,
        job_ids: Sequence[str] | Callable[[], Sequence[str]] | None = None,
    ) -> None:
        self.sig_matrix = sig_matrix  # bool [signatures, groups]
        if callable(supply):
            self._supply_fn = supply
        else:
            self.__dict__["supply"] = np.asarray(supply, dtype=np.float64)
        self.idx_list = idx if isinstance(idx, list) else list(idx)
        self.group_list = group if isinstance(group, list) else list(group)
        self.remaining_list = remaining if isinstance(remaining, list) else list(remaining)
        self.weighted = weight is not None
        self.weight_list = list(weight) if weight is not None else [1.0] * len(self.idx_list)
        self.group_scale = group_scale or {}
        self._job_ids = job_ids

    @classmethod
    def from_jobs(
        cls,
        sig_matrix: np.ndarray,
        supply: np.ndarray,
        open_jobs: Sequence[OpenJob],
        group_scale: dict[int, float] | None = None,
    ) -> PolicyView:
        jobs = sorted(open_jobs, key=lambda j: j.idx)
        weighted = any(j.weight != 1.0 for j in jobs)
        return cls(
            sig_matrix,
            supply,
            [j.idx for j in jobs],
            [j.group for j in jobs],
            [j.remaining for j in jobs],
            [j.weight for j in jobs] if weighted else None,
            group_scale,
            [j.job_id for j in jobs],
        )

    def __len__(self) -> int:
        return len(self.idx_list)

    @property
    def num_signatures(self) -> int:
        return int(self.sig_matrix.shape[0])

    @cached
    def supply(self) -> np.ndarray:
        return self._supply_fn()

    # -- numpy columns ----------------------------------------------------------------
    @cached
    def idx(self) -> np.ndarray:
        return np.array(self.idx_list, dtype=np.int64)

    @cached
    def group(self) -> np.ndarray:
        return np.array(self.group_list, dtype=np.int64)

    @cached
    def remaining(self) -> np.ndarray:
        return np.array(self.remaining_list, dtype=np.int64)

    @cached
    def weight(self) -> np.ndarray:
        return np.array(self.weight_list, dtype=np.float64)

    @cached
    def keys(self) -> np.ndarray:
        """Weighted remaining demand (the first part of ``OpenJob.order_key``)."""
        return self.remaining * self.weight

    @cached
    def key_list(self) -> list[float]:
        return [r * w for r, w in zip(self.remaining_list, self.weight_list, strict=True)]

    def order(self, ordering: str) -> np.ndarray:
        """Positions in preference order, as an array."""
        n = len(self)
        if ordering == "idx" or n < 2:
            return np.arange(n)
        if self.weighted:
            return np.lexsort((self.idx, self.keys))
        # idx is ascending, so a stable sort by remaining breaks ties by idx.
        return np.argsort(self.remaining, kind="stable")

    def order_list(self, ordering: str) -> list[int]:
        """Positions in preference order, as a list."""
        n = len(self)
        if ordering == "idx" or n < 2:
            return list(range(n))
        # Python's sort is stable and positions are in idx order: ties go by idx. With
        # unit weights, remaining * 1.0 orders exactly as remaining does.
        keys = self.key_list if self.weighted else self.remaining_list
        return sorted(range(n), key=keys.__getitem__)

    def group_queues(self) -> tuple[list[int], Sequence[Sequence[float] | np.ndarray]]:
        """Groups with open jobs and each one's weighted remaining demands, ascending."""
        n = len(self)
        if n > 256:
            keys = self.keys
            order = np.lexsort((keys, self.group))
            groups = self.group[order]
            ends = (np.flatnonzero(groups[1:] != groups[:-1]) + 1).tolist()
            starts = [0, *ends]
            sorted_keys = keys[order]
            return (
                groups[starts].tolist(),
                [sorted_keys[a:b] for a, b in zip(starts, [*ends, n], strict=True)],
            )
        queues: dict[int, list[float]] = {}
        for g, k in zip(self.group_list, self.key_list, strict=True):
            q = queues.get(g)
            if q is None:
                queues[g] = [k]
            else:
                q.append(k)
        for q in queues.values():
            q.sort()
        return list(queues), list(queues.values())

    @cached
    def open_jobs(self) -> tuple[OpenJob, ...]:
        ids = self._job_ids
        if callable(ids):
            ids = ids()
        if ids is None:
            ids = [str(i) for i in self.idx_list]
        return tuple(
            OpenJob(i, job_id, g, r, w)
            for i, job_id, g, r, w in zip(
                self.idx_list,
                ids,
                self.group_list,
                self.remaining_list,
                self.weight_list,
                strict=True,
            )
        )


QueueKey = Literal["round", "job", "random"]

Sections = list[list[OpenJob]]
"""Ordered candidate sections of one signature; order inside a section may change as
remaining demands shrink, order between sections may not."""


class Policy(Protocol):
    name: str
    mode: Literal["first", "uniform"]
    ordering: Literal["idx", "key"]
    remaining_ordered: bool  # does order depend on remaining demand? (ordering == "key")
    # What an ordered policy's key counts: the open round's remaining demand ("round"),
    # the job's remaining work ("job": later rounds too), or a random priority drawn per
    # round attempt ("random": the job keeps it until that round fills or closes).
    queue_key: QueueKey
    num_sections: int  # section ids in ``section_table`` are below this

    def replan(self, view: PolicyView) -> None:
        """Recompute any plan (called on round request, demand filled, round close)."""

    def section_table(self, view: PolicyView) -> np.ndarray | None:
        """Section of each group's jobs per signature (int [signatures, groups])."""
        ...

    def sections(self, view: PolicyView, signature: int) -> Sections:
        """Candidates for a device of this signature, in preference order."""
        ...


def sections_of(policy: Policy, view: PolicyView, signature: int) -> Sections:
    """The candidate lists of one signature as ``OpenJob`` sections (the reading aid)."""
    jobs = view.open_jobs
    row = view.sig_matrix[signature]
    order = [p for p in view.order_list(policy.ordering) if row[jobs[p].group]]
    table = policy.section_table(view)
    if table is None:
        return [[jobs[p] for p in order]]
    sec = table[signature]
    return [[jobs[p] for p in order if sec[jobs[p].group] == s] for s in range(policy.num_sections)]


def eligible_jobs(view: PolicyView, signature: int) -> list[OpenJob]:
    row = view.sig_matrix[signature]
    return [j for j in view.open_jobs if row[j.group]]
