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
and in `venn_scheduler_stalled_partitions` after `DEFAULT_STALL_S`; from
`DEFAULT_REFETCH_S` on, puts it back into Faust's fetch set if Faust had left it out
(`LedgerConsumer.fetch_state`), or else fetches it again from that lowest offset, and
stops the worker (for its supervisor to restart it) if that does not help. The
client's high watermarks are as of its last fetch (none before the first; stale once its
Fetcher crashed, as CI saw), so the worker asks the broker for the end offsets too. While
the worker restores its tables, a second watch does the same for the changelog
partitions recovery is waiting for, by recovery's offsets.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from enum import Enum

from services.scheduler import metrics
from venn.broker.faust_adapter import FaustPartitions, Part
from venn.broker.health import BrokerWatch

log = logging.getLogger(__name__)

DEFAULT_STALL_S = 30.0
"""No progress for this long with records waiting: stalled (/healthz fails)."""
DEFAULT_REFETCH_S = 10.0
"""No progress for this long: fetched again already. A refetch only costs records read
twice (the ledger skips those handled), and a takeover's read-back gives up after
READBACK_MAX_S (30 s): seen under load, a restarted worker's venn.assignments[3] sat at
offset 29 with Faust's read offset at 62, and the read-back gave up the moment the guard
first fetched it again."""
GUARD_INTERVAL_S = 5.0


class Remedy(Enum):
    WAIT = "wait"
    REFETCH = "refetch"
    GIVE_UP = "give up"


@dataclass
class StallWatch:
    stall_s: float = DEFAULT_STALL_S
    refetch_s: float = DEFAULT_REFETCH_S
    _moved: dict[tuple[str, int], tuple[int | None, float]] = field(default_factory=dict)
    _refetched: dict[tuple[str, int], tuple[int, float]] = field(default_factory=dict)
    """Partition -> the position it was last fetched again from, and its seconds stalled
    then."""

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
        for key in set(self._refetched) - assigned:
            del self._refetched[key]

    def position(self, topic: str, partition: int) -> int | None:
        """The position last observed for the partition."""
        last = self._moved.get((topic, partition))
        return last[0] if last is not None else None

    def remedy(self, topic: str, partition: int, seconds: float) -> Remedy:
        """For a partition stalled ``seconds`` that Faust fetches: fetch it again from its
        position, and again every `refetch_s` while it stays there; give up once it has
        stayed there for twice the stall time. A partition that moved on after a refetch
        and stalls again further on starts afresh. Seen in CI: a replay whose check-in
        partition stalled a second time was stopped, not fetched again; a refetch that
        did not heal a stall (the fetch then delivered nothing older than Faust's read
        offset, which a delivery still going through an earlier fetch had moved on)."""
        key = (topic, partition)
        position = self.position(topic, partition)
        if position is None:
            return Remedy.WAIT
        last = self._refetched.get(key)
        if last is not None and last[0] == position:
            if seconds >= 2 * self.stall_s:
                return Remedy.GIVE_UP
            if seconds - last[1] < self.refetch_s:
                return Remedy.WAIT
        self._refetched[key] = (position, seconds)
        return Remedy.REFETCH

    def stalled(self, now: float, after: float | None = None) -> list[tuple[str, int, float]]:
        """(topic, partition, seconds without progress) of each partition with records
        waiting and no read for ``after`` seconds (`stall_s` by default) or more."""
        least = self.stall_s if after is None else after
        return sorted(
            (topic, partition, now - since)
            for (topic, partition), (_, since) in self._moved.items()
            if now - since >= least
        )


class StallGuard:
    """Every `GUARD_INTERVAL_S`: the lag of each input partition, the two watches (inputs,
    and changelogs while restoring), and the remedies of the module doc."""

    def __init__(
        self, partitions: FaustPartitions, inputs: Collection[str], broker: BrokerWatch
    ) -> None:
        self.partitions = partitions
        self.inputs = inputs
        self.broker = broker
        self.stalls = StallWatch()
        self.restoring = StallWatch()
        """Changelog partitions while the worker restores its tables."""

    async def check(self) -> None:
        parts = self.partitions
        available = self.broker.available
        now = time.monotonic()
        assigned = parts.assigned(self.inputs)
        # Nothing is read while the broker is away: that is an outage (/healthz says so),
        # not a stall; the watch starts afresh once the broker is back.
        self.stalls.forget_all_but(set(assigned) if available else set())
        ends: dict[Part, int] = {}
        with contextlib.suppress(Exception):
            # The broker's end offsets, not only the client's high watermarks: those are
            # as of the last fetch, so a consumer that stopped fetching (its Fetcher
            # crashed) showed nothing behind while records waited.
            if assigned and available:
                ends = await parts.end_offsets(assigned)
        for part in assigned:
            # What the agents accounted for, not what Faust read (issue 25).
            position = parts.next_offset(part)
            with contextlib.suppress(Exception):
                fetched, end = parts.highwater(part), ends.get(part)
                high = max(h for h in (fetched, end) if h is not None)
                if position is None:  # not begun: nothing committable either
                    continue
                # The lag page keeps the client's view where it has one: the broker's end
                # counts a record written a moment ago (venn.status, every 2 s, by this
                # worker) as behind until the next pass, 5 s later.
                shown = fetched if fetched is not None else high
                metrics.LAG.labels(part[0], str(part[1])).set(max(0, shown - position))
                if available:
                    self.stalls.observe(*part, position, max(0, high - position), now)
        stalled = self.stalls.stalled(now)
        recovering = parts.in_recovery
        if recovering and available:
            for part, (offset, behind) in parts.restoring().items():
                # Re-read from the last record restored (the start before the first).
                position = max(0, offset) if offset is not None else 0
                self.restoring.observe(*part, position, behind, now)
        else:
            self.restoring.forget_all_but(set())
        stuck = self.restoring.stalled(now)
        metrics.STALLED.set(len(stalled) + len(stuck))
        due = self.stalls.stalled(now, self.stalls.refetch_s)
        if due and not recovering:
            await self._unstall(due, self.stalls)
        due = self.restoring.stalled(now, self.restoring.refetch_s)
        if due:
            # A changelog partition that recovery waits for and reads nothing of would
            # hold every stream: the same remedy as for an input.
            await self._unstall(due, self.restoring)

    async def _unstall(self, stalled: list[tuple[str, int, float]], watch: StallWatch) -> None:
        """A partition Faust left out of its fetch set is put back; one it fetches but
        delivers nothing of is fetched again from where the watch saw it stop (an input's
        lowest offset not handled, a changelog's restored offset); one still stalled after
        twice the stall time there stops the worker, which resumes from its committed
        offsets once restarted (`StallWatch.remedy`)."""
        parts = self.partitions
        assigned = set(parts.assigned())
        for topic, partition, seconds in stalled:
            part = (topic, partition)
            if part not in assigned:  # revoked meanwhile
                continue
            state = parts.fetch_state(part)
            log.log(
                logging.ERROR if seconds >= watch.stall_s else logging.WARNING,
                "%s[%d] has records waiting and none handled for %.0f s from offset %s "
                "(fetched: %s, paused: %s, buffered: %s, Faust's read offset: %s)",
                topic,
                partition,
                seconds,
                watch.position(topic, partition),
                state.fetched,
                state.paused,
                state.buffered,
                state.read_offset,
            )
            if not state.fetched:
                parts.resume_fetching(part)
                metrics.STALL_RESUMED.inc()
                continue
            remedy = watch.remedy(topic, partition, seconds)
            if remedy is Remedy.REFETCH:
                offset = watch.position(topic, partition)
                assert offset is not None
                await parts.seek(part, offset)
                metrics.STALL_REFETCHED.inc()
            elif remedy is Remedy.GIVE_UP:
                await parts.crash(RuntimeError(f"{topic}[{partition}] unread for {seconds:.0f} s"))
