"""Which partitions have records waiting while the worker handles nothing from them.

A Faust worker could come back from a restart with a partition assigned and fetched but
its records never handled (seen in CI: after a SIGKILL and restart, venn.jobs sat
unhandled for more than three minutes while venn.checkins was served). Issue 25 found one
cause (docs/notes/faust-record-loss.md): records delivered into a stream buffer that a flow
resume then clears, with Faust's read offset past them; `venn.broker.faust_adapter` now
seeks back to the lowest offset not handled after every resume, and commits never pass
it. This watch stays as the net for a cause not known yet. It compares each input
partition's lowest offset not accounted for in the offset ledger (`venn.broker.ledger`;
not Faust's read offset, which had moved past the lost records) with its high watermark,
every few seconds; reports a partition with records waiting and no progress on /healthz
and in `venn_scheduler_stalled_partitions`; puts it back into Faust's fetch set if Faust
had left it out (`LedgerConsumer.fetch_state`), or else fetches it again from that lowest
offset, and stops the worker (for its supervisor to restart it) if that does not help. A
partition not fetched since it was assigned has no high watermark in the client; the
worker asks the broker for its end offset, so that such a partition is seen too. While
the worker restores its tables, a second watch does the same for the changelog
partitions recovery is waiting for, by recovery's offsets.
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
        """`position`: where the partition stands (an input's lowest offset not handled);
        `behind`: records between it and the high watermark."""
        key = (topic, partition)
        last = self._moved.get(key)
        if behind <= 0 or last is None or last[0] != position:
            self._moved[key] = (position, now)

    def forget_all_but(self, assigned: set[tuple[str, int]]) -> None:
        for key in set(self._moved) - assigned:
            del self._moved[key]

    def position(self, topic: str, partition: int) -> int | None:
        """The position last observed for the partition."""
        last = self._moved.get((topic, partition))
        return last[0] if last is not None else None

    def stalled(self, now: float) -> list[tuple[str, int, float]]:
        """(topic, partition, seconds without progress) of each partition with records
        waiting and no read for `stall_s` or more."""
        return sorted(
            (topic, partition, now - since)
            for (topic, partition), (_, since) in self._moved.items()
            if now - since >= self.stall_s
        )
