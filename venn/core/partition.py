"""One check-in partition of a partitioned scheduler: what it decides and what it keeps.

A device's check-ins all reach one partition (Kafka keys ``venn.checkins`` by device id),
so the partition alone knows whether the device holds an assignment. It decides with a
core (``Scheduler`` in ranked mode) that knows every job, whose dispatch table ranks each
row's candidates, and with the lease quota its owner granted (``venn.core.lease``): a
device goes to the first candidate of its row the partition holds quota for; with the
backstop, a candidate ahead of those that it holds no quota for gets the device offered
instead (the device waits for the owner's answer).

The partition's durable state is one ``PartitionRow`` per job it leases (the lease and
the devices held for an offer) and one ``HoldRow`` per event that assigned devices here
(the assignments of it still held: a row per device cost a table write per assignment).
The caller stores what an event changed (``Decided.touched``, ``Decided.hold_rows``)
before it sends that event's outputs: a restart may then find a unit of quota used, or a
device held, for an assignment that never went out (a unit lost, a device idle until its
round ends), but never an assignment its rows do not account for. A hold ends with the
device's release (its result, relayed by the owner; its row is written again without it)
or with its round: a hold of a round the core no longer has open is void, and is dropped
from its row in memory only (restored, it is void again); a row with no live hold left
is deleted. A row that gains a hold takes the next number of the partition's sequence,
and rows are restored in that order, so a device's latest hold is the one restored.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import msgspec
import numpy as np

from venn.core.lease import (
    ROW_VERSION,
    Answer,
    Grant,
    LeaseRow,
    LeaseRule,
    Offer,
    PartitionLeases,
    Recall,
    merge_offers,
)
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


class Hold(msgspec.Struct, frozen=True, array_like=True):
    """A device holding an assignment of a job's round (stored as a short array)."""

    device_id: str
    job_id: str
    round_index: int


class HoldRow(msgspec.Struct, kw_only=True, frozen=True):
    """The assignments one event made on a partition that are still held, as stored."""

    version: int = ROW_VERSION
    seq: int
    holds: list[Hold]


@dataclass
class _Held:
    seq: int
    live: dict[str, tuple[str, int]]  # device -> (job, round)


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
    hold_rows: dict[str, HoldRow | None] = field(default_factory=dict)
    """Hold rows to write (by the id of the event that made them), None to delete."""


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
        self.offered: dict[tuple[str, int], dict[int, PendingOffer]] = {}
        """(job, round) -> offer number -> the device held for it."""
        self._offered_devices: set[str] = set()
        self._rows: dict[str, _Held] = {}  # hold row id -> its live holds
        self._row_of: dict[str, str] = {}  # device -> the row of its hold
        self._by_round: dict[tuple[str, int], set[str]] = {}  # (job, round) -> row ids
        self._seq = 0
        self.gone: Collection[str] = ()
        """Jobs known to have ended (the caller's; a job the core does not know is not
        taken for ended: the core may not have read it yet)."""
        self.unreadable = False
        """Some stored hold row could not be read: which devices hold what is unknown, so
        the partition assigns nothing until every round open when it first decides has
        ended (the caller sets it; its core must then know every job)."""
        self._blocked: set[tuple[str, int]] | None = None

    # -- devices -----------------------------------------------------------------------
    def busy(self, core: Scheduler, device_id: str, out: Decided | None = None) -> bool:
        """Whether the device holds an assignment of an open round, or waits for an
        answer; a hold of a round that ended is dropped (and an emptied row noted in
        ``out``)."""
        if device_id in self._offered_devices:
            return True
        hold = self.holds.get(device_id)
        if hold is None:
            return False
        if not self._ended(core, *hold):
            return True
        self._end_hold(device_id, write=False, out=out)
        return False

    def release(self, device_id: str, job_id: str, round_index: int) -> Decided | None:
        """The device's task for the round ended (its result came): it may be assigned
        again; returns its row's new state. None if it held nothing of that round here."""
        if self.holds.get(device_id) != (job_id, round_index):
            return None
        out = Decided()
        self._end_hold(device_id, write=True, out=out)
        return out

    def sweep(self, core: Scheduler) -> Decided:
        """Drop the holds of rounds that ended (rows left without a live hold are to be
        deleted), decline the devices held for offers to them, and forget the leases of
        jobs that are gone."""
        out = Decided()
        for key in [k for k in self._by_round if self._ended(core, *k)]:
            for row_id in self._by_round.pop(key):
                held = self._rows.get(row_id)
                if held is None:
                    continue
                for device in [d for d, h in held.live.items() if h == key]:
                    self._end_hold(device, write=False, out=out)
        for key in [k for k in self.offered if self._ended(core, *k)]:
            for pending in self.offered.pop(key).values():
                self._offered_devices.discard(pending.device_id)
                out.declined.append((pending.checkin_id, pending.reply_to))
            out.touched.add(key[0])
        for job_id in [j for j in self.leases.jobs() if j in self.gone]:
            self.leases.forget(job_id)
            out.touched.add(job_id)
        return out

    def _still_blocked(self, core: Scheduler) -> bool:
        if self._blocked is None:
            self._blocked = {(j, js.round_index) for j, js in core.jobs.items() if js.round_open}
        if any(not self._ended(core, *k) for k in self._blocked):
            return True
        self.unreadable, self._blocked = False, None
        return False

    def _ended(self, core: Scheduler, job_id: str, round_index: int) -> bool:
        """Whether the round is known to have ended: the core has the job at a later
        round or with the round closed, or the job is gone. A round the core has not
        reached yet, or a job it does not know, may be live (its replica lags)."""
        js = core.jobs.get(job_id)
        if js is None:
            return job_id in self.gone
        return js.round_index > round_index or (js.round_index == round_index and not js.round_open)

    def pending_offers(self) -> list[Offer]:
        """The offers still waiting for an answer (sent again after a restart: the send
        may have been lost; the owner answers a repeated offer as it did the first)."""
        return merge_offers(
            [
                Offer(job_id, rnd, self.partition, number)
                for (job_id, rnd), waiting in sorted(self.offered.items())
                for number in sorted(waiting)
            ]
        )

    def _end_hold(self, device_id: str, write: bool, out: Decided | None) -> None:
        """The device's hold ended. Its row is written again without it if ``write``
        (a release must be durable; a void hold is void again when restored), and
        deleted once it holds nothing."""
        del self.holds[device_id]
        row_id = self._row_of.pop(device_id, None)
        held = self._rows.get(row_id) if row_id is not None else None
        if held is None or row_id is None:
            return
        held.live.pop(device_id, None)
        if not held.live:
            del self._rows[row_id]
            if out is not None:
                out.hold_rows[row_id] = None
        elif write and out is not None:
            out.hold_rows[row_id] = self._hold_row(held)

    def _hold(self, device_id: str, job_id: str, rnd: int, row_id: str, out: Decided) -> None:
        held = self._rows.get(row_id)
        if held is None:
            held = self._rows[row_id] = _Held(self._seq, {})
        held.seq = self._seq  # a row that gains a hold is the latest (module docstring)
        self._seq += 1
        held.live[device_id] = (job_id, rnd)
        self.holds[device_id] = (job_id, rnd)
        self._row_of[device_id] = row_id
        self._by_round.setdefault((job_id, rnd), set()).add(row_id)
        out.hold_rows[row_id] = self._hold_row(held)

    @staticmethod
    def _hold_row(held: _Held) -> HoldRow:
        return HoldRow(seq=held.seq, holds=[Hold(d, j, r) for d, (j, r) in held.live.items()])

    # -- check-ins ---------------------------------------------------------------------
    def decide(
        self,
        core: Scheduler,
        checkins: Sequence[Checkin],
        now: float,
        draws: Callable[[], Sequence[float]] | None = None,
        *,
        source: str,
    ) -> Decided:
        """Decide check-ins of one instant, in order, for the event ``source`` (its id
        names the row of the holds it makes). The core must be ranked."""
        if not core.ranked:
            raise ValueError("a partition decides with a ranked dispatch table")
        out = self.sweep(core)
        if not checkins:
            return out
        if self.unreadable and self._still_blocked(core):
            out.declined += [(c.checkin_id, c.reply_to) for c in checkins]
            return out
        core.observe_many(np.array([c.slot for c in checkins]), np.full(len(checkins), now))
        us: Sequence[float] | None = None
        # One table for the whole batch: the quota bounds what the partition assigns, the
        # table only ranks the candidates, and recompiling it at every overtake its own
        # assignments cause (every one, between near-tied jobs) cost a compile per
        # check-in. A signature first seen here is the exception: it has no row yet.
        table = core.table(now)
        rows = table.rows()
        # Where each row's scan starts: an ordered row's candidates that had neither
        # quota nor offers open stay so for the batch (grants and answers are events
        # of their own), so a check-in skips those an earlier one walked past.
        starts: dict[int, int] = {}
        for i, c in enumerate(checkins):
            if self.busy(core, c.device_id, out):
                out.declined.append((c.checkin_id, c.reply_to))
                continue
            sig = int(core.index.signature_of_slot[c.slot])
            if sig >= table.counts.shape[0]:
                core.replan()  # the plan must include it
                table = core.table(now)
                rows = table.rows()
                starts.clear()
            key = sig * core.num_tiers + (c.tier if core.tiers is not None else 0)
            row = rows[key] if sig < table.counts.shape[0] else []
            if table.uniform and us is None:
                us = draws() if draws is not None else [0.0] * len(checkins)
            start = 0 if table.uniform else starts.get(key, 0)
            job, offered = pick_leased(
                row[start:] if start else row,
                lambda j: self.leases.available(*core.round_of(j)),
                lambda j: self.leases.offers_open(*core.round_of(j)),
                table.uniform,
                us[i] if us is not None else 0.0,
                self.rule.backstop,
            )
            if not table.uniform:
                starts[key] = row.index(job, start) if job >= 0 else len(row)
            if job < 0:
                out.declined.append((c.checkin_id, c.reply_to))
                continue
            job_id, rnd = core.round_of(job)
            out.touched.add(job_id)
            if offered:
                offer = self.leases.offer(job_id, rnd)
                self.offered.setdefault((job_id, rnd), {})[offer.offer] = PendingOffer(
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
            self._assign(core, job, c.checkin_id, c.device_id, c, now, out, source)
            if self.leases.report_due(job_id, rnd):
                out.reports.append(self.leases.report(job_id, rnd))
        out.offers = merge_offers(out.offers)
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
        source: str,
    ) -> None:
        job_id, rnd = core.round_of(job)
        core.assign_many(job, 1, now)
        self._hold(device_id, job_id, rnd, source, out)
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

    def on_answer(self, core: Scheduler, answer: Answer, now: float, *, source: str) -> Decided:
        """An answer to offers (the event ``source``): an accepted offer assigns its held
        device if the round is still open in the core; otherwise the device is declined
        (after a refusal the core's next candidate for it may need quota this partition
        does not hold)."""
        accepted = set(self.leases.on_answer(answer))
        out = Decided(touched={answer.job_id})
        js = core.jobs.get(answer.job_id)
        waiting = self.offered.get((answer.job_id, answer.round_index), {})
        for number in range(answer.offer, answer.offer + max(1, answer.count)):
            held = waiting.pop(number, None)
            if not waiting:
                self.offered.pop((answer.job_id, answer.round_index), None)
            if held is None:
                continue
            self._offered_devices.discard(held.device_id)
            if (
                number in accepted
                and js is not None
                and js.round_open
                and js.round_index == answer.round_index
                and js.remaining > 0
            ):
                self._assign(core, js.idx, held.checkin_id, held.device_id, held, now, out, source)
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
            offered=[p for _, p in sorted(self.offered.get((job_id, rnd), {}).items())],
        )

    def restore(self, row: PartitionRow) -> None:
        """Take back a job's row (after a restart or a partition moving here)."""
        lease = row.lease
        self.leases.restore(lease)
        for pending in row.offered:
            self.offered.setdefault((lease.job_id, lease.round_index), {})[pending.offer] = pending
            self._offered_devices.add(pending.device_id)

    def restore_holds(self, rows: dict[str, HoldRow]) -> list[str]:
        """Take back the stored hold rows (by id), in their sequence: a device's latest
        hold wins. Returns the rows left with no hold, to delete."""
        empty: list[str] = []
        for row_id, row in sorted(rows.items(), key=lambda kv: kv[1].seq):
            if row.version != ROW_VERSION:
                raise ValueError(f"a hold row of version {row.version}")
            held = self._rows[row_id] = _Held(row.seq, {})
            for hold in row.holds:
                device, job_id, rnd = hold.device_id, hold.job_id, hold.round_index
                earlier = self._row_of.get(device)
                if earlier is not None and earlier in self._rows:
                    older = self._rows[earlier]
                    older.live.pop(device, None)
                    if not older.live:
                        del self._rows[earlier]
                        empty.append(earlier)
                held.live[device] = (job_id, rnd)
                self.holds[device] = (job_id, rnd)
                self._row_of[device] = row_id
                self._by_round.setdefault((job_id, rnd), set()).add(row_id)
            if not held.live:
                del self._rows[row_id]
                empty.append(row_id)
            self._seq = max(self._seq, row.seq + 1)
        return empty
