"""The jobs whose open round still needs devices, kept sorted event by event.

A plan or table compile used to rebuild its view of the open jobs from every job's state
(linear in the jobs, in Python, at every compile). Here the mechanism *touches* a job
whenever an event may change its state (an assignment, a round opened or closed, a
restriction lifted, a registration) and ``refresh`` re-files only the touched jobs:

- per job its entry: group, tier restriction, remaining demand, weight and order key;
- per group its queue: the order keys of its open jobs, ascending (IRS's input);
- per class (group, tier restriction) its jobs in preference order (the compile's input:
  a class's jobs share every row section of the dispatch table, so its head is its
  first job);
- every open job in preference order (the compile walks back from a head to the job it
  would overtake).

Reading the job's state at refresh time rather than at the event keeps one write path:
whatever wrote the fields (the mechanism, a snapshot restore), the next compile sees it.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from venn.core.dispatch import NO_LIMIT
from venn.core.state import JobState

OrderKey = tuple[float, int] | int  # (key, idx) for ordering "key", idx for "idx"


class OpenEntry:
    """An open job as the plan and the compile see it (never changed once filed)."""

    __slots__ = ("group", "idx", "key", "klass", "order", "remaining", "tier", "weight")

    def __init__(
        self,
        idx: int,
        group: int,
        tier: int | None,
        remaining: int,
        weight: float,
        key: float,
        order: OrderKey,
        klass: int,
    ) -> None:
        self.idx = idx
        self.group = group
        self.tier = tier
        self.remaining = remaining
        self.weight = weight
        self.key = key  # remaining * weight: its place in its group queue
        self.order = order  # its place in preference order
        self.klass = klass  # group * (tiers + 1) + tier + 1 (0 when unrestricted)


class OpenJobs:
    """Open jobs with their queue, class and preference-order positions."""

    def __init__(self, num_tiers: int, by_key: bool) -> None:
        self.num_tiers = num_tiers
        self.by_key = by_key  # ordering "key" (else arrival order, idx)
        self.entries: dict[int, OpenEntry] = {}  # idx -> entry
        self.queues: dict[int, list[float]] = {}  # group -> keys, ascending
        self.classes: dict[int, list[OrderKey]] = {}  # class -> order keys, ascending
        self.order: list[OrderKey] = []  # every open job's order key, ascending
        # (first order key, class) of every class, ascending: the classes in the order
        # of their first jobs, kept as jobs are filed (a compile reads it as is).
        self.heads: list[tuple[OrderKey, int]] = []
        self.restricted: set[int] = set()  # open idx whose round is restricted to a tier
        self.touched: set[int] = set()
        # Remaining demand by idx (NO_LIMIT where closed): a fresh table's budgets.
        self._budget = np.full(64, NO_LIMIT, dtype=np.int64)
        self.changed = 0  # refreshes that changed an entry (for tests and benchmarks)

    def __len__(self) -> int:
        return len(self.entries)

    def touch(self, idx: int) -> None:
        """The job's state may have changed: re-file it at the next ``refresh``."""
        self.touched.add(idx)

    def klass(self, group: int, tier: int | None) -> int:
        return group * (self.num_tiers + 1) + (0 if tier is None else tier + 1)

    def refresh(self, by_idx: Sequence[JobState], weight: Callable[[JobState], float]) -> None:
        """Re-file every touched job from its current state."""
        touched = self.touched
        if not touched:
            return
        self.touched = set()
        for idx in touched:  # the result does not depend on the order
            self._file(by_idx[idx], weight)

    def refile_all(self, states: Iterable[JobState], weight: Callable[[JobState], float]) -> None:
        """Re-file every job of ``states`` (their weights all changed)."""
        self.touched = set()
        for js in states:
            self._file(js, weight)

    def _file(self, js: JobState, weight: Callable[[JobState], float]) -> None:
        idx = js.idx
        old = self.entries.get(idx)
        if js.round_open and js.remaining > 0:
            w = weight(js)
            r = js.remaining
            key = r * w
            tier = js.tier
            klass = js.group * (self.num_tiers + 1) + (0 if tier is None else tier + 1)
            if old is not None and old.klass == klass:
                if old.remaining == r and old.weight == w and old.key == key:
                    return
                order: OrderKey = (key, idx) if self.by_key else idx
                self.changed += 1
                self._move(old, OpenEntry(idx, js.group, tier, r, w, key, order, klass))
                return
            order = (key, idx) if self.by_key else idx
            entry: OpenEntry | None = OpenEntry(idx, js.group, tier, r, w, key, order, klass)
        else:
            if old is None:
                return
            entry = None
        self.changed += 1
        if old is not None:
            self._remove(old)
        if entry is not None:
            self._insert(entry)

    def _move(self, old: OpenEntry, e: OpenEntry) -> None:
        """Re-file a job within its class (its remaining demand or weight changed): the
        same end state as ``_remove`` then ``_insert``, with fewer list operations."""
        self.entries[e.idx] = e
        self._budget[e.idx] = e.remaining
        q = self.queues[e.group]
        del q[bisect_left(q, old.key)]
        insort(q, e.key)
        members = self.classes[e.klass]
        first = members[0]
        del members[bisect_left(members, old.order)]  # type: ignore[arg-type]
        insort(members, e.order)  # type: ignore[type-var]
        if members[0] != first:  # the class's first job changed
            heads = self.heads
            del heads[bisect_left(heads, (first, e.klass))]  # type: ignore[arg-type]
            insort(heads, (members[0], e.klass))  # type: ignore[type-var]
        order = self.order
        del order[bisect_left(order, old.order)]  # type: ignore[arg-type]
        insort(order, e.order)  # type: ignore[type-var]

    def _remove(self, e: OpenEntry) -> None:
        del self.entries[e.idx]
        self._budget[e.idx] = NO_LIMIT
        q = self.queues[e.group]
        del q[bisect_left(q, e.key)]
        if not q:
            del self.queues[e.group]
        members = self.classes[e.klass]
        at = bisect_left(members, e.order)  # type: ignore[arg-type]
        del members[at]
        if at == 0:  # the class's first job changes
            heads = self.heads
            del heads[bisect_left(heads, (e.order, e.klass))]  # type: ignore[arg-type]
            if members:
                insort(heads, (members[0], e.klass))  # type: ignore[type-var]
        if not members:
            del self.classes[e.klass]
        order = self.order
        del order[bisect_left(order, e.order)]  # type: ignore[arg-type]
        if e.tier is not None:
            self.restricted.discard(e.idx)

    def _insert(self, e: OpenEntry) -> None:
        self.entries[e.idx] = e
        if e.idx >= len(self._budget):
            grown = np.full(max(2 * len(self._budget), e.idx + 1), NO_LIMIT, dtype=np.int64)
            grown[: len(self._budget)] = self._budget
            self._budget = grown
        self._budget[e.idx] = e.remaining
        q = self.queues.get(e.group)
        if q is None:
            self.queues[e.group] = [e.key]
        else:
            insort(q, e.key)
        members = self.classes.get(e.klass)
        heads = self.heads
        if members is None:
            self.classes[e.klass] = [e.order]
            insort(heads, (e.order, e.klass))  # type: ignore[type-var]
        else:
            at = bisect_left(members, e.order)  # type: ignore[arg-type]
            members.insert(at, e.order)
            if at == 0:  # it becomes the class's first job
                del heads[bisect_left(heads, (members[1], e.klass))]  # type: ignore[arg-type]
                insort(heads, (e.order, e.klass))  # type: ignore[type-var]
        insort(self.order, e.order)  # type: ignore[type-var]
        if e.tier is not None:
            self.restricted.add(e.idx)

    # -- reads ------------------------------------------------------------------------
    def group_queues(self) -> tuple[list[int], list[list[float]]]:
        """Groups with open jobs, ascending, and each one's keys, ascending."""
        groups = sorted(self.queues)
        return groups, [self.queues[g] for g in groups]

    def budgets(self, num_jobs: int) -> np.ndarray:
        """A new array of every job's remaining demand (NO_LIMIT if not open)."""
        if num_jobs <= len(self._budget):
            return self._budget[:num_jobs].copy()
        out = np.full(num_jobs, NO_LIMIT, dtype=np.int64)
        out[: len(self._budget)] = self._budget
        return out

    def in_order(self) -> list[int]:
        """Open idx in preference order."""
        if not self.by_key:
            return list(self.order)  # type: ignore[arg-type]
        return [o[1] for o in self.order]  # type: ignore[index]

    def idx_ascending(self) -> list[int]:
        """Open idx, ascending."""
        return sorted(self.entries)

    def idx_of(self, order: OrderKey) -> int:
        return order[1] if isinstance(order, tuple) else order

    def open_counts(self) -> dict[int, int]:
        """Open jobs per group."""
        return {g: len(q) for g, q in self.queues.items()}
