"""Hold decisions after a takeover until the predecessor's assignments are read back.

A worker accounts its own assignments only when it reads them back from venn.assignments
(`services.scheduler.state`). When it becomes the decider (a restart, or a standby taking
over), the assignments its predecessor published after the last commit are still ahead of
it on venn.assignments, and its rebuilt core does not know them: a check-in decided before
they are read back can fill the same round again, and the devices already told to train
make the round go over its demand (seen in CI: test_ledger_chaos, a round over its demand
after a SIGKILL and restart).

So from the takeover until every venn.assignments partition has been accounted for up to
its end offset as of the takeover, check-ins are counted as supply and declined, not
decided. The wait is bounded (`READBACK_MAX_S`): a partition that does not move is the
stall guard's to heal, and deciding late is better than never deciding.
Pure logic: the wiring gives it the ledger's next offsets and the end offsets."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

READBACK_MAX_S = 30.0

NextOffset = Callable[[int], int | None]
"""Partition of venn.assignments -> the lowest offset not accounted for (None: not begun)."""


class ReadBack:
    def __init__(
        self, next_offset: NextOffset, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.next_offset = next_offset
        self.clock = clock
        self.generation = 0
        self.targets: dict[int, int] | None = {}
        """Partition -> end offset to reach; None: armed, end offsets not known yet."""
        self.armed_at = 0.0
        self.gave_up = 0
        """Takeovers whose read-back outlasted `READBACK_MAX_S`."""

    def arm(self) -> int:
        """This worker just became the decider: hold until `expect`'s offsets are read.
        Returns the takeover's generation, to pass to `expect`."""
        self.generation += 1
        self.targets = None
        self.armed_at = self.clock()
        return self.generation

    def expect(self, generation: int, ends: Mapping[int, int]) -> None:
        """The end offsets of venn.assignments at the takeover ``generation``."""
        if generation == self.generation and self.targets is None:
            self.targets = {p: end for p, end in ends.items() if end > 0}

    def may_decide(self) -> bool:
        targets = self.targets
        if targets is not None and not targets:
            return True
        if self.clock() - self.armed_at > READBACK_MAX_S:
            log.warning("assignments not read back after %.0f s: deciding anyway", READBACK_MAX_S)
            self.targets = {}
            self.gave_up += 1
            return True
        if targets is None:
            return False
        for partition, end in list(targets.items()):
            at = self.next_offset(partition)
            if at is not None and at >= end:
                del targets[partition]
        return not targets
