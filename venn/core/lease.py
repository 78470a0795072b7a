"""Leases: how P check-in partitions share a round's demand without a global lock.

The single owner of job state (``LeaseBook``) grants each check-in partition a quota of
every open round; a partition (``PartitionLeases``) assigns a device to a job only
while it holds quota for the job's open round, and reports its use back. Both messages
are *cumulative* (``granted_total``, ``used_total``), so a duplicate, a replay or an
out-of-order copy is harmless: each side keeps the maximum it has seen.

Invariant: for every round, the owner's grants sum to at most the round's demand D,
and a partition never uses more than it was granted, so however the partitions
interleave a round gets at most D assignments.

Grant rule (``LeaseRule``): at round open each partition gets
``ceil(initial_share * D / P)`` (until D runs out); the rest is a reserve. When a
partition's unused quota falls to its low-water mark (``low_water`` times the last grant
it received, rounded down), it reports, and the owner tops it up with
``ceil(reserve / P)`` (guided self-scheduling: chunks shrink as the reserve does, so
little quota is stranded on partitions that see few eligible devices when the round
ends). Quota is never taken back: a grant cannot be revoked without a global
round trip, and cumulative grants that only grow are what makes duplicates harmless.

Only a job's newest round is kept on either side: a message about an older round is
ignored, one about a newer round replaces the older round's lease.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Grant:
    """Owner -> partition: ``partition`` may make ``granted_total`` assignments in all
    to round ``round_index`` of ``job_id``."""

    job_id: str
    round_index: int
    partition: int
    granted_total: int


@dataclass(frozen=True)
class Report:
    """Partition -> owner: ``partition`` has made ``used_total`` assignments in all to
    round ``round_index`` of ``job_id``."""

    job_id: str
    round_index: int
    partition: int
    used_total: int


@dataclass(frozen=True)
class LeaseRule:
    """How the owner splits a round's demand between ``partitions`` partitions."""

    partitions: int
    initial_share: float = 0.5  # of D handed out at round open, evenly
    low_water: float = 0.5  # report (and top up) at this fraction of the last grant

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ValueError("partitions must be >= 1")
        if not 0.0 < self.initial_share <= 1.0 or not 0.0 <= self.low_water < 1.0:
            raise ValueError("initial_share in (0, 1], low_water in [0, 1)")

    def initial_chunk(self, demand: int) -> int:
        """Each partition's first grant of a round of demand ``demand``."""
        return math.ceil(self.initial_share * demand / self.partitions)

    def top_up(self, unallocated: int) -> int:
        """One top-up out of a reserve of ``unallocated`` (0 when it is empty)."""
        return math.ceil(unallocated / self.partitions)

    def low_mark(self, last_grant: int) -> int:
        """Unused quota at or below which a partition asks for more."""
        return math.floor(self.low_water * last_grant)


@dataclass
class _OwnedRound:
    round_index: int
    demand: int
    granted: list[int]
    used: list[int]
    last: list[int]  # size of the last grant to each partition

    @property
    def unallocated(self) -> int:
        return self.demand - sum(self.granted)


class LeaseBook:
    """The owner's side: every open round's grants and the partitions' reported use."""

    def __init__(self, rule: LeaseRule) -> None:
        self.rule = rule
        self._rounds: dict[str, _OwnedRound] = {}

    def open_round(self, job_id: str, round_index: int, demand: int) -> list[Grant]:
        """Start leasing a round of ``demand`` (the remaining demand at round start);
        returns the initial grants. A replayed or older round yields nothing."""
        cur = self._rounds.get(job_id)
        if cur is not None and cur.round_index >= round_index:
            return []
        p = self.rule.partitions
        rnd = self._rounds[job_id] = _OwnedRound(
            round_index, max(0, demand), [0] * p, [0] * p, [0] * p
        )
        chunk = self.rule.initial_chunk(rnd.demand)
        out = []
        for part in range(p):
            amount = min(chunk, rnd.unallocated)
            if amount <= 0:
                break
            out.append(self._grant(job_id, rnd, part, amount))
        return out

    def close_round(self, job_id: str, round_index: int) -> None:
        """Forget a closed round (its late reports are then ignored)."""
        cur = self._rounds.get(job_id)
        if cur is not None and cur.round_index <= round_index:
            del self._rounds[job_id]

    def on_report(self, report: Report) -> list[Grant]:
        """Record a partition's cumulative use; returns the top-up it earns, if any."""
        rnd = self._rounds.get(report.job_id)
        if rnd is None or rnd.round_index != report.round_index:
            return []
        part = report.partition
        rnd.used[part] = max(rnd.used[part], min(report.used_total, rnd.granted[part]))
        unused = rnd.granted[part] - rnd.used[part]
        if unused > self.rule.low_mark(rnd.last[part]):
            return []
        amount = min(self.rule.top_up(rnd.unallocated), rnd.unallocated)
        if amount <= 0:
            return []
        return [self._grant(report.job_id, rnd, part, amount)]

    def _grant(self, job_id: str, rnd: _OwnedRound, part: int, amount: int) -> Grant:
        rnd.granted[part] += amount
        rnd.last[part] = amount
        return Grant(job_id, rnd.round_index, part, rnd.granted[part])

    def granted(self, job_id: str, round_index: int) -> tuple[int, ...]:
        """Each partition's granted total for the round (empty if not leased)."""
        rnd = self._rounds.get(job_id)
        if rnd is None or rnd.round_index != round_index:
            return ()
        return tuple(rnd.granted)

    def unallocated(self, job_id: str, round_index: int) -> int:
        """The round's reserve: demand not yet granted to any partition."""
        rnd = self._rounds.get(job_id)
        if rnd is None or rnd.round_index != round_index:
            return 0
        return rnd.unallocated


@dataclass
class _Lease:
    round_index: int
    granted: int = 0
    used: int = 0
    last: int = 0  # size of the last grant increment seen
    reported: bool = False  # a report went out since the last grant increment


@dataclass
class PartitionLeases:
    """One check-in partition's side: the quota it holds for each job's newest round."""

    partition: int
    rule: LeaseRule
    _leases: dict[str, _Lease] = field(default_factory=dict)

    def on_grant(self, grant: Grant) -> None:
        """Apply a grant (a duplicate or an older one changes nothing)."""
        if grant.partition != self.partition:
            raise ValueError(f"grant for partition {grant.partition} at {self.partition}")
        lease = self._leases.get(grant.job_id)
        if lease is None or lease.round_index < grant.round_index:
            lease = self._leases[grant.job_id] = _Lease(grant.round_index)
        elif lease.round_index > grant.round_index:
            return
        if grant.granted_total > lease.granted:
            lease.last = grant.granted_total - lease.granted
            lease.granted = grant.granted_total
            lease.reported = False

    def available(self, job_id: str, round_index: int) -> int:
        """Assignments this partition may still make to the round."""
        lease = self._leases.get(job_id)
        if lease is None or lease.round_index != round_index:
            return 0
        return lease.granted - lease.used

    def take(self, job_id: str, round_index: int) -> bool:
        """Use one unit of quota; False (and nothing used) if there is none."""
        lease = self._leases.get(job_id)
        if lease is None or lease.round_index != round_index or lease.used >= lease.granted:
            return False
        lease.used += 1
        return True

    def low_mark(self, job_id: str, round_index: int) -> int:
        """Unused quota of the round at or below which this partition reports."""
        lease = self._leases.get(job_id)
        if lease is None or lease.round_index != round_index:
            return 0
        return self.rule.low_mark(lease.last)

    def low(self, job_id: str, round_index: int) -> bool:
        """Whether the round's unused quota is at its low-water mark (time to report)."""
        lease = self._leases.get(job_id)
        if lease is None or lease.round_index != round_index:
            return False
        return lease.granted - lease.used <= self.rule.low_mark(lease.last)

    def report_due(self, job_id: str, round_index: int) -> bool:
        """Whether to report now: the quota is at its low-water mark and no report went
        out since the last grant increment. One report per grant is enough: the owner
        tops up from its reserve if it can, and a reserve that is empty stays empty
        (grants are never taken back), so a second report could earn nothing."""
        lease = self._leases.get(job_id)
        if lease is None or lease.round_index != round_index or lease.reported:
            return False
        return lease.granted - lease.used <= self.rule.low_mark(lease.last)

    def report(self, job_id: str, round_index: int) -> Report:
        """The cumulative use of the round, for the owner (marks a report as sent)."""
        lease = self._leases.get(job_id)
        if lease is not None and lease.round_index == round_index:
            lease.reported = True
            return Report(job_id, round_index, self.partition, lease.used)
        return Report(job_id, round_index, self.partition, 0)


__all__ = ["Grant", "LeaseBook", "LeaseRule", "PartitionLeases", "Report"]
