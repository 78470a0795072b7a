"""Which input partitions have records waiting while the worker reads nothing from them.

A Faust worker can come back from a restart with some partitions assigned and fetched
but their records never delivered (seen in CI: after a SIGKILL and restart, venn.jobs sat
unread for more than three minutes while venn.checkins was served; after a replay from
offset 0, venn.rounds[3]). The cause is not proven. A suspect: when the consumer
generation changes while Faust hands out a fetched batch, it drops the rest of the batch
(``faust.transport.consumer.Consumer.getmany``) while the client's fetch position has
moved past those records; the seek to the committed offsets after a rebalance should
bring them back, but it is abandoned on a timeout or when another rebalance starts
(``faust.tables.recovery``). Nothing else notices: the process is up and answers. The worker
feeds this watch every few seconds, reports a stalled partition on /healthz and in
`venn_scheduler_stalled_partitions`, puts it back into Faust's fetch set if Faust had left
it out, or else fetches it again from the last record read, and stops (for its supervisor
to restart it) if that does not help. A partition not fetched since it was assigned has
no high watermark in the client; the worker asks the broker for its end offset, so that
such a partition is seen too. While the worker restores its tables, a second watch does
the same for the changelog partitions recovery is waiting for, by recovery's offsets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_STALL_S = 30.0


@dataclass
class StallWatch:
    stall_s: float = DEFAULT_STALL_S
    _moved: dict[tuple[str, int], tuple[int | None, float]] = field(default_factory=dict)

    def observe(
        self, topic: str, partition: int, position: int | None, behind: int, now: float
    ) -> None:
        """`position`: offset of the last record read (None before the first); `behind`:
        records between it and the high watermark."""
        key = (topic, partition)
        last = self._moved.get(key)
        if behind <= 0 or last is None or last[0] != position:
            self._moved[key] = (position, now)

    def forget_all_but(self, assigned: set[tuple[str, int]]) -> None:
        for key in set(self._moved) - assigned:
            del self._moved[key]

    def stalled(self, now: float) -> list[tuple[str, int, float]]:
        """(topic, partition, seconds without progress) of each partition with records
        waiting and no read for `stall_s` or more."""
        return sorted(
            (topic, partition, now - since)
            for (topic, partition), (_, since) in self._moved.items()
            if now - since >= self.stall_s
        )
