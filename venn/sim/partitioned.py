"""The simulator with P emulated check-in partitions sharing rounds by leases.

A device's check-ins all go to one partition (a stable hash of its id, as Kafka keys
``venn.checkins`` by device id). The owner of job state is the simulation's scheduler:
it compiles the dispatch table (every row ranked, ``Scheduler.ranked``) and its
``LeaseBook`` grants quota; each partition's ``PartitionLeases`` decides its check-ins:
the first candidate of the row, in preference order, that it holds quota for (a uniform
policy: a uniform pick among those). Grants and reports are messages that arrive
``lease_delay_s`` after they are sent; a partition reports when its quota of a round
falls to the low-water mark. The table itself is assumed current at every partition
(what the leases cost, not a stale table, is measured).

With the backstop (``LeaseRule.backstop``), a partition that has no quota for the first
candidate it could offer to holds the device and offers it to the owner; on an accepted
answer the device's task starts when the answer arrives, on a refusal the device goes to
the first candidate of its row (in the table of that instant) that the partition holds
quota for, if any.

Only the fast mode is partitioned; a run with one partition is ``Simulation`` itself.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from venn.core.capacity import TierModel
from venn.core.dispatch import DispatchTable
from venn.core.lease import (
    Answer,
    Grant,
    LeaseBook,
    LeaseRule,
    Message,
    Offer,
    PartitionLeases,
    Recall,
    Report,
)
from venn.core.model import JobSpec
from venn.core.partition import pick_leased
from venn.sim.engine import _MESSAGE, SimConfig, Simulation, _Prepared
from venn.sim.rounds import WINDOW_SLACK_S
from venn.traces.checkins import CheckinBatch, CheckinSource
from venn.traces.devices import DeviceProfiles

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def partition_of(device_ids: np.ndarray, partitions: int) -> np.ndarray:
    """Each device's partition: splitmix64 of its id, modulo ``partitions``."""
    with np.errstate(over="ignore"):
        x = np.asarray(device_ids, dtype=np.int64).astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9) & _M64
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB) & _M64
        x ^= x >> np.uint64(31)
    return (x % np.uint64(partitions)).astype(np.int64)


@dataclass(frozen=True)
class HeldDevice:
    """A check-in held by its partition while an offer for it is in flight."""

    device_id: int
    slot: int
    tier: int
    checked_in: float
    noise: float
    comp: float
    transfer: float
    window_end: float


class PartitionedSimulation(Simulation):
    """``Simulation`` whose check-ins are decided by P partitions holding leases."""

    def __init__(
        self,
        jobs: Sequence[JobSpec],
        source: CheckinSource,
        profiles: DeviceProfiles,
        config: SimConfig,
        tiers: TierModel | None = None,
        rule: LeaseRule | None = None,
    ) -> None:
        if config.mode != "fast":
            raise ValueError("partitioned runs use the fast mode")
        super().__init__(jobs, source, profiles, config, tiers)
        self.sched.ranked = True
        self.rule = rule or LeaseRule(config.partitions)
        if self.rule.partitions != config.partitions:
            raise ValueError("the lease rule is for another number of partitions")
        self.book = LeaseBook(self.rule)
        self.parts = [PartitionLeases(q, self.rule) for q in range(config.partitions)]
        self._messages: dict[int, Message] = {}
        self.messages_sent = 0
        self.message_counts: dict[str, int] = {}  # by message type
        self.passed_over = 0  # check-ins that skipped a candidate for lack of quota
        self.offers_accepted = 0
        self.offers_refused = 0
        self.refused_reassigned = 0  # refused devices then given to another candidate
        self._held: dict[tuple[int, str, int, int], HeldDevice] = {}
        self._step_offers: list[tuple[int, int, int]] = []  # (check-in, partition, job)
        self._keys_of: np.ndarray | None = None  # the keys array ``_keys`` lists
        self._keys: list[int] = []

    # -- lease messages --------------------------------------------------------------
    def _send(self, msg: Message, t: float) -> None:
        seq = next(self._seq)
        self._messages[seq] = msg
        self.messages_sent += 1
        kind = type(msg).__name__
        self.message_counts[kind] = self.message_counts.get(kind, 0) + 1
        heapq.heappush(self.heap, (t + self.config.lease_delay_s, _MESSAGE, seq, "", seq))

    def _deliver(self, message: int, t: float) -> None:
        msg = self._messages.pop(message)
        if isinstance(msg, Grant):
            self.parts[msg.partition].on_grant(msg)
        elif isinstance(msg, Report):
            for grant in self.book.on_report(msg):
                self._send(grant, t)
        elif isinstance(msg, Offer):
            for out in self.book.on_offer(msg):
                self._send(out, t)
        elif isinstance(msg, Recall):
            report = self.parts[msg.partition].on_recall(msg)
            if report is not None:
                self._send(report, t)
        else:
            self._answered(msg, t)

    def _answered(self, answer: Answer, t: float) -> None:
        """An answer to an offer reaches the partition holding the device."""
        held = self._held.pop(
            (answer.partition, answer.job_id, answer.round_index, answer.offer), None
        )
        if held is None:
            return
        js = self.sched.jobs.get(answer.job_id)
        accepted = self.parts[answer.partition].on_answer(answer)
        lr = self.live.get(answer.job_id)
        if (
            accepted
            and js is not None
            and lr is not None
            and lr.record.attempt == answer.round_index
        ):
            # Accepted out of the owner's reserve while this round was open, and it is
            # still open: it has demand left for the device.
            assert js.remaining > 0, "an accepted offer beyond the demand"
            self.offers_accepted += 1
            self._assign_held(js.idx, held, t)
            return
        self.offers_refused += 1
        # Refused (or the round closed while the answer travelled): the device goes to
        # the first candidate of its row that this partition holds quota for (no second
        # offer).
        sched = self.sched
        table = sched.table(t)
        if table.uniform:
            return
        key = int(sched.index.signature_of_slot[held.slot]) * sched.num_tiers + held.tier
        if key >= table.num_rows:
            return
        lease = self.parts[answer.partition]
        for job in table.rows()[key]:
            other = sched.by_idx[job]
            if lease.take(other.spec.job_id, other.round_index):
                self.refused_reassigned += 1
                self._assign_held(job, held, t)
                if lease.report_due(other.spec.job_id, other.round_index):
                    self._send(lease.report(other.spec.job_id, other.round_index), t)
                return

    def _assign_held(self, job: int, held: HeldDevice, t: float) -> None:
        """Assign a held device to job ``job`` at ``t``: its task starts now."""
        resp = held.noise + self._workload[job] * held.comp + held.transfer
        finish = t + resp
        self.sched.assign_many(job, 1, t)
        self.assignments += 1
        lr = self._live_of[job]
        assert lr is not None
        lr.record.assigned += 1
        if finish <= held.window_end + WINDOW_SLACK_S:
            if self._detail:
                lr.add([finish], [held.tier], [resp])
            else:
                lr.add([finish])
            self._offer_close(lr, self._needed[job])
        else:
            lr.record.failures += 1

    def _round_opened(self, job_id: str, attempt: int, demand: int, t: float) -> None:
        for grant in self.book.open_round(job_id, attempt, demand):
            self._send(grant, t)

    def _round_closed(self, job_id: str, attempt: int) -> None:
        self.book.close_round(job_id, attempt)

    # -- check-ins -------------------------------------------------------------------
    def _prepare(self, b: CheckinBatch) -> _Prepared:
        p = super()._prepare(b)
        p.partition = partition_of(b.device_id, self.config.partitions).tolist()
        return p

    def _run_event(self, p: _Prepared) -> None:
        raise ValueError("partitioned runs use the fast mode")

    def _step(
        self, table: DispatchTable, keys: np.ndarray, p: _Prepared, i: int, j: int
    ) -> int | None:
        """A step decided in Python (by the partitions' leases), committed as the
        single-worker one is."""
        if keys is not self._keys_of:
            self._keys_of = keys
            self._keys = keys.tolist()
        picked = self._scan(table, self._keys, p, i, j)
        if picked is None:
            return None
        stop, positions = picked
        return self._commit_step(p, positions, i, j, stop)

    def _scan(
        self, table: DispatchTable, keys: list[int], p: _Prepared, i: int, j: int
    ) -> tuple[int, dict[int, list[int]]] | None:
        """As ``Simulation._scan``, each check-in decided by its partition's leases; a
        step also ends where a partition's quota of a round reaches its low-water mark
        (its report is due)."""
        budget = table.budget
        rows = table.rows()
        uniform = table.uniform
        num_rows = table.num_rows
        by_idx = self.sched.by_idx
        parts = self.parts
        part_of = p.partition
        us = p.u
        positions: dict[int, list[int]] = {}
        limits: dict[int, int] = {}
        quota: dict[tuple[int, int], int] = {}  # (partition, job): left in this step
        marks: dict[tuple[int, int], int] = {}
        offers = self._step_offers
        offers.clear()
        may_offer: dict[tuple[int, int], int] = {}  # (partition, job): offers left
        backstop = self.rule.backstop
        last = -1
        for c in range(i, j):
            key = keys[c]
            if key >= num_rows:
                continue
            row = rows[key]
            if not row:
                continue
            q = part_of[c]

            def left(job: int, q: int = q) -> int:
                found = quota.get((q, job))
                if found is None:
                    js = by_idx[job]
                    lease = parts[q]
                    found = quota[(q, job)] = lease.available(js.spec.job_id, js.round_index)
                    marks[(q, job)] = lease.low_mark(js.spec.job_id, js.round_index)
                return found

            def offers_open(job: int, q: int = q) -> int:
                can = may_offer.get((q, job))
                if can is None:
                    js = by_idx[job]
                    can = may_offer[(q, job)] = parts[q].offers_open(js.spec.job_id, js.round_index)
                return can

            job, offered = pick_leased(row, left, offers_open, uniform, us[c], backstop)
            if offered:
                may_offer[(q, job)] -= 1
                if job != row[0]:
                    self.passed_over += 1
                offers.append((c, q, job))
                last = c
                continue
            if job < 0:
                continue
            if (left(row[0]) <= 0) if uniform else job != row[0]:
                self.passed_over += 1
            last = c
            rest = quota[(q, job)] = quota[(q, job)] - 1
            mine = positions.get(job)
            if mine is None:
                mine = positions[job] = [c]
                limits[job] = int(budget[job])
            else:
                mine.append(c)
            # The step also ends where the partition's quota of the round runs out: the
            # next check-in there must see the lease as it is then (with the backstop,
            # it can offer once its quota is used, not while it is merely spent here).
            if len(mine) >= limits[job] or rest == marks[(q, job)] or rest == 0:
                break
        if last < 0:
            return None
        return last - i + 1, positions

    def _commit_step(
        self, p: _Prepared, positions: dict[int, list[int]], i: int, j: int, stop: int
    ) -> int:
        stop = super()._commit_step(p, positions, i, j, stop)
        limit = i + stop
        by_idx = self.sched.by_idx
        b = p.batch
        for c, q, job in self._step_offers:
            if c >= limit:
                break  # the next step decides it again
            js = by_idx[job]
            offer = self.parts[q].offer(js.spec.job_id, js.round_index)
            self._held[(q, offer.job_id, offer.round_index, offer.offer)] = HeldDevice(
                int(b.device_id[c]),
                int(p.slots[c]),
                p.tier_list[c],
                p.time[c],
                float(b.noise[c]),
                float(b.comp[c]),
                float(p.transfer[c]),
                float(b.end[c]),
            )
            self._send(offer, p.time[c])
        self._step_offers.clear()
        due: dict[tuple[int, int], float] = {}
        for job, mine in positions.items():
            js = by_idx[job]
            for c in mine:
                if c >= limit:
                    break
                q = p.partition[c]
                taken = self.parts[q].take(js.spec.job_id, js.round_index)
                assert taken, "a partition assigned without quota"
                if self.parts[q].report_due(js.spec.job_id, js.round_index):
                    due[(q, job)] = p.time[c]
        for (q, job), t in sorted(due.items(), key=lambda kv: (kv[1], kv[0])):
            js = by_idx[job]
            self._send(self.parts[q].report(js.spec.job_id, js.round_index), t)
        return stop


def make_simulation(
    jobs: Sequence[JobSpec],
    source: CheckinSource,
    profiles: DeviceProfiles,
    config: SimConfig,
    tiers: TierModel | None = None,
) -> Simulation:
    """The simulation for ``config``: partitioned when it asks for more than one."""
    if config.partitions > 1:
        return PartitionedSimulation(jobs, source, profiles, config, tiers)
    return Simulation(jobs, source, profiles, config, tiers)
