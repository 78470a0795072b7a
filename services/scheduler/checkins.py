"""Deciding check-ins: a batch's columns in, the core's one decision over them
(`Scheduler.checkin_batch`), and out one AssignmentBatch per job that got devices and one
CheckinsDeclined per batch that asks for a reply. Each job's assignments are written to
its open round's rows (`services.scheduler.rounds`) in the same step: the decision is in
the tables before it is published (`services.scheduler.inputs`)."""

from __future__ import annotations

import time

import numpy as np

from services.scheduler import metrics
from services.scheduler.liveness import Liveness
from services.scheduler.outputs import assignment, assignment_batches, uniform_of
from services.scheduler.rounds import OpenRounds
from services.scheduler.rows import AssignedItem
from services.scheduler.supply import SupplyBook
from venn import events as ev
from venn.checkin_columns import CheckinColumns
from venn.core.capacity import proxy_of
from venn.core.scheduler import Scheduler
from venn.settings import SchedulerSettings


class Checkins:
    def __init__(
        self,
        config: SchedulerSettings,
        liveness: Liveness,
        supply: SupplyBook,
        rounds: OpenRounds,
        max_bytes: int,
        answer_wait_s: float | None = None,
    ) -> None:
        self.config = config
        self.answer_wait_s = answer_wait_s
        """How long a gateway waits for the answer to a check-in it forwarded
        (VENN_GATEWAY_WAIT_S); None: as long as a check-in stays fresh."""
        self.liveness = liveness
        self.supply = supply
        self.rounds = rounds
        self.max_bytes = max_bytes
        """Largest event its readers accept (VENN_MAX_EVENT_BYTES): outputs stay within it."""
        self.stale = 0
        """Check-ins read too long after they were sent to act on (VENN_CHECKIN_MAX_AGE_S)."""

    def one(self, core: Scheduler, event: ev.DeviceCheckin, now: float) -> ev.Assignment | None:
        """A single check-in (a device producing to Kafka directly)."""
        if now - event.time > self.config.checkin_max_age_s:
            # Read long after it was sent (a restart, an offset reset): its device was
            # answered retry_after long ago and may be gone; it must not take a slot.
            self.stale += 1
            return None
        self.liveness.release_if_overdue(core, event.device_id, now)
        slot = core.slot_of(event.attrs)
        if not event.counted:
            self.supply.count_direct(core, np.array([slot]), [event.attrs], now, [event.device_id])
        if event.observe_only:
            return None
        tier = core.tier_of(proxy_of(event.speed_ms_per_sample, event.bandwidth_kbps))
        compiles, started = core.compiles, time.perf_counter()
        decision = core.checkin(
            slot, now, tier=tier, u=uniform_of(event.event_id), device_id=event.device_id
        )
        if core.compiles != compiles:  # a plan event since the last decision
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
        item = AssignedItem(
            out.event_id,
            event.device_id,
            tier,
            True,
            event.speed_ms_per_sample,
            event.bandwidth_kbps,
            now,
        )
        self.rounds.assigned(decision.job_id, decision.round_index, out.event_id, [item])
        self.liveness.took([event.device_id], now)
        return out

    def batches(
        self, core: Scheduler, batches: list[ev.CheckinBatch | CheckinColumns], now: float
    ) -> list[ev.Event]:
        """Decide the check-ins of several batches (read in one fetch) as one: one
        AssignmentBatch per job that got devices, and for each batch that asks for a reply
        a CheckinsDeclined for the rest of its check-ins. The scheduler's cost is per
        decision and per output message, so a fleet's gateways cost it one of each per
        fetch rather than per gateway (docs/results/fleet.md)."""
        parts = [b if isinstance(b, CheckinColumns) else CheckinColumns.of(b) for b in batches]
        cols = parts[0] if len(parts) == 1 else CheckinColumns.concat(parts)
        if not len(cols):
            return []
        max_age = np.concatenate([np.full(len(part), self._max_age(part)) for part in parts])
        picks, tiers = self._decide(core, cols, max_age, now)
        out: list[ev.Event] = self._assignments(core, cols, picks, tiers, now)
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

    def _max_age(self, part: CheckinColumns) -> float:
        """How old a check-in of ``part`` may be when decided. A gateway answers a device
        "retry" once it has waited `answer_wait_s` for the decision: decided later (the
        scheduler restarting, or behind), an assignment would hold a device that was told
        to go away, and its round would wait for it until its deadline."""
        limit = self.config.checkin_max_age_s
        if part.reply_to is not None and self.answer_wait_s is not None:
            return min(limit, self.answer_wait_s)
        return limit

    def _decide(
        self, core: Scheduler, cols: CheckinColumns, max_age: np.ndarray, now: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each check-in's pick (the index of the job it is assigned to, or -1) and its
        device's capacity tier (0 without tiers)."""
        n = len(cols)
        fresh = (now - cols.times) <= max_age
        self.stale += n - int(fresh.sum())
        device_ids = cols.device_ids
        if core.holds_any(device_ids):
            for i in np.flatnonzero(fresh).tolist():
                self.liveness.release_if_overdue(core, device_ids[i], now)
        slots = core.slots_for(cols.attr_keys, cols.attrs)
        uncounted = fresh & ~cols.counted
        if uncounted.any():
            attrs, keys = cols.attrs, cols.attr_keys
            rows = np.flatnonzero(uncounted).tolist()
            found = [attrs[keys[i]] for i in rows]
            devices = [device_ids[i] for i in rows]
            self.supply.count_direct(core, slots[uncounted], found, now, devices)
        deciding = np.flatnonzero(fresh & ~cols.observe_only)
        picks = np.full(n, -1, dtype=np.int64)
        tiers = np.zeros(n, dtype=np.int64)
        if not len(deciding):
            return picks, tiers
        event_ids = cols.event_ids
        subset = deciding.tolist()
        found_tiers = core.tiers_for(cols.speeds[deciding], cols.bandwidths[deciding])
        if found_tiers is not None:
            tiers[deciding] = found_tiers
        compiles, started = core.compiles, time.perf_counter()
        picks[deciding] = core.checkin_batch(
            slots[deciding],
            now,
            found_tiers,
            draws=lambda: np.array([uniform_of(event_ids[i]) for i in subset]),
            device_ids=[device_ids[i] for i in subset],
        )
        made = core.compiles - compiles
        if made:  # one observation per compile, each its share of the call
            share = (time.perf_counter() - started) / made
            for _ in range(made):
                metrics.PLAN_RECOMPUTE.observe(share)
        return picks, tiers

    def _assignments(
        self,
        core: Scheduler,
        cols: CheckinColumns,
        picks: np.ndarray,
        tiers: np.ndarray,
        now: float,
    ) -> list[ev.Event]:
        """One AssignmentBatch per job that got devices (more if one would pass the event
        size limit), in the order of its first check-in; each written to its round's rows."""
        assigned = np.flatnonzero(picks >= 0)
        if not len(assigned):
            return []
        jobs = picks[assigned]
        found, first = np.unique(jobs, return_index=True)
        speeds = cols.speeds.tolist()
        bandwidths = cols.bandwidths.tolist()
        tier_of = tiers.tolist()
        out: list[ev.Event] = []
        for idx in found[np.argsort(first)].tolist():
            job_id, rnd = core.round_of(idx)
            url = self.config.task_url(job_id, rnd)
            mine = assigned[jobs == idx].tolist()
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
                for i in mine
            ]
            self.liveness.took((a.device_id for a in items), now)
            for batch in assignment_batches(cols.event_id, job_id, items, now, self.max_bytes):
                rows = [
                    AssignedItem(
                        a.event_id,
                        a.device_id,
                        tier_of[i],
                        True,
                        a.speed_ms_per_sample,
                        a.bandwidth_kbps,
                        now,
                    )
                    for a, i in zip(batch.assignments, mine, strict=False)
                ]
                mine = mine[len(batch.assignments) :]
                self.rounds.assigned(job_id, rnd, batch.event_id, rows)
                out.append(batch)
        return out
