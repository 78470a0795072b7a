"""The leased mode: any number of scheduler workers share the partitions.

Every topic has the same partitions and Faust gives partition q of all of them to one
worker, so a worker plays two parts for each partition it holds:
- the **owner** of the jobs keyed to q (``SchedulerState`` as in the single mode, plus a
  ``LeaseBook``): it grants every check-in partition a share of each round it opens,
  tops up on reports, answers offers, recalls the tail, and relays a device's release
  (its result) to the device's partition;
- the **check-in partition** q (``venn.core.partition.CheckinPartition``): it decides
  its devices' check-ins with the worker's replica of every job and the quota it holds.
Lease messages travel on venn.leases (``LeaseMessage``): to a check-in partition on that
partition, to an owner keyed by the job id.

Durable state, in the ``lease`` table, written on the partition of the event that
changes it: ``o:<job>`` (the owner's book of the job's open round), ``p:<q>:<job>``
(partition q's lease of the job, with the devices held for an offer) and
``h:<q>:<event>`` (the assignments an event made on partition q that are still held).
An event's outputs are sent only once the rows it wrote are in their changelog
(``TrackedTable``, ``OutputProducer.send_output``'s ``after``), so a restart never meets
an assignment its restored rows do not account for (``tests/pure/test_partition.py``).

The replica of every job (``Replica``) follows the ``jobs`` table's changelog, where each
owner writes its jobs' snapshots; it is read-only and rebuilt from the beginning of that
compacted topic, so it needs no recovery of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Collection, MutableMapping
from typing import Any

import faust
import msgspec
import numpy as np
from aiokafka import AIOKafkaConsumer, TopicPartition

from services.scheduler.outputs import assignment, assignment_batch, uniform_of
from venn import events as ev
from venn.checkin_columns import CheckinColumns
from venn.core import make_scheduler
from venn.core.capacity import proxies_of
from venn.core.lease import (
    Answer,
    Grant,
    LeaseBook,
    LeaseRule,
    Message,
    Offer,
    OwnedRoundRow,
    Recall,
    Report,
)
from venn.core.partition import Checkin, CheckinPartition, Decided, HoldRow, PartitionRow
from venn.core.scheduler import Scheduler
from venn.core.snapshot import decode_snapshot, sync_job
from venn.settings import SchedulerSettings

log = logging.getLogger(__name__)

TABLE = "lease"
OWNER_KINDS = frozenset({"report", "offer"})


class Misrouted(ValueError):
    """A lease message on a partition it is not for."""


def to_event(msg: Message, now: float) -> ev.LeaseMessage:
    """A core lease message as the event that carries it; its id is fixed by its content
    (every field is cumulative or numbered), so a copy is a duplicate."""
    released, accepted, count = 0, False, 1
    if isinstance(msg, Grant | Recall):
        amount = msg.granted_total
    elif isinstance(msg, Report):
        amount, released = msg.used_total, msg.released_total
    elif isinstance(msg, Answer):
        amount, accepted, count = msg.offer, msg.accepted, msg.count
    else:
        amount, count = msg.offer, msg.count
    kind = type(msg).__name__.lower()
    return ev.LeaseMessage(
        event_id=f"lease:{kind}:{msg.job_id}:{msg.round_index}:{msg.partition}:{amount}"
        f":{released}:{int(accepted)}" + (f":{count}" if count != 1 else ""),
        time=now,
        kind=kind,  # type: ignore[arg-type]
        job_id=msg.job_id,
        round_index=msg.round_index,
        partition=msg.partition,
        amount=amount,
        released=released,
        accepted=accepted,
        count=count,
    )


def from_event(e: ev.LeaseMessage) -> Message:
    """The core message an event carries (not for a release)."""
    if e.kind == "grant":
        return Grant(e.job_id, e.round_index, e.partition, e.amount)
    if e.kind == "recall":
        return Recall(e.job_id, e.round_index, e.partition, e.amount)
    if e.kind == "answer":
        return Answer(e.job_id, e.round_index, e.partition, e.amount, e.accepted, e.count)
    if e.kind == "report":
        return Report(e.job_id, e.round_index, e.partition, e.amount, e.released)
    if e.kind == "offer":
        return Offer(e.job_id, e.round_index, e.partition, e.amount, e.count)
    raise ValueError(f"a {e.kind} carries no lease message")


def release_event(device_id: str, job_id: str, round_index: int, now: float) -> ev.LeaseMessage:
    return ev.LeaseMessage(
        event_id=f"release:{job_id}:{round_index}:{device_id}",
        time=now,
        kind="release",
        job_id=job_id,
        round_index=round_index,
        partition=-1,
        amount=0,
        released=0,
        accepted=False,
        count=1,
        device_id=device_id,
    )


class LeaseOwner:
    """The lease books of the jobs this worker owns, and their rows."""

    def __init__(self, rule: LeaseRule, table: MutableMapping[str, Any]) -> None:
        self.rule = rule
        self.table = table
        self.book = LeaseBook(rule)

    def load(self, owned: Collection[int] | None) -> set[str]:
        """Restore the books of the owned partitions; returns the jobs whose row could
        not be read (their rounds must not be leased again: what their partitions hold
        is unknown)."""
        self.book = LeaseBook(self.rule)
        unreadable: set[str] = set()
        for key, row in list(self.table.items()):
            if not str(key).startswith("o:"):
                continue
            if owned is not None and row.get("partition") not in owned:
                continue
            try:
                self.book.restore(msgspec.convert(row["book"], OwnedRoundRow))
            except (KeyError, TypeError, ValueError, msgspec.ValidationError):
                log.exception("cannot restore lease book row %r; skipped", key)
                unreadable.add(str(key).removeprefix("o:"))
        return unreadable

    def leased(self, job_id: str, round_index: int) -> bool:
        return bool(self.book.granted(job_id, round_index))

    def open(
        self, job_id: str, round_index: int, demand: int, partition: int, now: float
    ) -> list[ev.Event]:
        grants = self.book.open_round(job_id, round_index, demand)
        self._save(job_id, partition)
        return [to_event(g, now) for g in grants]

    def close(self, job_id: str, round_index: int) -> None:
        self.book.close_round(job_id, round_index)
        if self.book.export(job_id) is None:
            self.table.pop(f"o:{job_id}", None)

    def on_event(self, e: ev.LeaseMessage, partition: int, now: float) -> list[ev.Event]:
        msg = from_event(e)
        out: list[Message]
        if isinstance(msg, Report):
            out = list(self.book.on_report(msg))
        else:
            assert isinstance(msg, Offer)
            out = list(self.book.on_offer(msg))
        self._save(e.job_id, partition)
        return [to_event(m, now) for m in out]

    def _save(self, job_id: str, partition: int) -> None:
        """Store the job's book on the job's own partition (a rebuild writes books while
        it handles another partition's event)."""
        row = self.book.export(job_id)
        if row is not None:
            key, value = f"o:{job_id}", {"partition": partition, "book": msgspec.to_builtins(row)}
            if isinstance(self.table, faust.Table):
                self.table.data[key] = value
                self.table.send_changelog(partition, key, value)
            else:
                self.table[key] = value


class Replica:
    """Every job as its owner last wrote it, for deciding check-ins (ranked table)."""

    def __init__(self, config: SchedulerSettings) -> None:
        self.core: Scheduler = make_scheduler(config.policy, seed=config.seed, track_devices=False)
        self.core.ranked = True
        self.removed: set[str] = set()
        self.rows = 0
        self.caught_up = asyncio.Event()

    def apply(self, row: Any, now: float) -> None:
        """One row of the ``jobs`` table (a dict with the job's core snapshot)."""
        if not isinstance(row, dict) or not isinstance(row.get("core"), dict):
            return
        snap = decode_snapshot(row["core"])
        job_id = snap.spec.job_id
        if job_id in self.removed:
            return
        self.rows += 1
        if row.get("removed"):
            self.core.remove_job(job_id)
            self.removed.add(job_id)
            return
        sync_job(self.core, snap, now)

    async def follow(self, bootstrap: str, topic: str, partitions: int, **options: Any) -> None:
        """Read ``topic`` (the jobs changelog) from its beginning, for ever."""
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, **options
        )
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            while True:
                batches = await consumer.getmany(timeout_ms=50, max_records=5000)
                now = time.time()
                for records in batches.values():
                    for record in records:
                        if record.value is None:
                            continue
                        try:
                            self.apply(json.loads(record.value), now)
                        except (ValueError, KeyError, TypeError):
                            log.exception("replica: cannot apply %s@%d", topic, record.offset)
                if not self.caught_up.is_set() and all(
                    await asyncio.gather(*(_reached(consumer, tp, ends[tp]) for tp in tps))
                ):
                    self.caught_up.set()
                    log.info("replica caught up: %d jobs", len(self.core.jobs))
        finally:
            with contextlib.suppress(Exception):
                await consumer.stop()


async def _reached(consumer: AIOKafkaConsumer, tp: TopicPartition, end: int) -> bool:
    return bool(await consumer.position(tp) >= end)


class LeasedCheckins:
    """The check-in partitions this worker holds, deciding with the replica."""

    def __init__(
        self,
        config: SchedulerSettings,
        rule: LeaseRule,
        replica: Replica,
        table: MutableMapping[str, Any],
    ) -> None:
        self.config = config
        self.rule = rule
        self.replica = replica
        self.table = table
        self.parts: dict[int, CheckinPartition] = {}
        self.stale = 0

    def load(self, owned: Collection[int] | None, now: float) -> list[ev.Event]:
        """Restore the owned partitions from their rows; returns the offers still waiting
        for an answer, to send again (their first send may have been lost)."""
        self.parts = {}
        holds: dict[int, dict[str, HoldRow]] = {}
        for key, row in list(self.table.items()):
            key = str(key)
            kind = key[:2]
            if kind not in ("p:", "h:"):
                continue
            q_text, name = key[2:].split(":", 1)
            q = int(q_text)
            if owned is not None and q not in owned:
                continue
            try:
                if kind == "h:":
                    holds.setdefault(q, {})[name] = msgspec.convert(row, HoldRow)
                else:
                    self.part(q).restore(msgspec.convert(row, PartitionRow))
            except (KeyError, TypeError, ValueError, msgspec.ValidationError):
                log.exception("cannot restore lease row %r; skipped", key)
                if kind == "h:":
                    self.part(q).unreadable = True
        for q, rows in holds.items():
            try:
                empty = self.part(q).restore_holds(rows)
            except ValueError:
                log.exception("cannot restore the hold rows of partition %d; skipped", q)
                self.part(q).unreadable = True
                continue
            for row_id in empty:
                self.table.pop(f"h:{q}:{row_id}", None)
        return [to_event(o, now) for part in self.parts.values() for o in part.pending_offers()]

    def part(self, q: int) -> CheckinPartition:
        part = self.parts.get(q)
        if part is None:
            part = self.parts[q] = CheckinPartition(q, self.rule)
            part.gone = self.replica.removed
        return part

    def on_checkins(self, cols: CheckinColumns, q: int, now: float) -> list[ev.Event]:
        core = self.replica.core
        fresh = (now - cols.times) <= self.config.checkin_max_age_s
        self.stale += len(cols) - int(fresh.sum())
        slots = core.index.slots_for(cols.attr_keys, cols.attrs)
        # Until the replica has read every job once, it would rank with some of them
        # missing: the check-ins only feed the supply window then.
        watching = fresh & (cols.observe_only | (not self.replica.caught_up.is_set()))
        if watching.any():
            core.observe_many(slots[watching], np.full(int(watching.sum()), now))
        deciding = np.flatnonzero(fresh & ~watching).tolist()
        tiers = (
            core.tiers.tiers_of(proxies_of(cols.speeds, cols.bandwidths)).tolist()
            if core.tiers is not None
            else [0] * len(cols)
        )
        reply_to = cols.reply_to or ""
        checkins = [
            Checkin(
                cols.event_ids[i],
                cols.device_ids[i],
                int(slots[i]),
                int(tiers[i]),
                float(cols.speeds[i]),
                float(cols.bandwidths[i]),
                reply_to,
            )
            for i in deciding
        ]
        decided = self.part(q).decide(
            core,
            checkins,
            now,
            draws=lambda: [uniform_of(c.checkin_id) for c in checkins],
            source=cols.event_id,
        )
        # Stale or only observed: nothing to decide, but the gateway waits for an answer.
        idle = np.flatnonzero(~(fresh & ~watching)).tolist()
        decided.declined.extend((cols.event_ids[i], reply_to) for i in idle)
        return self._outputs(decided, q, cols.event_id, now)

    def on_event(self, e: ev.LeaseMessage, q: int, now: float) -> list[ev.Event]:
        part = self.part(q)
        if e.kind == "release":
            assert e.device_id is not None
            released = part.release(e.device_id, e.job_id, e.round_index)
            if released is not None:
                self._save(q, released)
            return []
        if e.partition != q:
            raise Misrouted(f"a {e.kind} for partition {e.partition} read on partition {q}")
        msg = from_event(e)
        if isinstance(msg, Grant):
            decided = part.on_grant(msg)
        elif isinstance(msg, Recall):
            decided = part.on_recall(msg)
        else:
            assert isinstance(msg, Answer)
            decided = part.on_answer(self.replica.core, msg, now, source=e.event_id)
        return self._outputs(decided, q, e.event_id, now)

    def _save(self, q: int, decided: Decided) -> None:
        part = self.part(q)
        for job_id in decided.touched:
            row = part.row(job_id)
            if row is None:
                self.table.pop(f"p:{q}:{job_id}", None)
            else:
                self.table[f"p:{q}:{job_id}"] = msgspec.to_builtins(row)
        for row_id, hold_row in decided.hold_rows.items():
            if hold_row is None:
                self.table.pop(f"h:{q}:{row_id}", None)
            else:
                self.table[f"h:{q}:{row_id}"] = msgspec.to_builtins(hold_row)

    def _outputs(self, decided: Decided, q: int, source_id: str, now: float) -> list[ev.Event]:
        """Rows first (the outputs wait for them, see ``OutputProducer``), then one
        assignment batch per job, the lease messages, and the declined check-ins per
        gateway."""
        self._save(q, decided)
        out: list[ev.Event] = []
        by_job: dict[str, list[ev.Assignment]] = {}
        for a in decided.assigned:
            by_job.setdefault(a.job_id, []).append(
                assignment(
                    a.checkin_id,
                    a.device_id,
                    a.job_id,
                    a.round_index,
                    self.config.task_url(a.job_id, a.round_index),
                    a.speed_ms_per_sample,
                    a.bandwidth_kbps,
                    now,
                )
            )
        out += [assignment_batch(source_id, job, items, now) for job, items in by_job.items()]
        messages: list[Message] = [*decided.offers, *decided.reports]
        out.extend(to_event(m, now) for m in messages)
        declined: dict[str, list[str]] = {}
        for checkin_id, reply_to in decided.declined:
            if reply_to:
                declined.setdefault(reply_to, []).append(checkin_id)
        for reply_to, ids in declined.items():
            out.append(
                ev.CheckinsDeclined(
                    event_id=f"dec:{source_id}:{reply_to}",
                    time=now,
                    reply_to=reply_to,
                    checkin_ids=ids,
                )
            )
        return out
