"""Which input offsets a consumer has accounted for, per partition, and what it made of each.

A consumer that owns a partition `begin`s it at the offset it resumes from (the group's
committed offset, or the log's start when none is committed: everything below was
accounted for by whoever committed it). Each record it then reads ends in exactly one
`Outcome`, given to `account`. `next_offset` is the lowest offset not accounted for yet:
the only offset that may be committed (a commit past it would lose the record for good if
the process dies), and the position that lag and stall detection compare with the high
watermark. `forget` drops a partition that was revoked.

A reader that knows the log no longer holds some offsets (compaction, transaction markers:
its consumer skipped from one record to a later one) says so with `absent`; any other
offset that never comes leaves its partition uncommittable: a stall to be seen, never a
silent loss. Pure logic; the counts are exposed by the services (`observe`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, get_args

Outcome = Literal["handled", "dead_lettered", "deduplicated", "dropped_stale"]
"""handled: applied; dead_lettered: a dead letter stands for it (sent by this reader or by
the topic's owner, `venn.broker.stream`); deduplicated: a replay of an event already
applied (by event id); dropped_stale: too old to act on."""
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)

Key = tuple[str, int]
"""(topic, partition)"""


@dataclass(slots=True)
class _Partition:
    next: int | None = None
    """Lowest offset not accounted for; None until `begin`."""
    ahead: set[int] = field(default_factory=set)
    """Offsets accounted for above `next` (out of order, or before `begin`)."""

    def advance(self) -> None:
        assert self.next is not None
        while self.next in self.ahead:
            self.ahead.discard(self.next)
            self.next += 1


@dataclass
class OffsetLedger:
    observe: Callable[[str, int, Outcome], None] | None = None
    """Called once per offset accounted for (e.g. a Prometheus counter)."""
    counts: dict[tuple[str, int, Outcome], int] = field(default_factory=dict)
    """(topic, partition, outcome) -> offsets accounted for, since the process started."""
    _parts: dict[Key, _Partition] = field(default_factory=dict)

    def begin(self, topic: str, partition: int, offset: int) -> None:
        """Start accounting at ``offset``; a partition already begun keeps its place."""
        part = self._parts.setdefault((topic, partition), _Partition())
        if part.next is not None:
            return
        part.next = offset
        part.ahead = {o for o in part.ahead if o >= offset}
        part.advance()

    def begun(self, topic: str, partition: int) -> bool:
        part = self._parts.get((topic, partition))
        return part is not None and part.next is not None

    def accounted(self, topic: str, partition: int, offset: int) -> bool:
        """Was ``offset`` accounted for already (a redelivered record)?"""
        part = self._parts.get((topic, partition))
        if part is None:
            return False
        if part.next is not None and offset < part.next:
            return True
        return offset in part.ahead

    def account(self, topic: str, partition: int, offset: int, outcome: Outcome) -> bool:
        """Record what became of ``offset``; False (and nothing counted) if it was
        accounted for already."""
        if self.accounted(topic, partition, offset):
            return False
        part = self._parts.setdefault((topic, partition), _Partition())
        part.ahead.add(offset)
        if part.next is not None:
            part.advance()
        key = (topic, partition, outcome)
        self.counts[key] = self.counts.get(key, 0) + 1
        if self.observe is not None:
            self.observe(topic, partition, outcome)
        return True

    def absent(self, topic: str, partition: int, upto: int) -> None:
        """The log holds no record from the next offset up to ``upto`` (excluded): the
        reader's consumer went from one record straight to ``upto``."""
        part = self._parts.get((topic, partition))
        if part is None or part.next is None or part.next >= upto:
            return
        part.next = upto
        part.ahead = {o for o in part.ahead if o >= upto}
        part.advance()

    def next_offset(self, topic: str, partition: int) -> int | None:
        """The lowest offset not accounted for (None before `begin`): what may be committed."""
        part = self._parts.get((topic, partition))
        return part.next if part is not None else None

    def forget(self, topic: str, partition: int) -> None:
        self._parts.pop((topic, partition), None)

    def partitions(self) -> list[Key]:
        return sorted(self._parts)

    def total(self, topic: str, partition: int) -> int:
        """Offsets of the partition accounted for since the process started."""
        return sum(n for (t, p, _), n in self.counts.items() if (t, p) == (topic, partition))
