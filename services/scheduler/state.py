"""The scheduler worker's state machine: decoded events in, core calls, table rows and
assignments out. No Kafka here; the Faust app feeds it and publishes what it returns.

Durable state lives in a scheduler store (`services.scheduler.store`; Faust tables with
changelogs in production), in two kinds of rows:
- ``jobs``: job_id -> row = core snapshot (``venn.core.snapshot``) + ``partition`` (the
  job's partition) + ``removed`` (tombstone, so replays cannot resurrect a job). Written
  on job and round events only: registered, round requested, round closed, removed.
- ``round``: the open rounds' assignments and results, in rows that are written once:
  ``a:<AssignmentBatch id>`` -> the batch's assignments as read back ([id, device, tier,
  active]), and ``r:<job>:<round>:<device>`` -> one device's result ([tier, response time]
  of a good result, else None). All are deleted when the round ends. The cost of a round
  is so O(demand) with one write per batch and per result (a job row holding every
  assignment, rewritten on each, made it O(demand^2)); a row per assignment made every
  assignment its own changelog produce request, 5 times slower under load.
On a rebuild, each job is restored from its snapshot (taken at the start of its round) and
the rows of its open round are applied again: assignments adopted, then released where a
result came, which restores the remaining demand and the devices still busy.

Every row is written while processing an event of the job's own partition (venn.jobs,
venn.rounds, venn.results and venn.assignments are all keyed by job_id): Faust writes a
changelog record to the partition of the current event, so rows of one job always land
in one changelog partition and recovery replays them in order. That is why an
assignment decided on a check-in (keyed by device) is accounted in the tables only when
the worker reads it back from venn.assignments (``on_assignment``). Check-ins come in
batches (``CheckinBatch``) and their assignments go out as one ``AssignmentBatch`` per
job and batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from services.scheduler import metrics
from services.scheduler.dedupe import RecentIds
from services.scheduler.outputs import assignment, assignment_batches, uniform_of
from services.scheduler.readback import ReadBack
from services.scheduler.rows import (
    AssignedItem,
    AssignmentsRow,
    ResultRow,
    TierResult,
    decode_round_row,
)
from services.scheduler.sent import SentBatches
from services.scheduler.status import Estimates
from services.scheduler.store import Row, SchedulerStore
from services.scheduler.tables import readable
from venn import events as ev
from venn.broker.stream import Refused
from venn.checkin_columns import CheckinColumns
from venn.core import make_scheduler
from venn.core.capacity import proxies_of, proxy_of
from venn.core.model import DEFAULT_TENANT, JobSpec, Requirement
from venn.core.scheduler import Scheduler
from venn.core.snapshot import JobSnapshot, decode_snapshot, restore_job, snapshot_job
from venn.core.supply import AttributeMix, SlotCounts
from venn.core.tenants import TenantConfig
from venn.settings import SchedulerSettings

log = logging.getLogger(__name__)


DIRECT_SOURCE = "direct"
"""The supply source of check-ins no gateway counted."""
DIRECT_REPORT_S = 1.0


@dataclass
class OpenRoundRows:
    """What the ``round`` table holds of one job's open round."""

    round_index: int
    keys: list[str] = field(default_factory=list)
    """Rows to delete when the round ends."""
    assignments: set[str] = field(default_factory=set)
    """Ids of the assignments read back."""
    tiers: dict[str, int | None] = field(default_factory=dict)
    """Device -> its capacity tier while it holds an assignment (None: released before
    it was read back)."""
    results: dict[str, TierResult | None] = field(default_factory=dict)
    """Device -> its good result, None for a failure."""


class SchedulerState:
    def __init__(
        self,
        config: SchedulerSettings,
        store: SchedulerStore,
        readback: ReadBack | None = None,
        tenants: TenantConfig | None = None,
        max_bytes: int = ev.DEFAULT_MAX_BYTES,
    ) -> None:
        self.config = config
        self.max_bytes = max_bytes
        """Largest event its readers accept (VENN_MAX_EVENT_BYTES): outputs stay within it."""
        self.tenants = tenants
        self.store = store
        self.recent = RecentIds(config.dedupe_window)
        self.core = self._new_core(time.time())
        self.removed: set[str] = set()
        self.rows: dict[str, Row] = {}
        self.snapshots: dict[str, JobSnapshot] = {}
        """Job -> the snapshot its row holds (the row holds it as plain JSON types)."""
        self.ledgers: dict[str, OpenRoundRows] = {}
        """job_id -> what the ``round`` table holds of its open round."""
        self.decided: set[str] = set()  # assignment ids this core instance decided itself
        self.stale_checkins = 0
        self.unreadable_rows = 0
        """Table rows skipped at a rebuild: not rows, or not restorable."""
        self.held_since: dict[str, float] = {}
        """Device -> when it took the assignment it holds (this worker's clock)."""
        self.overdue_released = 0
        self.last_seen: dict[str, float] = {}
        """Live job -> when its coordinator last said anything (this worker's clock)."""
        self.expiring: set[str] = set()
        self.sent = SentBatches()
        self.loaded = False
        self.supply_reports = 0
        self.mix = AttributeMix()
        """The attribute sets of the recent check-ins, for admission (`venn.core.admission`)."""
        self.estimates = Estimates()
        """The completion estimates of its snapshots (`services.scheduler.status`)."""
        self.readback = readback or ReadBack(lambda partition: None)
        """Holds decisions after a takeover (`services.scheduler.readback`); open by default."""

    def _new_core(self, now: float) -> Scheduler:
        # Supply comes as counts: gateways report what they receive (most of which they
        # answer themselves); check-ins no gateway counted are counted here (``direct``).
        self.direct = SlotCounts(now)
        self.direct_attrs: list[Mapping[str, float]] = []
        return make_scheduler(
            self.config.policy, seed=self.config.seed, supply_reports=True, tenants=self.tenants
        )

    # -- supply ------------------------------------------------------------------------
    def on_supply_report(self, event: ev.SupplyReport, now: float) -> None:
        """A gateway's counts of the check-ins it received in its last interval."""
        core = self.core
        slots = np.array([core.slot_of(c.attrs) for c in event.counts], dtype=np.int64)
        counts = np.array([c.count for c in event.counts], dtype=np.float64)
        core.observe_report(event.gateway, slots, counts, event.interval_s, now)
        self.supply_reports += 1
        for c in event.counts:
            self.mix.observe(c.attrs, c.count)

    def _count_direct(
        self, slots: np.ndarray, attrs: list[Mapping[str, float]], now: float
    ) -> None:
        """Check-ins no gateway counted (produced straight to Kafka, or an older gateway's)."""
        self.direct.add(slots)
        self.direct_attrs.extend(attrs)
        self.report_direct(now)

    def report_direct(self, now: float) -> None:
        """The direct check-ins counted since the last report, as the direct source's
        report, once DIRECT_REPORT_S has passed: on a later check-in or on the next status
        snapshot, so that none waits for a check-in that may not come. Their attribute sets
        join the mix in the same step: a snapshot's mix and rate describe the same
        check-ins."""
        direct = self.direct
        if not self.direct_attrs or now - direct.since < DIRECT_REPORT_S:
            return
        found, counts, interval = direct.drain(now)
        self.core.observe_report(DIRECT_SOURCE, found, counts, interval, now)
        for attrs in self.direct_attrs:
            self.mix.observe(attrs)
        self.direct_attrs = []

    # -- recovery ----------------------------------------------------------------------
    def invalidate(self) -> None:
        """Partitions changed: rebuild the core from the tables before the next event."""
        self.loaded = False

    def ensure_loaded(self, now: float) -> None:
        if self.loaded:
            return
        self.core = self._new_core(now)
        self.removed.clear()
        self.rows.clear()
        self.snapshots.clear()
        self.ledgers.clear()
        self.decided.clear()
        self.sent.clear()
        self.last_seen.clear()
        self.expiring.clear()
        for job_id, row in self.store.job_rows():
            if not readable(job_id, row):
                self._unreadable("jobs", job_id)
                continue
            assert isinstance(job_id, str) and isinstance(row, dict)
            try:
                if row.get("removed"):
                    self.removed.add(job_id)
                else:
                    snap = decode_snapshot(row["core"])
                    restore_job(self.core, snap, now)
                    self.snapshots[job_id] = snap
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
                # One bad row must not block every later event: skip it, keep the rest.
                self._unreadable("jobs", job_id)
                continue
            self.rows[job_id] = row
            self.last_seen[job_id] = now  # silence is counted from the rebuild
        rows: list[tuple[str, Row]] = []
        for key, row in self.store.round_rows():
            if not readable(key, row):
                self._unreadable("round", key)
            else:
                assert isinstance(key, str) and isinstance(row, dict)
                rows.append((key, row))
        # Assignments before results: a result releases a device its assignment made busy.
        rows.sort(key=lambda kv: not kv[0].startswith("a:"))
        applied = 0
        for key, row in rows:
            try:
                applied += self._reapply(key, row, now)
            except (KeyError, TypeError, ValueError, AttributeError, IndexError):
                self._unreadable("round", key)
        self.loaded = True
        log.info(
            "scheduler core rebuilt: %d jobs, %d removed, %d rows of open rounds",
            len(self.rows),
            len(self.removed),
            applied,
        )

    def _unreadable(self, table: str, key: object) -> None:
        """A row that cannot be restored: skipped (one bad row must not block every later
        event) and counted."""
        self.unreadable_rows += 1
        metrics.UNREADABLE_ROWS.labels(table).inc()
        log.error("cannot restore %s row %r; skipped", table, key, exc_info=True)

    def _reapply(self, key: str, raw: Row, now: float) -> int:
        row = decode_round_row(key, raw)
        job_id, round_index = row.job, row.round
        js = self.core.jobs.get(job_id)
        if js is None or not js.round_open or js.round_index != round_index:
            return 0  # a row of an ended round whose delete did not land: ignore it
        ledger = self._ledger(job_id, round_index)
        ledger.keys.append(key)
        if isinstance(row, AssignmentsRow):
            for item in row.items:
                ledger.assignments.add(item.assignment_id)
                ledger.tiers[item.device_id] = item.tier if item.active else None
                adopted = self.core.adopt(job_id, round_index, item.device_id, now)
                if adopted and not item.active:
                    self.core.release_device(item.device_id)
        else:
            ledger.results[row.device] = row.result
            self.core.release_device(row.device)
        return 1

    def _ledger(self, job_id: str, round_index: int) -> OpenRoundRows:
        ledger = self.ledgers.get(job_id)
        if ledger is None or ledger.round_index != round_index:
            ledger = self.ledgers[job_id] = OpenRoundRows(round_index)
        return ledger

    # -- rows --------------------------------------------------------------------------
    def _save(self, job_id: str, partition: int, **changes: Any) -> Row:
        old = self.rows.get(job_id, {})
        row: Row = {
            "partition": partition,
            "removed": False,
            **{k: v for k, v in old.items() if k != "core"},
            **changes,
        }
        js = self.core.jobs.get(job_id)
        if js is not None:
            snap = self.snapshots[job_id] = snapshot_job(js)
            row["core"] = msgspec.to_builtins(snap)
        elif "core" in old:
            row["core"] = old["core"]
        self.rows[job_id] = row
        self.store.put_job(job_id, row)
        return row

    def _end_round_rows(self, job_id: str) -> None:
        """Delete the rows of the job's round that ended, and forget when its devices took
        their assignments (the round's end released them; kept, the hold times of every
        device ever assigned made the map grow without bound)."""
        ledger = self.ledgers.pop(job_id, None)
        if ledger is None:
            return
        self.store.delete_rounds(ledger.keys)
        active = self.core.active_devices
        for device in ledger.tiers:
            if device not in active:
                self.held_since.pop(device, None)

    def _known(self, job_id: str) -> bool:
        """True for a live job, False for a removed one; Refused for a never-seen one."""
        if job_id in self.core.jobs:
            return True
        if job_id in self.removed:
            return False
        raise Refused(f"unknown job {job_id!r}")

    # -- venn.jobs ---------------------------------------------------------------------
    def on_job_event(self, event: ev.Event, partition: int, now: float) -> None:
        """A job event the agent admitted (its token checked: `venn.broker.stream.authorized`)."""
        if isinstance(event, ev.JobAdmission):
            return None  # the job API's decision; an admitted job comes as its registration
        self._heard_of(event, now)
        if isinstance(event, ev.JobHeartbeat):
            self._known(event.job_id)
            return None
        if isinstance(event, ev.JobExpired):
            if self._known(event.job_id):
                self._remove(event.job_id, partition)
            return None
        if isinstance(event, ev.JobRegistered):
            known = self.rows.get(event.job_id)
            if known is not None:
                first = known.get("submit_token")
                if event.submit_token and first and event.submit_token != first:
                    # A second submission under a taken id, not a retry of the first.
                    raise Refused(f"job id {event.job_id!r} is already registered")
                return None
            if event.job_id in self.removed:
                return None
            spec = JobSpec(
                event.job_id,
                Requirement.of(event.requirement),
                event.demand,
                event.rounds,
                event.deadline_s,
                arrival=event.time,
                workload_s=event.workload_s,
                tenant=event.tenant or DEFAULT_TENANT,
                priority=event.priority or 0,
            )
            if self.core.add_job(spec, now):
                self._save(event.job_id, partition, submit_token=event.submit_token)
        elif isinstance(event, ev.RoundRequested):
            if not self._known(event.job_id):
                return None
            if self.core.request_round(event.job_id, event.round_index, now, event.demand):
                self._end_round_rows(event.job_id)
                self._save(event.job_id, partition)
        elif isinstance(event, ev.JobCancelled) and (
            event.job_id in self.core.jobs or event.job_id not in self.removed
        ):
            # A job cancelled while the job API still queued it was never registered here:
            # its tombstone keeps a registration that crossed the cancel from running it.
            self._remove(event.job_id, partition)
        return None

    def _heard_of(self, event: ev.Event, now: float) -> None:
        job_id = getattr(event, "job_id", None)
        if isinstance(job_id, str) and not isinstance(event, ev.JobExpired):
            self.last_seen[job_id] = now

    def silent_jobs(self, now: float) -> list[tuple[str, float]]:
        """Live jobs of this worker silent for longer than the timeout, each reported once:
        (job id, last seen). The caller publishes their JobExpired on venn.jobs, so that the
        removal is applied (and its table rows written) on the job's own partition."""
        timeout = self.config.job_timeout_s
        if timeout <= 0:
            return []
        found = [
            (job_id, seen)
            for job_id, seen in self.last_seen.items()
            if now - seen > timeout and job_id in self.core.jobs and job_id not in self.expiring
        ]
        self.expiring.update(job_id for job_id, _ in found)
        return found

    def _remove(self, job_id: str, partition: int) -> None:
        self.last_seen.pop(job_id, None)
        self.expiring.discard(job_id)
        self.core.remove_job(job_id)
        self.removed.add(job_id)
        self._end_round_rows(job_id)
        self._save(job_id, partition, removed=True)

    # -- venn.rounds -------------------------------------------------------------------
    def on_round_event(self, event: ev.Event, partition: int, now: float) -> bool:
        """Apply a round close or a job's end; True when the close counted: the first of
        its attempt, whether it ends the open round or overtook its own request (then no
        round opens for it) or came after a newer request had ended its round. The agent
        admitted the event (its token checked: `venn.broker.stream.authorized`)."""
        self._heard_of(event, now)
        if isinstance(event, ev.RoundClosed):
            if not self._known(event.job_id):
                return False
            js = self.core.jobs[event.job_id]
            was_open = js.round_open and js.round_index == event.round_index
            ledger = self.ledgers.get(event.job_id)
            found = ledger.results.values() if ledger is not None and was_open else ()
            results = [r for r in found if r is not None]
            closed = self.core.close_round(
                event.job_id,
                event.round_index,
                now,
                event.outcome == "succeeded",
                tiers=[r.tier for r in results],
                response_times=[r.response_time_s for r in results],
            )
            if closed:
                if was_open:
                    self._end_round_rows(event.job_id)
                self._save(event.job_id, partition)
            return bool(closed)
        if isinstance(event, ev.JobFinished) and self._known(event.job_id):
            self._remove(event.job_id, partition)
        return False

    # -- venn.results ------------------------------------------------------------------
    def on_result(self, event: ev.Event, partition: int, now: float) -> None:
        assert isinstance(event, ev.DeviceResult)
        if self._known(event.job_id):
            self._record_result(event, partition)

    def _record_result(self, event: ev.DeviceResult, partition: int) -> None:
        holder = (event.job_id, event.round_index)
        if self.core.active_devices.get(event.device_id) != holder:
            return  # late or duplicate: the device no longer holds this assignment
        self.core.release_device(event.device_id)
        self.held_since.pop(event.device_id, None)
        ledger = self.ledgers.get(event.job_id)
        if ledger is None or ledger.round_index != event.round_index:
            return  # released before it was read back: no tier, nothing to record
        tier = ledger.tiers.get(event.device_id)
        result = TierResult(tier, event.response_time_s) if event.ok and tier is not None else None
        key = f"r:{event.job_id}:{event.round_index}:{event.device_id}"
        ledger.results[event.device_id] = result
        ledger.keys.append(key)
        row = ResultRow(
            partition=partition,
            job=event.job_id,
            round=event.round_index,
            device=event.device_id,
            result=result,
        )
        self.store.put_round(key, msgspec.to_builtins(row))

    # -- venn.checkins -----------------------------------------------------------------
    def on_checkin(self, event: ev.Event, now: float) -> ev.Assignment | None:
        assert isinstance(event, ev.DeviceCheckin)
        if now - event.time > self.config.checkin_max_age_s:
            # Read long after it was sent (a restart, an offset reset): its device was
            # answered retry_after long ago and may be gone; it must not take a slot.
            self.stale_checkins += 1
            return None
        self._release_if_overdue(event.device_id, now)
        slot = self.core.slot_of(event.attrs)
        if not event.counted:
            self._count_direct(np.array([slot]), [event.attrs], now)
        if event.observe_only:
            return None
        if not self.readback.may_decide():
            metrics.READBACK_HELD.inc()
            return None
        tier = self.core.tier_of(proxy_of(event.speed_ms_per_sample, event.bandwidth_kbps))
        compiles, started = self.core.compiles, time.perf_counter()
        decision = self.core.checkin(
            slot, now, tier=tier, u=uniform_of(event.event_id), device_id=event.device_id
        )
        if self.core.compiles != compiles:  # a plan event since the last decision
            metrics.PLAN_RECOMPUTE.observe(time.perf_counter() - started)
        if decision is None:
            return None
        out = assignment(
            event.event_id,
            event.device_id,
            decision.job_id,
            decision.round_index,
            self.config.task_url(decision.job_id, decision.round_index),
            event.speed_ms_per_sample,
            event.bandwidth_kbps,
            now,
        )
        self.decided.add(out.event_id)
        self.held_since[event.device_id] = now
        return out

    def _release_if_overdue(self, device_id: str, now: float) -> None:
        """A device still holding an assignment past its job's round deadline took the task
        and vanished (or gave up): it no longer holds it, and may be assigned again."""
        holder = self.core.active_devices.get(device_id)
        if holder is None:
            return
        js = self.core.jobs.get(holder[0])
        since = self.held_since.setdefault(device_id, now)
        if js is None or now - since > js.spec.deadline:
            self.core.release_device(device_id)
            self.held_since.pop(device_id, None)
            self.overdue_released += 1

    def on_checkin_batch(
        self, batch: ev.CheckinBatch | CheckinColumns, now: float
    ) -> list[ev.Event]:
        """Decide every check-in of a batch: one AssignmentBatch per job that got devices,
        and a CheckinsDeclined for the rest if the batch asks for a reply."""
        return self.on_checkin_batches([batch], now)

    def on_checkin_batches(
        self, batches: list[ev.CheckinBatch | CheckinColumns], now: float
    ) -> list[ev.Event]:
        """Decide the check-ins of several batches (read in one fetch) as one: one
        AssignmentBatch per job that got devices, and for each batch that asks for a reply
        a CheckinsDeclined for the rest of its check-ins. The scheduler's cost is per
        decision and per output message, so a fleet's gateways cost it one of each per
        fetch rather than per gateway (docs/results/fleet.md).

        Decided as columns (``Scheduler.checkin_batch``): slots per distinct attribute
        set, tiers and the staleness cut with numpy, the dispatch table applied per
        segment. Decisions match ``on_checkin`` item by item, except that the supply
        window sees the whole batch before a compile."""
        parts = [b if isinstance(b, CheckinColumns) else CheckinColumns.of(b) for b in batches]
        cols = parts[0] if len(parts) == 1 else CheckinColumns.concat(parts)
        picks = self._decide_columns(cols, now)
        if picks is None:
            return []
        out: list[ev.Event] = self._assignment_batches(cols, picks, now)
        start = 0
        for part in parts:
            end = start + len(part)
            declined = np.flatnonzero(picks[start:end] < 0).tolist() if part.reply_to else []
            if declined:
                assert part.reply_to is not None
                out.append(
                    ev.CheckinsDeclined(
                        event_id=f"dec:{part.event_id}",
                        time=now,
                        reply_to=part.reply_to,
                        checkin_ids=[part.event_ids[i] for i in declined],
                    )
                )
            start = end
        return out

    def _decide_columns(self, cols: CheckinColumns, now: float) -> np.ndarray | None:
        """Each check-in's pick: the index of the job it is assigned to, or -1; None for
        no check-ins."""
        n = len(cols)
        if n == 0:
            return None
        core = self.core
        fresh = (now - cols.times) <= self.config.checkin_max_age_s
        stale = n - int(fresh.sum())
        self.stale_checkins += stale
        device_ids = cols.device_ids
        if not core.active_devices.keys().isdisjoint(device_ids):
            for i in np.flatnonzero(fresh).tolist():
                self._release_if_overdue(device_ids[i], now)
        slots = core.index.slots_for(cols.attr_keys, cols.attrs)
        uncounted = fresh & ~cols.counted
        if uncounted.any():
            attrs, keys = cols.attrs, cols.attr_keys
            self._count_direct(
                slots[uncounted], [attrs[keys[i]] for i in np.flatnonzero(uncounted).tolist()], now
            )
        deciding = np.flatnonzero(fresh & ~cols.observe_only)
        if len(deciding) and not self.readback.may_decide():
            metrics.READBACK_HELD.inc(len(deciding))
            deciding = deciding[:0]
        picks = np.full(n, -1, dtype=np.int64)
        if len(deciding):
            event_ids = cols.event_ids
            subset = deciding.tolist()
            tiers = (
                core.tiers.tiers_of(proxies_of(cols.speeds[deciding], cols.bandwidths[deciding]))
                if core.tiers is not None
                else None
            )
            compiles, started = core.compiles, time.perf_counter()
            picks[deciding] = core.checkin_batch(
                slots[deciding],
                now,
                tiers,
                draws=lambda: np.array([uniform_of(event_ids[i]) for i in subset]),
                device_ids=[device_ids[i] for i in subset],
            )
            made = core.compiles - compiles
            if made:  # one observation per compile, each its share of the call
                share = (time.perf_counter() - started) / made
                for _ in range(made):
                    metrics.PLAN_RECOMPUTE.observe(share)
        return picks

    def _assignment_batches(
        self, cols: CheckinColumns, picks: np.ndarray, now: float
    ) -> list[ev.Event]:
        """One AssignmentBatch per job that got devices, in the order of its first
        check-in in the batch."""
        assigned = np.flatnonzero(picks >= 0)
        if not len(assigned):
            return []
        jobs = picks[assigned]
        found, first = np.unique(jobs, return_index=True)
        speeds = cols.speeds.tolist()
        bandwidths = cols.bandwidths.tolist()
        out: list[ev.Event] = []
        for idx in found[np.argsort(first)].tolist():
            js = self.core.by_idx[idx]
            job_id, rnd = js.spec.job_id, js.round_index
            url = self.config.task_url(job_id, rnd)
            items = [
                assignment(
                    cols.event_ids[i],
                    cols.device_ids[i],
                    job_id,
                    rnd,
                    url,
                    speeds[i],
                    bandwidths[i],
                    now,
                )
                for i in assigned[jobs == idx].tolist()
            ]
            self.decided.update(a.event_id for a in items)
            self.held_since.update(dict.fromkeys((a.device_id for a in items), now))
            out.extend(assignment_batches(cols.event_id, job_id, items, now, self.max_bytes))
        return out

    # -- venn.assignments (read back on the job's partition) ---------------------------
    def _own_entries(
        self, items: list[ev.Assignment], round_index: int, ledger: OpenRoundRows
    ) -> list[AssignedItem]:
        """The read-back items of a batch this worker decided (every item its own, of the
        open round, new to the ledger), made with set operations; [] for any other batch
        (``on_assignment`` then goes item by item)."""
        ids = [a.event_id for a in items]
        if (
            not ids
            or len(set(ids)) != len(ids)
            or not self.decided.issuperset(ids)
            or not ledger.assignments.isdisjoint(ids)
            or any(a.round_index != round_index for a in items)
        ):
            return []
        self.decided.difference_update(ids)
        devices = [a.device_id for a in items]
        core = self.core
        if core.tiers is not None:
            proxies = proxies_of(
                np.array([a.speed_ms_per_sample for a in items]),
                np.array([a.bandwidth_kbps for a in items]),
            )
            tiers = core.tiers.tiers_of(proxies).tolist()
        else:
            tiers = [0] * len(items)
        holder = (items[0].job_id, round_index)
        get = core.active_devices.get
        # Released before it was read back: kept as inactive (a replay is not accounted).
        active = [get(d) == holder for d in devices]
        ledger.assignments.update(ids)
        ledger.tiers.update(
            zip(
                devices, [t if a else None for t, a in zip(tiers, active, strict=True)], strict=True
            )
        )
        return [AssignedItem(*item) for item in zip(ids, devices, tiers, active, strict=True)]

    def on_assignment(self, event: ev.Event, partition: int, now: float) -> int:
        """Account an Assignment or an AssignmentBatch: one row in the ``round`` table.
        Returns how many were decided before a restart and had to be adopted by the core."""
        assert isinstance(event, ev.Assignment | ev.AssignmentBatch)
        items = ev.assignments_of(event)
        strays = [a.event_id for a in items if a.job_id != event.job_id]
        if strays:
            raise Refused(f"assignments {strays[:3]} are not for job {event.job_id!r}")
        if not self._known(event.job_id):
            return 0
        js = self.core.jobs[event.job_id]
        ledger = self._ledger(event.job_id, js.round_index)
        adopted = 0
        entries = self._own_entries(items, js.round_index, ledger)
        for a in items if not entries else ():
            if js.round_index != a.round_index or a.event_id in ledger.assignments:
                continue
            if a.event_id in self.decided:
                self.decided.discard(a.event_id)
            elif self.core.adopt(a.job_id, a.round_index, a.device_id, now):
                self.held_since[a.device_id] = now
                adopted += 1
            # Released before it was read back, or refused on adoption (over demand): kept
            # as inactive so that a replay of it is not accounted again.
            active = self.core.active_devices.get(a.device_id) == (a.job_id, a.round_index)
            tier = self.core.tier_of(proxy_of(a.speed_ms_per_sample, a.bandwidth_kbps))
            ledger.assignments.add(a.event_id)
            ledger.tiers[a.device_id] = tier if active else None
            entries.append(AssignedItem(a.event_id, a.device_id, tier, active))
        if entries:
            key = f"a:{event.event_id}"
            ledger.keys.append(key)
            row = AssignmentsRow(
                partition=partition, job=event.job_id, round=js.round_index, items=entries
            )
            self.store.put_round(key, msgspec.to_builtins(row))
        stored = self.snapshots.get(event.job_id)
        if stored is None or stored.tier != js.tier:
            # The core lifted the round's tier restriction when a competitor opened a
            # round (on another job's event): persist it here, on this job's partition.
            self._save(event.job_id, partition)
        return adopted
