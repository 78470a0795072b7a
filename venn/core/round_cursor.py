"""Where a job's round attempts stand, by their events: the replay rules of round requests
and closes, written once.

Every reader of a job's round events folds them with these rules (the core's scheduler
through ``JobState.rounds``; ``venn.core.lifecycle``'s ``JobLife``, which adds the events'
content). Events arrive at least once and, across venn.jobs and venn.rounds, in any order:

- an attempt opens when its request is read, only if no later attempt was seen (a failed
  round's retry is a new, higher index, so a replayed or stale request is ignored) and its
  close has not been read already (a close that overtook its request ends the attempt);
- the first close of an attempt counts; any other is a replay (whether its content differs
  is for the reader that keeps the content to say);
- once the job ended, no attempt opens.

Pure, and small whatever the number of rounds: indices are kept as a prefix plus the few
above it (`IndexSet`). The cursor is a struct a snapshot stores as it is.
"""

from __future__ import annotations

import bisect
from enum import Enum
from typing import Annotated

import msgspec

from venn import fields


class Applied(Enum):
    """What one event did to a fold."""

    CHANGED = "changed"
    REPLAY = "replay"  # already applied (the same event, or an equal one)
    STALE = "stale"  # superseded: an older attempt, or the job had ended
    CONFLICT = "conflict"  # a second, different close of an attempt
    IGNORED = "ignored"  # not an event of a job's life


class IndexSet(msgspec.Struct, kw_only=True):
    """A set of indices >= 0: every index below ``below``, and ``above`` (sorted, each above
    ``below``). Rounds are numbered up from 0, so ``above`` holds only the few out of
    order."""

    below: fields.RoundCount = 0
    above: Annotated[list[fields.RoundIndex], msgspec.Meta(max_length=fields.ROUNDS_MAX)] = (
        msgspec.field(default_factory=list)
    )

    def __contains__(self, index: int) -> bool:
        if index < self.below:
            return index >= 0
        i = bisect.bisect_left(self.above, index)
        return i < len(self.above) and self.above[i] == index

    def add(self, index: int) -> bool:
        """Add ``index``; False if it was there."""
        if index in self:
            return False
        if index == self.below:
            self.below += 1
            while self.above and self.above[0] == self.below:
                self.above.pop(0)
                self.below += 1
        else:
            bisect.insort(self.above, index)
        return True

    @property
    def last(self) -> int:
        """The highest index (-1: none)."""
        return self.above[-1] if self.above else self.below - 1

    def copy(self) -> IndexSet:
        return IndexSet(below=self.below, above=list(self.above))


class RoundCursor(msgspec.Struct, kw_only=True):
    requested: IndexSet = msgspec.field(default_factory=IndexSet)
    closed: IndexSet = msgspec.field(default_factory=IndexSet)
    ended: bool = False

    @classmethod
    def at(cls, round_index: int, round_open: bool) -> RoundCursor:
        """The cursor of a job whose attempts up to ``round_index`` were requested and
        closed in order, the last still open if ``round_open``."""
        closed = round_index + 1 - round_open if round_index >= 0 else 0
        return cls(requested=IndexSet(below=round_index + 1), closed=IndexSet(below=closed))

    def request(self, index: int) -> Applied:
        if self.ended:
            return Applied.STALE
        if index in self.requested:
            return Applied.REPLAY
        if index not in self.closed and index < self.last:
            return Applied.STALE
        self.requested.add(index)
        return Applied.CHANGED

    def close(self, index: int) -> Applied:
        return Applied.CHANGED if self.closed.add(index) else Applied.REPLAY

    def end(self) -> Applied:
        if self.ended:
            return Applied.REPLAY
        self.ended = True
        return Applied.CHANGED

    @property
    def last(self) -> int:
        """The highest attempt index seen, by its request or its close (-1: none)."""
        return max(self.requested.last, self.closed.last)

    @property
    def open_index(self) -> int | None:
        """The attempt requested and not closed (only the last one can be), if any."""
        last = self.last
        if self.ended or last not in self.requested or last in self.closed:
            return None
        return last

    def copy(self) -> RoundCursor:
        return RoundCursor(
            requested=self.requested.copy(), closed=self.closed.copy(), ended=self.ended
        )
