"""Leases: how P check-in partitions share a round's demand without a global lock.

The single owner of job state (``LeaseBook``) grants each check-in partition a quota of
every open round; a partition (``PartitionLeases``) assigns a device to a job only
while it holds quota for the job's open round, and reports its use back. Both messages
are *cumulative* (``granted_total``, ``used_total``), so a duplicate, a replay or an
out-of-order copy is harmless: each side keeps the maximum it has seen.

Invariant: for every round, the owner's grants less the releases it has seen, plus the
offers it accepted, sum to at most the round's demand D; a partition never uses more
than it was granted less what it released, and assigns a held device only on an accepted
offer; so however the partitions interleave a round gets at most D assignments.

Grant rule (``LeaseRule``): at round open each partition gets
``floor(initial_share * D / P)`` (``ceil`` without the backstop; until D runs out); the
rest is a reserve. When a
partition's unused quota falls to its low-water mark (``low_water`` times the last grant
it received, rounded down), it reports, and the owner tops it up with
``ceil(reserve / P)`` (guided self-scheduling: chunks shrink as the reserve does, so
little quota is stranded on partitions that see few eligible devices when the round
ends). Quota is never taken back: a grant cannot be revoked without a global
round trip, and cumulative grants that only grow are what makes duplicates harmless.

Backstop (``LeaseRule.backstop``): a partition that holds no quota for a job a device
should go to may hold the device and *offer* it to the owner (``Offer``); the owner
accepts it (``Answer``) out of its reserve and refuses it when the reserve is empty. A
refusal means the round's remaining demand sits, granted, on other partitions: the owner
then *recalls* the unused part (``Recall``) from every partition that may still hold some,
the partitions give it back (a cumulative ``released_total`` in their ``Report``), and
from then on (the round's tail) the reserve serves offers only, so the last units of a
round go to whichever partition sees an eligible device, not to the one holding them.
Offers are numbered per partition and round, and the owner remembers its answer to each,
so a duplicate offer gets the same answer and a duplicate answer is ignored. The offers
one decision makes to a round travel as one message (``merge_offers``), and the owner
answers a run of them at once.

Only a job's newest round is kept on either side: a message about an older round is
ignored, one about a newer round replaces the older round's lease.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import msgspec


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
    round ``round_index`` of ``job_id`` out of its grants, and given ``released_total``
    units of them back."""

    job_id: str
    round_index: int
    partition: int
    used_total: int
    released_total: int = 0


@dataclass(frozen=True)
class Offer:
    """Partition -> owner: ``partition`` holds ``count`` devices for round
    ``round_index`` of ``job_id`` but no quota; they are its offers ``offer`` to
    ``offer + count - 1`` to the round (numbered 0, 1, ... per partition and round; the
    devices one decision held for the round go in one message)."""

    job_id: str
    round_index: int
    partition: int
    offer: int
    count: int = 1


@dataclass(frozen=True)
class Answer:
    """Owner -> partition: offers ``offer`` to ``offer + count - 1`` are all accepted
    (assign the devices) or all refused."""

    job_id: str
    round_index: int
    partition: int
    offer: int
    accepted: bool
    count: int = 1


@dataclass(frozen=True)
class Recall:
    """Owner -> partition: give back what is unused of the first ``granted_total`` units
    granted to ``partition`` for round ``round_index`` of ``job_id``."""

    job_id: str
    round_index: int
    partition: int
    granted_total: int


Message = Grant | Report | Offer | Answer | Recall

ROW_VERSION = 1
OWNED_ROW_VERSION = 2
"""2: answers as runs (1 listed every offer, and the row is written again at each)."""


class AnswerRun(msgspec.Struct, frozen=True, array_like=True):
    """Offers ``first`` to ``first + count - 1`` of a partition, all answered alike."""

    partition: int
    first: int
    count: int
    accepted: bool


class OwnedRoundRow(msgspec.Struct, kw_only=True, frozen=True):
    """The owner's lease book of one job's open round, as stored in a table."""

    version: int = OWNED_ROW_VERSION
    job_id: str
    round_index: int
    demand: int
    granted: list[int]
    used: list[int]
    last: list[int]
    released: list[int]
    accepted: list[int]
    recalled: list[int]
    answers: list[AnswerRun]
    """The answers given, as runs of consecutive offers with equal answers."""
    tail: bool


class LeaseRow(msgspec.Struct, kw_only=True, frozen=True):
    """One partition's lease of one job's newest round, as stored in a table."""

    version: int = ROW_VERSION
    job_id: str
    round_index: int
    partition: int
    granted: int
    used: int
    released: int
    accepted: int
    offers: int
    pending: list[int]
    last: int
    reported: bool


@dataclass(frozen=True)
class LeaseRule:
    """How the owner splits a round's demand between ``partitions`` partitions."""

    partitions: int
    initial_share: float = 0.5  # of D handed out at round open, evenly
    low_water: float = 0.5  # report (and top up) at this fraction of the last grant
    backstop: bool = True  # offer a device the partition has no quota for; recall tails
    in_flight: int = 3  # offers a partition may have unanswered per round
    recall_when_empty: bool = False  # recall unused quota as soon as the reserve is empty

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ValueError("partitions must be >= 1")
        if not 0.0 < self.initial_share <= 1.0 or not 0.0 <= self.low_water < 1.0:
            raise ValueError("initial_share in (0, 1], low_water in [0, 1)")
        if self.in_flight < 1:
            raise ValueError("in_flight must be >= 1")

    def initial_chunk(self, demand: int) -> int:
        """Each partition's first grant of a round of demand ``demand``. Rounded down
        with the backstop (a partition needs no quota to serve a job: it offers the
        device), so a round too small to give every partition a unit starts with all of
        its demand in the reserve instead of one unit stranded on each partition; rounded
        up without it (a partition with no grant could never serve the round)."""
        share = self.initial_share * demand / self.partitions
        return math.floor(share) if self.backstop else math.ceil(share)

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
    released: list[int]
    accepted: list[int]  # offers accepted from each partition
    recalled: list[int]  # granted total at the last recall sent to each partition
    answers: dict[tuple[int, int], bool] = field(default_factory=dict)
    tail: bool = False  # a recall went out: the reserve now serves offers only

    @property
    def unallocated(self) -> int:
        return self.demand - sum(self.granted) + sum(self.released) - sum(self.accepted)


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
            round_index, max(0, demand), [0] * p, [0] * p, [0] * p, [0] * p, [0] * p, [0] * p
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

    def on_report(self, report: Report) -> list[Grant | Recall]:
        """Record a partition's cumulative use and releases; returns the top-up it earns,
        if any (none in a round's tail: the reserve then serves offers only)."""
        rnd = self._rounds.get(report.job_id)
        if rnd is None or rnd.round_index != report.round_index:
            return []
        part = report.partition
        rnd.used[part] = max(rnd.used[part], min(report.used_total, rnd.granted[part]))
        rnd.released[part] = max(
            rnd.released[part],
            min(report.released_total, rnd.granted[part] - rnd.used[part]),
        )
        unused = rnd.granted[part] - rnd.used[part] - rnd.released[part]
        if rnd.tail or unused > self.rule.low_mark(rnd.last[part]):
            return []
        amount = min(self.rule.top_up(rnd.unallocated), rnd.unallocated)
        if amount <= 0:
            return []
        out: list[Grant | Recall] = [self._grant(report.job_id, rnd, part, amount)]
        if self.rule.backstop and self.rule.recall_when_empty and rnd.unallocated == 0:
            out.extend(self._recall(report.job_id, rnd, part))
        return out

    def on_offer(self, offer: Offer) -> list[Answer | Recall]:
        """Answer each offer of a message, in order: accepted while the reserve lasts;
        a refusal also recalls the unused quota of every other partition that may hold
        some. An offer seen before gets the answer it got then; offers for a round not
        open here are refused. One answer per run of equal answers."""
        rnd = self._rounds.get(offer.job_id)
        first, count, part = offer.offer, max(1, offer.count), offer.partition
        if rnd is None or rnd.round_index != offer.round_index:
            return [Answer(offer.job_id, offer.round_index, part, first, False, count)]
        answers: list[bool] = []
        refused = False
        for number in range(first, first + count):
            known = rnd.answers.get((part, number))
            if known is None:
                known = rnd.answers[(part, number)] = self.rule.backstop and rnd.unallocated > 0
                if known:
                    rnd.accepted[part] += 1
                else:
                    refused = True
            answers.append(known)
        out: list[Answer | Recall] = []
        start = 0
        for k in range(1, count + 1):
            if k == count or answers[k] != answers[start]:
                out.append(
                    Answer(offer.job_id, offer.round_index, part, first + start, answers[start],
                           k - start)
                )  # fmt: skip
                start = k
        empty = self.rule.recall_when_empty and rnd.unallocated == 0 and any(answers)
        if (refused and self.rule.backstop) or empty:
            out.extend(self._recall(offer.job_id, rnd, part))
        return out

    def _recall(self, job_id: str, rnd: _OwnedRound, skip: int) -> list[Recall]:
        """Start the round's tail: recall the unused quota of every partition but
        ``skip`` that may hold some and was not recalled since its last grant."""
        rnd.tail = True
        out = []
        for part in range(self.rule.partitions):
            unused = rnd.granted[part] - rnd.used[part] - rnd.released[part]
            if part != skip and unused > 0 and rnd.recalled[part] < rnd.granted[part]:
                rnd.recalled[part] = rnd.granted[part]
                out.append(Recall(job_id, rnd.round_index, part, rnd.granted[part]))
        return out

    def committed(self, job_id: str, round_index: int) -> int:
        """Units the round may still be assigned or has been: grants less the releases
        seen, plus accepted offers (at most the demand)."""
        rnd = self._rounds.get(job_id)
        if rnd is None or rnd.round_index != round_index:
            return 0
        return rnd.demand - rnd.unallocated

    def _grant(self, job_id: str, rnd: _OwnedRound, part: int, amount: int) -> Grant:
        rnd.granted[part] += amount
        rnd.last[part] = amount
        return Grant(job_id, rnd.round_index, part, rnd.granted[part])

    def export(self, job_id: str) -> OwnedRoundRow | None:
        """The job's open round as leased, for a table row (None if not leased)."""
        rnd = self._rounds.get(job_id)
        if rnd is None:
            return None
        return OwnedRoundRow(
            job_id=job_id,
            round_index=rnd.round_index,
            demand=rnd.demand,
            granted=list(rnd.granted),
            used=list(rnd.used),
            last=list(rnd.last),
            released=list(rnd.released),
            accepted=list(rnd.accepted),
            recalled=list(rnd.recalled),
            answers=_runs(rnd.answers),
            tail=rnd.tail,
        )

    def restore(self, row: OwnedRoundRow) -> None:
        """Take back a round exported by ``export`` (a newer round already here wins)."""
        p = self.rule.partitions
        lists = (row.granted, row.used, row.last, row.released, row.accepted, row.recalled)
        if row.version != OWNED_ROW_VERSION or any(len(x) != p for x in lists):
            raise ValueError(f"a lease row of {row.job_id!r} for another rule or version")
        cur = self._rounds.get(row.job_id)
        if cur is not None and cur.round_index >= row.round_index:
            return
        self._rounds[row.job_id] = _OwnedRound(
            row.round_index,
            row.demand,
            granted=list(row.granted),
            used=list(row.used),
            last=list(row.last),
            released=list(row.released),
            accepted=list(row.accepted),
            recalled=list(row.recalled),
            answers={
                (run.partition, run.first + k): run.accepted
                for run in row.answers
                for k in range(run.count)
            },
            tail=row.tail,
        )

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
    used: int = 0  # out of the grants
    released: int = 0
    accepted: int = 0  # held devices assigned on an accepted offer
    offers: int = 0  # offers sent (the next offer's number)
    pending: set[int] = field(default_factory=set)  # offers not yet answered
    last: int = 0  # size of the last grant increment seen
    reported: bool = False  # a report went out since the last grant increment


@dataclass
class PartitionLeases:
    """One check-in partition's side: the quota it holds for each job's newest round."""

    partition: int
    rule: LeaseRule
    _leases: dict[str, _Lease] = field(default_factory=dict)

    def export(self, job_id: str) -> LeaseRow | None:
        """The partition's lease of the job's newest round, for a table row."""
        lease = self._leases.get(job_id)
        if lease is None:
            return None
        return LeaseRow(
            job_id=job_id,
            round_index=lease.round_index,
            partition=self.partition,
            granted=lease.granted,
            used=lease.used,
            released=lease.released,
            accepted=lease.accepted,
            offers=lease.offers,
            pending=sorted(lease.pending),
            last=lease.last,
            reported=lease.reported,
        )

    def restore(self, row: LeaseRow) -> None:
        """Take back a lease exported by ``export`` (a newer round already here wins)."""
        if row.version != ROW_VERSION or row.partition != self.partition:
            raise ValueError(f"a lease row of partition {row.partition} at {self.partition}")
        cur = self._leases.get(row.job_id)
        if cur is not None and cur.round_index >= row.round_index:
            return
        self._leases[row.job_id] = _Lease(
            row.round_index,
            row.granted,
            row.used,
            row.released,
            row.accepted,
            row.offers,
            set(row.pending),
            row.last,
            row.reported,
        )

    def jobs(self) -> list[str]:
        """The jobs this partition holds a lease of."""
        return list(self._leases)

    def forget(self, job_id: str) -> None:
        """Drop the job's lease (the job ended)."""
        self._leases.pop(job_id, None)

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
        return lease.granted - lease.used - lease.released

    def take(self, job_id: str, round_index: int) -> bool:
        """Use one unit of quota; False (and nothing used) if there is none."""
        lease = self._leases.get(job_id)
        if (
            lease is None
            or lease.round_index != round_index
            or lease.used + lease.released >= lease.granted
        ):
            return False
        lease.used += 1
        return True

    def can_offer(self, job_id: str, round_index: int) -> bool:
        """Whether to hold a device for the round and offer it to the owner."""
        return self.offers_open(job_id, round_index) > 0

    def offers_open(self, job_id: str, round_index: int) -> int:
        """How many devices this partition may offer to the round now: none without the
        backstop or while it holds quota for the round, else ``rule.in_flight`` less
        its unanswered offers to the round."""
        if not self.rule.backstop:
            return 0
        lease = self._leases.get(job_id)
        if lease is None or lease.round_index < round_index:
            return self.rule.in_flight
        if lease.round_index > round_index or lease.granted - lease.used - lease.released > 0:
            return 0
        return max(0, self.rule.in_flight - len(lease.pending))

    def offer(self, job_id: str, round_index: int) -> Offer:
        """Offer a held device to the round (the caller keeps the device until the
        answer; consecutive offers may travel as one message: ``merge_offers``); a newer
        round than the lease's replaces it."""
        lease = self._leases.get(job_id)
        if lease is None or lease.round_index < round_index:
            lease = self._leases[job_id] = _Lease(round_index)
        elif lease.round_index > round_index:
            raise ValueError("offer for an older round")
        number = lease.offers
        lease.offers += 1
        lease.pending.add(number)
        return Offer(job_id, round_index, self.partition, number)

    def on_answer(self, answer: Answer) -> list[int]:
        """Apply an answer: the pending offers it accepts (assign their held devices);
        none if it refuses them, repeats an earlier answer, or is for a round this
        partition no longer leases."""
        if answer.partition != self.partition:
            raise ValueError(f"answer for partition {answer.partition} at {self.partition}")
        lease = self._leases.get(answer.job_id)
        if lease is None or lease.round_index != answer.round_index:
            return []
        numbers = range(answer.offer, answer.offer + max(1, answer.count))
        answered = [n for n in numbers if n in lease.pending]
        lease.pending.difference_update(answered)
        if not answer.accepted:
            return []
        lease.accepted += len(answered)
        return answered

    def on_recall(self, recall: Recall) -> Report | None:
        """Give back the unused part of the first ``recall.granted_total`` units granted
        (never units granted after the recall was sent); returns the report that tells
        the owner, or None for a round this partition does not lease."""
        if recall.partition != self.partition:
            raise ValueError(f"recall for partition {recall.partition} at {self.partition}")
        lease = self._leases.get(recall.job_id)
        if lease is None or lease.round_index != recall.round_index:
            return None
        lease.released = max(lease.released, min(lease.granted, recall.granted_total) - lease.used)
        return Report(recall.job_id, recall.round_index, self.partition, lease.used, lease.released)

    def assigned(self, job_id: str, round_index: int) -> int:
        """Assignments this partition made to the round: out of grants and on offers."""
        lease = self._leases.get(job_id)
        if lease is None or lease.round_index != round_index:
            return 0
        return lease.used + lease.accepted

    def low_mark(self, job_id: str, round_index: int) -> int:
        """Unused quota of the round at or below which this partition reports."""
        lease = self._leases.get(job_id)
        if lease is None or lease.round_index != round_index:
            return 0
        return self.rule.low_mark(lease.last)

    def report_due(self, job_id: str, round_index: int) -> bool:
        """Whether to report now: the quota is at its low-water mark and no report went
        out since the last grant increment. One report per grant is enough: the owner
        tops up from its reserve if it can, and a reserve that is empty stays empty
        (grants are never taken back), so a second report could earn nothing."""
        lease = self._leases.get(job_id)
        if lease is None or lease.round_index != round_index or lease.reported:
            return False
        return lease.granted - lease.used - lease.released <= self.rule.low_mark(lease.last)

    def report(self, job_id: str, round_index: int) -> Report:
        """The cumulative use of the round, for the owner (marks a report as sent)."""
        lease = self._leases.get(job_id)
        if lease is not None and lease.round_index == round_index:
            lease.reported = True
            return Report(job_id, round_index, self.partition, lease.used, lease.released)
        return Report(job_id, round_index, self.partition, 0)


def _runs(answers: dict[tuple[int, int], bool]) -> list[AnswerRun]:
    """Answers per (partition, offer) as runs of consecutive offers with equal answers."""
    out: list[AnswerRun] = []
    for (part, number), accepted in sorted(answers.items()):
        last = out[-1] if out else None
        if (
            last is not None
            and last.partition == part
            and last.first + last.count == number
            and last.accepted == accepted
        ):
            out[-1] = AnswerRun(part, last.first, last.count + 1, accepted)
        else:
            out.append(AnswerRun(part, number, 1, accepted))
    return out


def merge_offers(offers: list[Offer]) -> list[Offer]:
    """Consecutive offers of one partition to one round as one message each run."""
    out: list[Offer] = []
    last: dict[tuple[str, int, int], int] = {}
    for o in offers:
        key = (o.job_id, o.round_index, o.partition)
        k = last.get(key)
        if k is not None and out[k].offer + out[k].count == o.offer:
            prev = out[k]
            out[k] = Offer(prev.job_id, prev.round_index, prev.partition, prev.offer,
                           prev.count + o.count)  # fmt: skip
            continue
        last[key] = len(out)
        out.append(o)
    return out


__all__ = [
    "Answer",
    "AnswerRun",
    "Grant",
    "LeaseBook",
    "LeaseRow",
    "LeaseRule",
    "Message",
    "Offer",
    "OwnedRoundRow",
    "PartitionLeases",
    "Recall",
    "Report",
    "merge_offers",
]
