"""One check-in partition of a partitioned scheduler: what it decides and what it keeps.

A device's check-ins all reach one partition (Kafka keys ``venn.checkins`` by device id),
so the partition alone knows whether the device holds an assignment. It decides with a
core (``Scheduler`` in ranked mode) that knows every job, whose dispatch table ranks each
row's candidates, and with the lease quota its owner granted (``venn.core.lease``): a
device goes to the first candidate of its row the partition holds quota for; with the
backstop, a candidate ahead of those that it holds no quota for gets the device offered
instead (the device waits for the owner's answer).

The partition's durable state is one ``PartitionRow`` per job it leases (the lease and
the devices held for an offer) and one hold per device holding an assignment made here.
The caller stores what an event changed (``Decided.touched``, ``Decided.holds``) before
it sends that event's outputs: a restart may then find a unit of quota used, or a device
held, for an assignment that never went out (a unit lost, a device idle until its round
ends), but never an assignment its rows do not account for. A hold ends with the
device's release (its result, relayed by the owner) or with its round: a hold of a round
the core no longer has open is void.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgspec
import numpy as np

from venn.core.lease import Answer, Grant, LeaseRow, LeaseRule, Offer, PartitionLeases, Recall
from venn.core.lease import Report as LeaseReport
from venn.core.scheduler import Scheduler


class PendingOffer(msgspec.Struct, kw_only=True, frozen=True):
    """A device held while its offer is answered, and what its assignment needs."""

    offer: int
    device_id: str
    checkin_id: str
    speed_ms_per_sample: float
    bandwidth_kbps: float
    reply_to: str = ""


class PartitionRow(msgspec.Struct, kw_only=True, frozen=True):
    """A partition's durable state for one job (its newest round), as stored in a table."""

    lease: LeaseRow
    offered: list[PendingOffer]


@dataclass(frozen=True)
class Checkin:
    """What the partition reads of a check-in."""

    checkin_id: str
    device_id: str
    slot: int  # the core's slot of the device's attributes
    tier: int
    speed_ms_per_sample: float = 0.0
    bandwidth_kbps: float = 0.0
    reply_to: str = ""  # where the gateway waits for an answer ("" for none)


@dataclass(frozen=True)
class Assigned:
    """A device assigned to a job's round."""

    checkin_id: str
    device_id: str
    job_id: str
    round_index: int
    speed_ms_per_sample: float
    bandwidth_kbps: float


@dataclass
class Decided:
    """The outcome of deciding check-ins or applying a message."""

    assigned: list[Assigned] = field(default_factory=list)
    offers: list[Offer] = field(default_factory=list)
    reports: list[LeaseReport] = field(default_factory=list)
    declined: list[tuple[str, str]] = field(default_factory=list)
    """(check-in id, reply_to) of the check-ins that got nothing."""
    held: list[str] = field(default_factory=list)  # check-in ids waiting for an answer
    touched: set[str] = field(default_factory=set)  # jobs whose row changed
    holds: dict[str, tuple[str, int] | None] = field(default_factory=dict)
    """Devices whose hold changed: the (job, round) it now holds, None when it ended."""

    def extend(self, other: Decided) -> None:
        self.assigned += other.assigned
        self.offers += other.offers
        self.reports += other.reports
        self.declined += other.declined
        self.held += other.held
        self.touched |= other.touched
        self.holds.update(other.holds)


def pick_leased(
    row: Sequence[int],
    left: Callable[[int], int],
    offers_open: Callable[[int], int],
    uniform: bool,
    u: float,
    backstop: bool,
) -> tuple[int, bool]:
    """The job a device of a ranked row goes to: (job idx, offered), (-1, False) for none.

    An ordered policy: the first candidate the partition holds quota for (``left``); with
    the backstop, a candidate ahead of it that has none is offered the device instead,
    while the partition may offer to it (``offers_open``). A uniform policy: a uniform
    pick (``u``) among the candidates with quota; with the backstop, when none has any,
    a uniform pick among those the partition may offer to (without it, a uniform policy's
    rounds would wait for quota stranded on other partitions)."""
    ok: list[int] = []
    for job in row:
        if left(job) > 0:
            ok.append(job)
            if not uniform:
                break
        elif backstop and not uniform and offers_open(job) > 0:
            return job, True
    if ok:
        return (ok[min(int(u * len(ok)), len(ok) - 1)] if uniform else ok[0]), False
    if backstop and uniform:
        open_ = [job for job in row if offers_open(job) > 0]
        if open_:
            return open_[min(int(u * len(open_)), len(open_) - 1)], True
    return -1, False


class CheckinPartition:
    """A check-in partition's leases, holds and offered devices."""

    def __init__(self, partition: int, rule: LeaseRule) -> None:
        self.partition = partition
        self.rule = rule
        self.leases = PartitionLeases(partition, rule)
        self.holds: dict[str, tuple[str, int]] = {}
        """Device -> (job, round) of the assignment it holds, made here."""
        self.offered: dict[tuple[str, int, int], PendingOffer] = {}
        """(job, round, offer) -> the device held for it."""
        self._offered_devices: set[str] = set()

    # -- devices -----------------------------------------------------------------------
    def busy(self, core: Scheduler, device_id: str, out: Decided | None = None) -> bool:
        """Whether the device holds an assignment of an open round, or waits for an
        answer; a hold of a round that ended is dropped (and noted in ``out``)."""
        if device_id in self._offered_devices:
            return True
        hold = self.holds.get(device_id)
        if hold is None:
            return False
        js = core.jobs.get(hold[0])
        if js is not None and js.round_open and js.round_index == hold[1]:
            return True
        del self.holds[device_id]
        if out is not None:
            out.holds[device_id] = None
        return False

    def release(self, device_id: str, job_id: str, round_index: int) -> bool:
        """The device's task for the round ended (its result came): it may be assigned
        again. False if it held nothing of that round here."""
        if self.holds.get(device_id) != (job_id, round_index):
            return False
        del self.holds[device_id]
        return True

    # -- check-ins ---------------------------------------------------------------------
    def decide(
        self,
        core: Scheduler,
        checkins: Sequence[Checkin],
        now: float,
        draws: Callable[[], Sequence[float]] | None = None,
    ) -> Decided:
        """Decide check-ins of one instant, in order. The core must be ranked."""
        if not core.ranked:
            raise ValueError("a partition decides with a ranked dispatch table")
        out = Decided()
        if not checkins:
            return out
        core.observe_many(np.array([c.slot for c in checkins]), np.full(len(checkins), now))
        us: Sequence[float] | None = None
        for i, c in enumerate(checkins):
            if self.busy(core, c.device_id, out):
                out.declined.append((c.checkin_id, c.reply_to))
                continue
            sig = int(core.index.signature_of_slot[c.slot])
            if sig >= core.table(now).counts.shape[0]:
                core.replan()  # a signature first seen here: the plan must include it
            table = core.table(now)
            key = sig * core.num_tiers + (c.tier if core.tiers is not None else 0)
            row = table.rows()[key] if sig < table.counts.shape[0] else []
            if table.uniform and us is None:
                us = draws() if draws is not None else [0.0] * len(checkins)
            job, offered = pick_leased(
                row,
                lambda j: self.leases.available(*core.round_of(j)),
                lambda j: self.leases.offers_open(*core.round_of(j)),
                table.uniform,
                us[i] if us is not None else 0.0,
                self.rule.backstop,
            )
            if job < 0:
                out.declined.append((c.checkin_id, c.reply_to))
                continue
            job_id, rnd = core.round_of(job)
            out.touched.add(job_id)
            if offered:
                offer = self.leases.offer(job_id, rnd)
                self.offered[(job_id, rnd, offer.offer)] = PendingOffer(
                    offer=offer.offer,
                    device_id=c.device_id,
                    checkin_id=c.checkin_id,
                    speed_ms_per_sample=c.speed_ms_per_sample,
                    bandwidth_kbps=c.bandwidth_kbps,
                    reply_to=c.reply_to,
                )
                self._offered_devices.add(c.device_id)
                out.offers.append(offer)
                out.held.append(c.checkin_id)
                continue
            taken = self.leases.take(job_id, rnd)
            assert taken, "picked a job without quota"
            self._assign(core, job, c.checkin_id, c.device_id, c, now, out)
            if self.leases.report_due(job_id, rnd):
                out.reports.append(self.leases.report(job_id, rnd))
        return out

    def _assign(
        self,
        core: Scheduler,
        job: int,
        checkin_id: str,
        device_id: str,
        c: Checkin | PendingOffer,
        now: float,
        out: Decided,
    ) -> None:
        job_id, rnd = core.round_of(job)
        core.table(now)  # accounted against the current table (compiled if need be)
        core.assign_many(job, 1, now)
        self.holds[device_id] = out.holds[device_id] = (job_id, rnd)
        out.assigned.append(
            Assigned(checkin_id, device_id, job_id, rnd, c.speed_ms_per_sample, c.bandwidth_kbps)
        )

    # -- messages from the owners ------------------------------------------------------
    def on_grant(self, grant: Grant) -> Decided:
        self.leases.on_grant(grant)
        return Decided(touched={grant.job_id})

    def on_recall(self, recall: Recall) -> Decided:
        report = self.leases.on_recall(recall)
        if report is None:
            return Decided()
        return Decided(reports=[report], touched={recall.job_id})

    def on_answer(self, core: Scheduler, answer: Answer, now: float) -> Decided:
        """An answer to an offer: an accepted one assigns the held device if its round is
        still open in the core; otherwise the device is declined (after a refusal the
        core's next candidate for it may need quota this partition does not hold)."""
        held = self.offered.pop((answer.job_id, answer.round_index, answer.offer), None)
        accepted = self.leases.on_answer(answer)
        out = Decided(touched={answer.job_id})
        if held is None:
            return out
        self._offered_devices.discard(held.device_id)
        js = core.jobs.get(answer.job_id)
        if (
            accepted
            and js is not None
            and js.round_open
            and js.round_index == answer.round_index
            and js.remaining > 0
        ):
            self._assign(core, js.idx, held.checkin_id, held.device_id, held, now, out)
        else:
            out.declined.append((held.checkin_id, held.reply_to))
        return out

    # -- durable state -----------------------------------------------------------------
    def row(self, job_id: str) -> PartitionRow | None:
        """The job's durable state here (None: nothing, delete its row)."""
        lease = self.leases.export(job_id)
        if lease is None:
            return None
        rnd = lease.round_index
        return PartitionRow(
            lease=lease,
            offered=[p for (j, r, _), p in sorted(self.offered.items()) if (j, r) == (job_id, rnd)],
        )

    def restore(self, row: PartitionRow) -> None:
        """Take back a job's row (after a restart or a partition moving here)."""
        lease = row.lease
        self.leases.restore(lease)
        for pending in row.offered:
            self.offered[(lease.job_id, lease.round_index, pending.offer)] = pending
            self._offered_devices.add(pending.device_id)

    def restore_hold(self, device_id: str, job_id: str, round_index: int) -> None:
        """Take back a stored hold."""
        self.holds[device_id] = (job_id, round_index)

    def forget(self, job_id: str) -> None:
        """The job ended: drop its lease, holds and offered devices."""
        self.leases.forget(job_id)
        for device in [d for d, h in self.holds.items() if h[0] == job_id]:
            del self.holds[device]
        for key in [k for k in self.offered if k[0] == job_id]:
            self._offered_devices.discard(self.offered.pop(key).device_id)


def encode_row(row: PartitionRow) -> bytes:
    return msgspec.json.encode(row)


def decode_row(raw: bytes | str) -> PartitionRow:
    return msgspec.json.decode(raw, type=PartitionRow)
