"""The mechanism that applies a policy: job and round bookkeeping, tier matching and
fairness, and when to recompute the plan and recompile the dispatch table.

Events in (all carry ``now``; the core never reads a clock):
``add_job``, ``request_round``, ``checkin`` -> ``Assignment | None``, ``close_round``,
``remove_job``. Replayed events are ignored (each returns whether it changed state), so
an at-least-once pipeline can feed it directly.

What a policy prefers is the policy's (``venn.core.policies``), including the weight of a
job's remaining demand in its order key; how the preference becomes a table is
``venn.core.compile``'s; the open jobs are filed incrementally, event by event, in
``venn.core.open_jobs``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from venn.core.capacity import TierModel, proxies_of
from venn.core.compile import TableCompiler
from venn.core.dispatch import DispatchTable, empty_table
from venn.core.eligibility import EligibilityIndex
from venn.core.fairness import Progress, demand_weight, group_queue_scale, progress_ratio
from venn.core.lp_plan import Backlog
from venn.core.matching import TailTracker, should_restrict
from venn.core.model import Assignment, JobSpec
from venn.core.open_jobs import OpenJobs
from venn.core.policies.base import PlanContext, Policy, PolicyView
from venn.core.round_cursor import Applied
from venn.core.state import JobState, mean, splitmix
from venn.core.supply import ReportedSupply, Supply, SupplyWindow
from venn.core.tenants import TenantConfig, TenantLayer, TenantLedger

__all__ = ["JobState", "RoundView", "Scheduler"]


class RoundView(NamedTuple):
    """A live job's round, as the pipeline reads it."""

    round_index: int
    round_open: bool
    tier: int | None
    """The capacity tier the round is restricted to (None: any)."""
    deadline: float
    """The job's round deadline, in seconds."""
    demand: int = 0
    """The demand per round the job was registered with (a round asks at most this)."""


def _device_key(device_id: Hashable | None) -> str | int:
    """An assignment's device id: as given if a str or int, else its str (-1 if none)."""
    if device_id is None:
        return -1
    return device_id if isinstance(device_id, str | int) else str(device_id)


class Scheduler:
    """Applies one policy, optionally with tier matching and epsilon fairness.

    ``restrict_contested`` says when matching may restrict a round to a capacity tier.
    True is Algorithm 2 as the paper states it: whenever the job's own test passes.
    False (Venn's default) adds a condition: no other job with open demand may be
    eligible for the devices the round passes over, and a restriction lifts at the first
    plan recompute where such a job appears. A restricted round hands the slower tiers
    to its competitors while it fills more slowly; on the contended Table 1 workloads
    their loss outweighs its gain (docs/results/reproduction.md, "Tier matching under
    contention"), while devices nobody else wants cost nobody anything.

    ``tenants``: shares and priority classes on top of the policy
    (``venn.core.tenants``); None (the default) decides exactly as the policy alone.

    ``dispatch_margin``: a round is offered ``ceil(k * (1 + margin))`` devices (k the
    results that make it succeed) instead of its demand D; if it has taken them with less
    than ``margin_guard`` round latencies (its mean fill-to-close time so far) left before
    its deadline, it is offered the rest of D, so that a round that filled late still
    closes in time. Fewer stragglers past 0.8 D, each round closing a little later
    (docs/results/reproduction.md, "Waste"). None (the default): every round is offered D.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        tiers: TierModel | None = None,
        fairness_eps: float = 0.0,
        supply_window: int = 1000,
        supply_reports: bool = False,
        seed: int = 0,
        track_devices: bool = True,
        restrict_contested: bool = False,
        tenants: TenantConfig | None = None,
        dispatch_margin: float | None = None,
        margin_guard: float = 3.0,
    ) -> None:
        self.policy = policy
        self.dispatch_margin = dispatch_margin
        self.margin_guard = margin_guard
        # Two attributes only: past 30, CPython 3.11 stores an object's attributes in a
        # plain dict, and every attribute read of every decision got slower (7%).
        self.layer: TenantLayer | None = None
        self._applied: Policy = policy  # what compiles: the policy, or it under tenants
        if tenants is not None:
            self.layer = TenantLayer(policy, tenants, TenantLedger(tenants.half_life_s), [])
            self._applied = self.layer
        self.tiers = tiers
        self.restrict_contested = restrict_contested
        self._overlap = np.zeros((0, 0), dtype=bool)  # groups sharing a signature
        self._overlap_of: np.ndarray | None = None
        self.fairness_eps = fairness_eps
        self.seed = seed
        self.track_devices = track_devices
        self.index = EligibilityIndex()
        # With reports, gateways count every check-in (also those they answer themselves)
        # and the check-ins decided here are not counted a second time.
        self._window = None if supply_reports else SupplyWindow(supply_window)
        self.supply: Supply = self._window or ReportedSupply(supply_window)
        self.tails = TailTracker(tiers.num_tiers) if tiers else None
        self.jobs: dict[str, JobState] = {}
        self.by_idx: list[JobState] = []
        self.active_devices: dict[Hashable, tuple[str, int]] = {}
        self.open = OpenJobs(self.num_tiers, policy.ordering == "key")
        self._compiler = TableCompiler(self.num_tiers)
        self._table = empty_table(0)
        self._dirty = True
        self._replan = True
        self._group_scale: dict[int, float] = {}  # fairness: each group's queue multiplier
        self.compiles = 0
        self.replans = 0
        self.restricted = 0  # rounds restricted to a tier at their request
        self.lifted = 0  # of those, restrictions lifted because a competitor appeared

    @property
    def tenants(self) -> TenantConfig | None:
        return self.layer.config if self.layer is not None else None

    @property
    def ledger(self) -> TenantLedger | None:
        return self.layer.ledger if self.layer is not None else None

    # -- jobs and rounds -------------------------------------------------------------
    @property
    def num_tiers(self) -> int:
        return self.tiers.num_tiers if self.tiers else 1

    def add_job(self, spec: JobSpec, now: float) -> bool:
        """Register a job; a replayed registration is ignored."""
        if spec.job_id in self.jobs:
            return False
        layer = self.layer
        if layer is None:
            group = self.index.group(spec.requirement)
        else:
            group = self.index.group(spec.requirement, (spec.tenant, spec.priority))
            layer.label(group, spec)
        state = JobState(spec, len(self.by_idx), group, now)
        self.jobs[spec.job_id] = state
        self.by_idx.append(state)
        self.open.touch(state.idx)
        self._mark(replan=True)
        return True

    def request_round(
        self, job_id: str, round_index: int, now: float, demand: int | None = None
    ) -> bool:
        """Open a round; False if the job is unknown or finished, or the request opens no
        attempt (``RoundCursor.request``: a replay, a stale index, or a round whose close
        was read first)."""
        js = self.jobs.get(job_id)
        if js is None or js.finished:
            return False
        opened = js.rounds.request(round_index) is Applied.CHANGED
        if not opened or js.rounds.open_index != round_index:
            return False
        if js.round_open:  # an older attempt whose close is not read yet: it ends here
            self._end_round(js)
        js.round_index = round_index
        js.round_open = True
        js.demand = js.remaining = demand if demand is not None else js.spec.demand
        js.held_back = 0
        if self.dispatch_margin is not None:
            offered = min(js.demand, math.ceil(js.spec.results_needed * (1 + self.dispatch_margin)))
            js.held_back = js.demand - offered
            js.remaining = offered
        js.assigned = 0
        js.requested_at = now
        js.filled_at = None
        self.open.touch(js.idx)
        js.tier = self._matching_tier(js)  # may file the job (to count its competitors)
        self.open.touch(js.idx)  # so file it again, with its tier
        self.restricted += js.tier is not None
        self._mark(replan=True)
        return True

    def close_round(
        self,
        job_id: str,
        round_index: int,
        now: float,
        succeeded: bool,
        tiers: Sequence[int] | np.ndarray = (),
        response_times: Sequence[float] | np.ndarray = (),
    ) -> bool:
        """Count the close of an attempt; False if the job is unknown or the attempt was
        closed already. If it is the open round, the round ends here, and its fill time and
        response times (by device tier) feed the matching; a close read before its request,
        or after a newer request ended its round, only counts."""
        js = self.jobs.get(job_id)
        if js is None or js.rounds.close(round_index) is not Applied.CHANGED:
            return False
        js.attempts += 1
        js.rounds_done += succeeded
        if js.round_open and js.round_index == round_index:
            filled = js.filled_at if js.filled_at is not None else now
            js.sched_delays.append(filled - js.requested_at)
            js.response_times.append(now - filled)
            if self.tails is not None and len(response_times):
                self.tails.record(tiers, response_times)
            self._end_round(js)
        self._mark(replan=True)
        return True

    def remove_job(self, job_id: str) -> bool:
        """Forget a finished or cancelled job (its idx stays reserved)."""
        js = self.jobs.get(job_id)
        if js is None:
            return False
        if js.round_open:
            self._end_round(js)
        js.rounds_done = max(js.rounds_done, js.spec.rounds)
        del self.jobs[job_id]
        self._mark(replan=True)
        return True

    def _end_round(self, js: JobState) -> None:
        js.round_open = False
        js.remaining = 0
        self.open.touch(js.idx)
        for device in js.devices:
            self.active_devices.pop(device, None)
        js.devices.clear()

    def touch(self, job_id: str) -> None:
        """The job's state was written from outside (a snapshot restore): file it anew
        and recompute the plan."""
        js = self.jobs.get(job_id)
        if js is not None:
            self.open.touch(js.idx)
            self._mark(replan=True)

    def release_device(self, device_id: Hashable) -> None:
        """The device's task ended (result or failure): it may take a new assignment."""
        holder = self.active_devices.pop(device_id, None)
        if holder is not None:
            js = self.jobs.get(holder[0])
            if js is not None:
                js.devices.discard(device_id)

    def adopt(self, job_id: str, round_index: int, device_id: Hashable, now: float) -> bool:
        """Account an assignment decided outside this instance (e.g. before a restart).

        Ignored if the round is not open, has no demand left, or already holds the device.
        """
        js = self.jobs.get(job_id)
        if (
            js is None
            or not js.round_open
            or js.round_index != round_index
            or js.remaining <= 0
            or device_id in js.devices
        ):
            return False
        js.remaining -= 1
        js.assigned += 1
        js.service += 1
        if self.layer is not None:
            taken = self.layer.taken
            taken[js.idx] = taken.get(js.idx, 0) + 1
        self.open.touch(js.idx)
        if js.remaining <= 0:
            js.filled_at = now
        if self.track_devices:
            self.active_devices[device_id] = (job_id, round_index)
            js.devices.add(device_id)
        self._mark(replan=True)
        return True

    # -- what the pipeline reads (the core's structures stay inside) ------------------
    def holder(self, device_id: Hashable) -> tuple[str, int] | None:
        """(job, round) whose assignment ``device_id`` holds, or None."""
        return self.active_devices.get(device_id)

    def holds_any(self, device_ids: Iterable[Hashable]) -> bool:
        """Whether any of ``device_ids`` holds an assignment."""
        return not self.active_devices.keys().isdisjoint(device_ids)

    def round_view(self, job_id: str) -> RoundView | None:
        """The job's round as the pipeline sees it; None for a job not live here."""
        js = self.jobs.get(job_id)
        if js is None:
            return None
        return RoundView(js.round_index, js.round_open, js.tier, js.spec.deadline, js.spec.demand)

    def demand_by_tenant(self) -> dict[str, int]:
        """The live jobs' demands per round (as registered), summed per tenant: what the
        operator's limits count (`venn.core.admission.Load`)."""
        out: dict[str, int] = {}
        for js in self.jobs.values():
            out[js.spec.tenant] = out.get(js.spec.tenant, 0) + js.spec.demand
        return out

    def live_jobs(self) -> int:
        """Live jobs (registered and not removed)."""
        return len(self.jobs)

    def slots_for(
        self, keys: Sequence[Hashable], attrs: Mapping[Hashable, Mapping[str, float]]
    ) -> np.ndarray:
        """The slot of every item whose attribute set is ``attrs[keys[i]]``."""
        return self.index.slots_for(keys, attrs)

    def tiers_for(self, speeds_ms: np.ndarray, bandwidths_kbps: np.ndarray) -> np.ndarray | None:
        """The capacity tier of every device (None without tier matching)."""
        if self.tiers is None:
            return None
        return self.tiers.tiers_of(proxies_of(speeds_ms, bandwidths_kbps))

    def _matching_tier(self, js: JobState) -> int | None:
        if self.tiers is None or self.tails is None or not js.response_times:
            return None  # first rounds skip matching: no profile yet
        v = self.tiers.num_tiers
        u = splitmix(self.seed, js.idx, js.attempts) % v
        resp = mean(js.response_times)
        sched = mean(js.sched_delays)
        if resp <= 0 or (sched > 0 and 1 + resp / sched <= v):
            # should_restrict is False whatever the tail ratio (g >= 0, so
            # v + g*c >= v >= 1 + c): skip computing it.
            return None
        g = self.tails.tail_ratio(u, self.tiers.prior_tail_ratio)
        if not should_restrict(v, g, resp, sched):
            return None
        if not self.restrict_contested:
            self._refresh_open()
            if self._contested(js):
                return None
        return u

    def _contested(self, js: JobState) -> bool:
        """Whether another job with open demand shares a signature with ``js`` (the open
        jobs must be refreshed)."""
        sig_matrix = self.index.signature_matrix  # a new array whenever the index changes
        if self._overlap_of is not sig_matrix:
            m = sig_matrix.astype(np.int64)
            self._overlap = (m.T @ m) > 0
            self._overlap_of = sig_matrix
        row = self._overlap[js.group]
        mine = js.idx in self.open.entries
        for group, count in self.open.open_counts().items():
            if row[group] and count - (mine and group == js.group) > 0:
                return True
        return False

    def _lift_contested_restrictions(self) -> None:
        """Drop the tier restriction of every open round that another open job contests
        (for the rest of the round: a later request decides afresh)."""
        for idx in sorted(self.open.restricted):
            js = self.by_idx[idx]
            if self._contested(js):
                js.tier = None
                self.lifted += 1
                self.open.touch(idx)

    # -- check-ins -------------------------------------------------------------------
    def round_of(self, idx: int) -> tuple[str, int]:
        """Job idx -> (job id, its current round)."""
        js = self.by_idx[idx]
        return js.spec.job_id, js.round_index

    def replan(self) -> None:
        """Recompute the plan at the next table (a device signature first seen)."""
        self._mark(replan=True)

    def slot_of(self, attrs: Mapping[str, float]) -> int:
        return self.index.slot_for_attrs(attrs)

    def tier_of(self, proxy: float) -> int:
        return self.tiers.tier_of(proxy) if self.tiers else 0

    def checkin(
        self,
        slot: int,
        now: float,
        tier: int = 0,
        u: float = 0.0,
        device_id: Hashable | None = None,
        weight: float = 1.0,
    ) -> Assignment | None:
        """Decide one check-in: the device's slot, capacity tier and a U(0,1) draw;
        ``weight``: the check-ins it stands for in the supply window (venn.core.pace)."""
        if self._window is not None:
            self._window.observe(slot, now, weight)
        return self._decide(slot, now, tier, u, device_id)

    def _decide(
        self, slot: int, now: float, tier: int, u: float, device_id: Hashable | None
    ) -> Assignment | None:
        if device_id is not None and self.track_devices and device_id in self.active_devices:
            return None
        sig = int(self.index.signature_of_slot[slot])
        if sig >= self._table.counts.shape[0]:
            # A signature first seen after the last compile (the pipeline meets device
            # attribute sets as they come): the plan must include it.
            self._mark(replan=True)
        table = self.table(now)
        idx = table.pick(sig, tier if self.tiers else 0, u)
        if idx < 0:
            return None
        js = self.by_idx[idx]
        self._take(js, 1, now)
        if device_id is not None and self.track_devices:
            self.active_devices[device_id] = (js.spec.job_id, js.round_index)
            js.devices.add(device_id)
        return Assignment(js.spec.job_id, js.round_index, _device_key(device_id))

    def checkin_batch(
        self,
        slots: np.ndarray,
        now: float,
        tiers: np.ndarray | None = None,
        draws: Callable[[], np.ndarray] | None = None,
        device_ids: Sequence[Hashable] | None = None,
    ) -> np.ndarray:
        """Decide many check-ins of one instant: the job idx each gets, -1 for none.

        The same decisions as ``checkin`` item by item in order (a device already holding
        an assignment, or taking one earlier in the batch, gets none), except that the
        supply window sees the whole batch before the first compile. ``draws`` gives the
        items' U(0,1) draws; it is called only if a table picks uniformly (computing them
        costs more than the decision). The dispatch table holds until some job's budget is
        spent, so the batch is scanned in segments against one table each and every
        segment's assignments are accounted at once, as the simulator's fast mode does.
        """
        n = len(slots)
        if n == 0:
            return np.full(0, -1, dtype=np.int64)
        slots = np.asarray(slots, dtype=np.int64)
        if self._window is not None:
            self._window.observe_many(slots, np.full(n, now))
        track = device_ids is not None and self.track_devices
        if track and len(set(device_ids)) < n:  # type: ignore[arg-type]
            # A device twice in one batch: its second check-in depends on the first.
            return self._checkin_items(slots, now, tiers, draws, device_ids)
        todo = list(range(n))
        active = self.active_devices
        if track and not active.keys().isdisjoint(device_ids):  # type: ignore[arg-type]
            todo = [i for i in todo if device_ids[i] not in active]  # type: ignore[index]
        sigs = self.index.signature_of_slot[slots].tolist()
        v = self.num_tiers
        keys = (
            [s * v + t for s, t in zip(sigs, tiers.tolist(), strict=True)]
            if self.tiers is not None and tiers is not None
            else [s * v for s in sigs]
        )
        out = [-1] * n
        us: list[float] | None = None
        retried = -1  # the check-in a replan was made for
        i, m = 0, len(todo)
        while i < m:
            table = self.table(now)
            num_sigs = table.counts.shape[0]
            picked: dict[int, list[int]] = {}
            limits: dict[int, int] = {}
            budget = table.budget
            unseen = -1
            stop = m
            if table.uniform and us is None:
                us = (draws() if draws is not None else np.zeros(n)).tolist()
            rows = table.rows() if table.uniform else None
            heads = table.heads()
            first = i
            if not table.any_candidate:  # only a new signature can change that
                first = next((k for k in range(i, m) if sigs[todo[k]] >= num_sigs), m)
                if first == m:
                    break
            for k in range(first, m):
                item = todo[k]
                if sigs[item] >= num_sigs:
                    unseen = k  # first seen since the last compile: the plan must include it
                    break
                if rows is None:
                    job = heads[keys[item]]
                    if job < 0:
                        continue
                else:
                    row = rows[keys[item]]
                    c = len(row)
                    if not c:
                        continue
                    job = row[min(int(us[item] * c), c - 1)]  # type: ignore[index]
                mine = picked.get(job)
                if mine is None:
                    mine = picked[job] = [item]
                    limits[job] = int(budget[job])
                else:
                    mine.append(item)
                if len(mine) >= limits[job]:
                    stop = k + 1  # the table changes after this one
                    break
            for job, items in picked.items():
                js = self.by_idx[job]
                self._take(js, len(items), now)
                for item in items:
                    out[item] = job
                if track:
                    devices = [device_ids[item] for item in items]  # type: ignore[index]
                    active.update(dict.fromkeys(devices, (js.spec.job_id, js.round_index)))
                    js.devices.update(devices)
            if unseen < 0:
                i = stop
            elif unseen == retried:
                i = unseen + 1  # the new plan still lacks it: no job for it (as checkin)
                self._mark(replan=True)
            else:
                i = retried = unseen
                self._mark(replan=True)
        return np.array(out, dtype=np.int64)

    def _checkin_items(
        self,
        slots: np.ndarray,
        now: float,
        tiers: np.ndarray | None,
        draws: Callable[[], np.ndarray] | None,
        device_ids: Sequence[Hashable] | None,
    ) -> np.ndarray:
        """``checkin_batch`` one item at a time (the supply window already holds them)."""
        n = len(slots)
        out = np.full(n, -1, dtype=np.int64)
        u = np.asarray(draws(), dtype=float) if draws is not None else np.zeros(n)
        for i in range(n):
            a = self._decide(
                int(slots[i]),
                now,
                int(tiers[i]) if tiers is not None else 0,
                float(u[i]),
                device_ids[i] if device_ids is not None else None,
            )
            if a is not None:
                out[i] = self.jobs[a.job_id].idx
        return out

    # -- batch interface (the fast simulator) ----------------------------------------
    def observe_many(self, slots: np.ndarray, times: np.ndarray) -> None:
        """Feed check-ins to the supply window without deciding them."""
        assert self._window is not None, "supply comes from gateways' reports"
        self._window.observe_many(slots, times)

    def observe_report(
        self, source: str, slots: np.ndarray, counts: np.ndarray, interval_s: float, now: float
    ) -> None:
        """Feed one gateway's supply report (``counts[i]`` check-ins of ``slots[i]``)."""
        assert isinstance(self.supply, ReportedSupply), "supply comes from the check-ins read"
        first = self.supply.total_observed == 0
        self.supply.observe_report(source, slots, counts, interval_s, now)
        if not len(slots):
            return
        if first or int(self.index.signature_of_slot[slots].max()) >= self._table.counts.shape[0]:
            # The first supply seen (a plan made before it had none), or a device signature
            # the plan has not seen.
            self._mark(replan=True)

    def assign_many(self, idx: int, count: int, fill_time: float) -> None:
        """Account ``count`` assignments decided with the current table for job ``idx``.

        ``fill_time`` is the time of the assignment that would fill the demand.
        """
        self._take(self.by_idx[idx], count, fill_time)

    def _take(self, js: JobState, count: int, now: float) -> None:
        js.remaining -= count
        js.assigned += count
        js.service += count
        layer = self.layer
        idx = js.idx
        if layer is not None:  # tenants: a count, filed at the next compile
            taken = layer.taken
            taken[idx] = taken.get(idx, 0) + count
        self.open.touched.add(idx)
        budget = self._table.budget
        if idx < len(budget):
            left = int(budget[idx]) - count  # Python ints: numpy scalar arithmetic is slower
            budget[idx] = left
        else:  # a job the table predates (a partition's accepted offer): compile anew
            left = 0
        if js.remaining <= 0 and js.held_back and self._offer_held_back(js, now):
            self._dirty = True
        elif js.remaining <= 0:
            js.filled_at = now
            self._dirty = self._replan = True
        elif left <= 0:
            self._dirty = True

    def _offer_held_back(self, js: JobState, now: float) -> bool:
        """The round took its margin: offer it the rest of its demand if little time is
        left before its deadline (True), else it is filled."""
        latency = mean(js.response_times) if js.response_times else 2 * js.spec.workload_s
        late = js.requested_at + js.spec.deadline - now < self.margin_guard * latency
        if late:
            js.remaining += js.held_back
        js.held_back = 0
        return late

    # -- compilation -----------------------------------------------------------------
    def _mark(self, replan: bool) -> None:
        self._dirty = True
        self._replan = self._replan or replan

    @property
    def dirty(self) -> bool:
        return self._dirty

    @property
    def reads_supply(self) -> bool:
        """Whether the next compile may read the supply window (a plan recompute, or
        fairness weights): a caller feeding it in batches must have fed it by then."""
        return self._dirty and (self._replan or bool(self.fairness_eps))

    def table(self, now: float) -> DispatchTable:
        """The dispatch table for this instant, recompiled if a plan event happened."""
        if self._dirty:
            self._compile(now)
        return self._table

    def _refresh_open(self, now: float | None = None) -> None:
        """Re-file the touched jobs (every open job when fairness weights, which change
        with time, apply and ``now`` is given)."""
        policy_weight = self._applied.weight
        if not self.fairness_eps or now is None:
            self.open.refresh(self.by_idx, policy_weight)
            return
        # Membership first (who is open now), then every open job with its new weight.
        self.open.refresh(self.by_idx, policy_weight)
        states = [self.by_idx[i] for i in self.open.idx_ascending()]
        if not states:
            self._group_scale = {}
            return
        eps = self.fairness_eps
        rhos = self._progress_ratios(states, now)
        fair = {js.idx: demand_weight(rhos[js.idx], eps) for js in states}
        by_group: dict[int, list[float]] = {}
        for js in states:
            by_group.setdefault(js.group, []).append(fair[js.idx] ** (1 / eps))
        self._group_scale = {g: group_queue_scale(r, eps) for g, r in by_group.items()}
        self.open.refile_all(states, lambda js: fair[js.idx] * policy_weight(js))

    def _progress_ratios(self, states: list[JobState], now: float) -> dict[int, float]:
        rate = self.supply.rate_per_s()
        counts = self.supply.slot_counts(self.index.num_slots)
        total = counts.sum()
        concurrent = sum(1 for js in self.jobs.values() if not js.finished)
        out = {}
        for js in states:
            share = float(counts[self.index.matrix[:, js.group]].sum() / total) if total else 0.0
            eligible_rate = rate * share
            resp = mean(js.response_times) if js.response_times else js.spec.workload_s
            per_round = (js.spec.demand / eligible_rate if eligible_rate > 0 else 0.0) + resp
            # Service received: completed rounds only (venn.core.fairness says why).
            done = js.rounds_done / js.spec.rounds
            p = Progress(now - js.registered_at, done, js.spec.rounds * per_round)
            out[js.idx] = progress_ratio(p, concurrent)
        return out

    def _plan_context(self, now: float) -> PlanContext:
        """Every unfinished job for a plan over a horizon: its group, its work left and
        the most devices per second it can take (a round's D per fill at its group's
        eligible rate plus its round latency)."""
        rate = self.supply.rate_per_s()
        counts = self.signature_counts()
        total = float(counts.sum())
        sig_matrix = self.index.signature_matrix
        group_rate = (
            rate * (counts[: sig_matrix.shape[0]] @ sig_matrix) / total
            if total > 0
            else np.zeros(sig_matrix.shape[1])
        )
        backlog = []
        for js in self.jobs.values():
            if js.finished:
                continue
            spec = js.spec
            later = spec.rounds - js.rounds_done - (1 if js.round_open else 0)
            work = (js.remaining if js.round_open else 0) + max(0, later) * spec.demand
            eligible = float(group_rate[js.group]) if js.group < len(group_rate) else 0.0
            latency = mean(js.response_times) if js.response_times else 2 * spec.workload_s
            fill = spec.demand / eligible if eligible > 0 else float("inf")
            backlog.append(Backlog(js.group, float(work), spec.demand / (fill + latency)))
        return PlanContext(now, rate, backlog)

    def _tenant_of(self, idx: int) -> str:
        return self.by_idx[idx].spec.tenant

    def _supply_by_signature(self) -> np.ndarray:
        return self.signature_counts()

    def signature_counts(self) -> np.ndarray:
        """Check-ins per device signature in the supply held."""
        index = self.index
        slots = self.supply.slot_counts(index.num_slots)
        sigs = index.signature_of_slot[: index.num_slots]
        return np.bincount(sigs, weights=slots, minlength=index.num_signatures)[
            : index.num_signatures
        ]

    def _compile(self, now: float) -> None:
        self._refresh_open()
        if self._replan and not self.restrict_contested and self.open.restricted:
            # Competitors appear only with plan events (a round request, a new signature).
            self._lift_contested_restrictions()
        if self.fairness_eps or self.open.touched:
            self._refresh_open(now)
        open_jobs = self.open
        view = PolicyView(
            self.index.signature_matrix,
            self._supply_by_signature,
            len(open_jobs),
            open_jobs.group_queues,
            self._group_scale if self.fairness_eps else None,
            lambda: self._plan_context(now),
        )
        policy = self._applied
        if self._replan:
            policy.replan(view)
            self.replans += 1
        self.compiles += 1
        layer = policy if isinstance(policy, TenantLayer) else None
        if layer is not None:
            layer.file(self._tenant_of)
            layer.ledger.advance(now)
            layer.rerank(view)
            if layer.refile:  # tenants' key factors moved: every open job's key with them
                layer.refile = False
                states = [self.by_idx[i] for i in self.open.idx_ascending()]
                self.open.refile_all(states, layer.weight)
        self._table = self._compiler.compile(open_jobs, len(self.by_idx), policy, view)
        if layer is not None:
            table = self._table
            if table.head_list is not None or not table.uniform:
                layer.charges(view, table.heads(), len(self.by_idx), self.num_tiers)
        if layer is not None and len(layer.ranks) > 1:
            # Standing moves with every assignment: rank again after a few.
            np.minimum(self._table.budget, layer.config.rerank_every, out=self._table.budget)
        self._dirty = False
        self._replan = False
