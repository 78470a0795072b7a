"""The trace-driven, discrete-event simulator (semantics of the paper's §5).

Events: job arrival, round request, check-in, round close (at ceil(0.8*D) results or at
the deadline), horizon end. A dispatched task starts after U(0,2) s of noise, takes
``W*comp + 2*C/comm`` seconds, and fails if it ends past its device's window (+80 s).
Ties are broken deterministically: timed events at time t run before a check-in at t,
closes before requests, then by insertion order.

Two modes share the scheduling core:
- ``event``: one ``Scheduler.checkin`` call per check-in (the reference);
- ``fast``: the dispatch table is static between plan changes, so the check-ins up to
  the next plan change are decided as one step against it, and the step's assignments
  are committed at once, both by compiled code (``venn.sim.kernels``) over columnar
  round results (``venn.sim.rounds.RoundStore``). Both give identical results for the
  same seed (a test checks it for every policy).
Check-ins are streamed chunk by chunk from the trace, never all in memory.

A device checks in once per availability window (the trace's check-in), unless the run has
a ``pace`` (``venn.core.pace``, the gateway's retry_after): then a device that got no
assignment checks in again after the pace's answer (sooner when an open round with demand
left admits it, later when none does, jittered) while its window lasts, and the supply
window counts each check-in with the pace's weight for the interval it was told, as the
gateways weight what they report. Event mode only (retries depend on each answer).
"""

from __future__ import annotations

import heapq
import itertools
import random
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from venn.core.capacity import TierModel, capacity_proxy
from venn.core.dispatch import DispatchTable
from venn.core.model import JobSpec
from venn.core.pace import Pace, Want
from venn.core.policies import IrsPolicy
from venn.core.registry import POLICIES, make_scheduler
from venn.core.scheduler import Scheduler
from venn.core.tenants import TenantConfig
from venn.sim import kernels
from venn.sim.plan_kernel import CompiledPlanner
from venn.sim.rounds import (
    ROUND_GAP_S,
    WINDOW_SLACK_S,
    JobRecord,
    LiveRound,
    RoundRecord,
    RoundStore,
)
from venn.sim.supply_feed import ReportFeed
from venn.traces.checkins import CheckinBatch, CheckinSource
from venn.traces.devices import DeviceProfiles

Mode = Literal["fast", "event"]

# The compiled steps, called with their columns unpacked from tuples.
_Kernel = Callable[..., tuple[int, int]]
step_first: _Kernel = kernels.step_first
step_uniform: _Kernel = kernels.step_uniform
commit: _Kernel = kernels.commit

_CLOSE, _DEADLINE, _ARRIVAL, _REQUEST = 0, 1, 2, 3


@dataclass(frozen=True)
class SimConfig:
    """What a run needs besides the jobs and the trace."""

    policy: str = "venn"
    seed: int = 0
    horizon_s: float = float("inf")
    mode: Mode = "fast"
    num_tiers: int = 3
    fairness_eps: float = 0.0
    supply_window: int = 1000
    transfer_s: float = 10.0
    # > 0: the scheduler plans with supply counts reported every ``supply_report_s`` and
    # read ``supply_delay_s`` later (the pipeline's gateways), not with the check-ins it sees.
    supply_report_s: float = 0.0
    supply_delay_s: float = 0.1
    tenants: TenantConfig | None = None  # shares and priority classes (venn.core.tenants)
    # A device without an assignment checks in again at this pace while its window lasts
    # (None: once per window, the trace's check-in). Event mode only.
    pace: Pace | None = None
    pace_weights: bool = True  # False (an ablation): the supply counts paced check-ins as one


@dataclass
class SimRun:
    """Raw outcome of one run: every job's record and a few counters."""

    config: SimConfig
    jobs: list[JobRecord]
    checkins: int
    assignments: int
    end_time: float
    compiles: int
    replans: int
    rounds_restricted: int = 0  # rounds restricted to a capacity tier at their request
    restrictions_lifted: int = 0
    retries: int = 0  # check-ins a pace added to the trace's (included in ``checkins``)


class Simulation:
    """One run of a set of jobs over a check-in trace under one policy."""

    def __init__(
        self,
        jobs: Sequence[JobSpec],
        source: CheckinSource,
        profiles: DeviceProfiles,
        config: SimConfig,
        tiers: TierModel | None = None,
        on_arrival: Callable[[Scheduler, str, float], None] | None = None,
    ) -> None:
        if config.policy not in POLICIES:
            raise ValueError(f"unknown policy {config.policy!r}")
        if config.pace is not None and config.mode != "event":
            raise ValueError("a pace is simulated in event mode only (mode='event')")
        self.config = config
        self.source = source
        self.on_arrival = on_arrival  # called with a job registered and its round open
        self.sched: Scheduler = make_scheduler(
            config.policy,
            seed=config.seed,
            tiers=tiers,
            num_tiers=config.num_tiers,
            fairness_eps=config.fairness_eps,
            supply_window=config.supply_window,
            supply_reports=config.supply_report_s > 0,
            track_devices=False,
            tenants=config.tenants,
        )
        self._feed = (
            ReportFeed(self.sched, config.supply_report_s, config.supply_delay_s)
            if config.supply_report_s > 0
            else None
        )
        if isinstance(self.sched.policy, IrsPolicy):
            self.sched.policy.planner = CompiledPlanner()  # the same plans, compiled
        # Profile i is slot i: the trace's profile column indexes slots directly.
        self.sched.index.add_profiles(profiles.attrs)
        self.records = {j.job_id: JobRecord(j) for j in jobs}
        self.live: dict[str, LiveRound] = {}
        # By job idx (registration order): the open round, and the results it needs.
        self._live_of: list[LiveRound | None] = []
        self._needed: list[int] = []
        self._detail = self.sched.tails is not None  # matching learns from the results
        # The same by job idx as arrays, and the open rounds' results (compiled steps).
        self._workload_a = np.zeros(max(1, len(jobs)), dtype=np.float64)
        self._needed_a = np.zeros(max(1, len(jobs)), dtype=np.int64)
        self._store = RoundStore(len(jobs), max((j.demand for j in jobs), default=1))
        self.heap: list[tuple[float, int, int, str, int]] = []
        self._seq = itertools.count()
        self.checkins = 0
        self.assignments = 0
        self.unfinished = len(self.records)
        self.now = 0.0
        # Paced check-ins to come: (time, seq, slot, tier, window end, comp, transfer,
        # weight), and the draws of their jitter, dispatch noise and u.
        self._retries: list[tuple[float, int, int, int, float, float, float, float]] = []
        self.retried = 0
        self._rng = random.Random(config.seed)
        self._wanted_of = -1
        self._wanted_slots: np.ndarray = np.zeros(0, dtype=bool)
        for job in sorted(jobs, key=lambda j: (j.arrival, j.job_id)):
            self._push(job.arrival, _ARRIVAL, job.job_id, 0)
        self._workload: list[float] = []  # per job idx (registration order)

    # -- timed events ----------------------------------------------------------------
    def _push(self, t: float, kind: int, job_id: str, attempt: int) -> None:
        heapq.heappush(self.heap, (t, kind, next(self._seq), job_id, attempt))

    def _run_timed(self, until: float) -> None:
        """Run timed events with time <= until."""
        while self.heap and self.heap[0][0] <= until:
            t, kind, _, job_id, attempt = heapq.heappop(self.heap)
            self.now = t
            if kind == _ARRIVAL:
                spec = self.records[job_id].spec
                self.sched.add_job(spec, t)
                idx = len(self._workload)
                self._workload.append(spec.workload_s)
                self._live_of.append(None)
                self._needed.append(spec.results_needed)
                self._workload_a[idx] = spec.workload_s
                self._needed_a[idx] = spec.results_needed
                self._request(job_id, t)
                if self.on_arrival is not None:
                    self.on_arrival(self.sched, job_id, t)
            elif kind == _REQUEST:
                self._request(job_id, t)
            else:
                self._maybe_close(job_id, attempt, t, kind)

    def _request(self, job_id: str, t: float) -> None:
        rec = self.records[job_id]
        attempt = len(rec.rounds)
        spec = rec.spec
        rr = RoundRecord(job_id, attempt, t, spec.demand, t + spec.deadline)
        rec.rounds.append(rr)
        idx = self.sched.jobs[job_id].idx
        lr = self.live[job_id] = LiveRound(rr, self._store, idx, self._detail)
        self.sched.request_round(job_id, attempt, t)
        self._live_of[idx] = lr
        self._push(rr.deadline_at, _DEADLINE, job_id, attempt)

    def _maybe_close(self, job_id: str, attempt: int, t: float, kind: int) -> None:
        lr = self.live.get(job_id)
        if lr is None or lr.record.attempt != attempt:
            return
        if kind == _CLOSE and lr.close_candidate != t:
            return  # superseded by an earlier candidate
        succeeded = kind == _CLOSE
        rr = lr.record
        results, tiers, resp, late = lr.arrived_by(t)
        rr.results = results
        rr.stragglers = late
        if succeeded and late:
            rr.surplus = lr.dispatched_after_counted(t)
        js = self.sched.jobs[job_id]
        rr.filled_at = js.filled_at
        rr.closed_at = t
        rr.succeeded = succeeded
        self.sched.close_round(job_id, attempt, t, succeeded, tiers, resp)
        del self.live[job_id]
        self._live_of[js.idx] = None
        rec = self.records[job_id]
        if succeeded:
            rec.succeeded_rounds += 1
        if rec.succeeded_rounds >= rec.spec.rounds:
            rec.finished_at = t
            self.sched.remove_job(job_id)
            self.unfinished -= 1
        else:
            self._push(t + ROUND_GAP_S, _REQUEST, job_id, 0)

    def _offer_close(self, lr: LiveRound, needed: int) -> None:
        c = lr.kth_finish(needed)
        if c < lr.close_candidate:
            lr.close_candidate = c
            self._push(c, _CLOSE, lr.record.job_id, lr.record.attempt)

    # -- the run ---------------------------------------------------------------------
    def run(self) -> SimRun:
        """Run until every job finished or the trace/horizon ends."""
        horizon = self.config.horizon_s
        for batch in self.source.chunks(0.0, horizon):
            if self.unfinished == 0:
                break
            prepared = self._prepare(batch)
            if self.config.mode == "event":
                self._run_event(prepared)
            else:
                self._run_fast(prepared)
            self.checkins += len(batch)
        if self._retries and self.unfinished:
            self._run_retries(horizon)
        if self.unfinished:
            self._run_timed(horizon)
        return SimRun(
            self.config,
            list(self.records.values()),
            self.checkins,
            self.assignments,
            self.now,
            self.sched.compiles,
            self.sched.replans,
            self.sched.restricted,
            self.sched.lifted,
            self.retried,
        )

    def _prepare(self, b: CheckinBatch) -> _Prepared:
        tiers = (
            self.sched.tiers.tiers_of(capacity_proxy(b.comp, b.comm))
            if self.sched.tiers
            else np.zeros(len(b), dtype=np.int64)
        )
        transfer = 2.0 * self.config.transfer_s / b.comm
        return _Prepared(b, b.profile.astype(np.int64), tiers, transfer)

    def _task(self, p: _Prepared, rows: np.ndarray, jobs: np.ndarray) -> tuple[np.ndarray, ...]:
        """(response time, finish time, succeeded) of tasks dispatched at ``rows``."""
        b = p.batch
        workload = np.array(self._workload)
        resp = b.noise[rows] + workload[jobs] * b.comp[rows] + p.transfer[rows]
        finish = b.time[rows] + resp
        ok = finish <= b.end[rows] + WINDOW_SLACK_S
        return resp, finish, ok

    def _run_event(self, p: _Prepared) -> None:
        b = p.batch
        times = b.time.tolist()
        slots, tiers = p.slots.tolist(), p.tiers.tolist()
        ends, comps, transfers = b.end.tolist(), b.comp.tolist(), p.transfer.tolist()
        noises, us = b.noise.tolist(), b.u.tolist()
        for i, t in enumerate(times):
            if self._retries:
                self._run_retries(t)
            self._run_timed(t)
            self.now = t
            self._checkin(
                t, slots[i], tiers[i], us[i], ends[i], comps[i], transfers[i], noises[i], 1.0
            )

    def _run_retries(self, until: float) -> None:
        """Paced check-ins before ``until``, in time order among the timed events."""
        retries, rng = self._retries, self._rng
        while retries and retries[0][0] < until and self.unfinished:
            t, _, slot, tier, end, comp, transfer, weight = heapq.heappop(retries)
            self._run_timed(t)
            self.now = t
            self.retried += 1
            self.checkins += 1
            noise = rng.uniform(0.0, 2.0)
            self._checkin(t, slot, tier, rng.random(), end, comp, transfer, noise, weight)

    def _checkin(
        self,
        t: float,
        slot: int,
        tier: int,
        u: float,
        end: float,
        comp: float,
        transfer: float,
        noise: float,
        weight: float,
    ) -> None:
        """One check-in decided by the scheduler, and its task if assigned."""
        sched = self.sched
        if self._feed is not None:
            self._feed.add(np.array([slot]), np.array([t]), np.array([weight]))
            self._feed.deliver(t)
        a = sched.checkin(slot, t, tier, u, weight=weight)
        if a is None:
            if self.config.pace is not None:
                self._pace(t, slot, tier, end, comp, transfer)
            return
        self.assignments += 1
        job = sched.jobs[a.job_id]
        resp = noise + self._workload[job.idx] * comp + transfer
        finish = t + resp
        lr = self.live[a.job_id]
        lr.record.assigned += 1
        if finish <= end + WINDOW_SLACK_S:
            lr.add([finish], [tier], [resp])
            self._offer_close(lr, job.spec.results_needed)
        else:
            lr.record.failures += 1

    def _pace(
        self, t: float, slot: int, tier: int, end: float, comp: float, transfer: float
    ) -> None:
        """The device's next check-in, as the pace answers it, if its window lasts."""
        pace = self.config.pace
        assert pace is not None
        want = Want.WAITED if self._wanted(slot) else Want.UNWANTED
        at = t + pace.retry_after(want, self._rng.random())
        if at < end:
            weight = pace.weight(want) if self.config.pace_weights else 1.0
            entry = (at, next(self._seq), slot, tier, end, comp, transfer, weight)
            heapq.heappush(self._retries, entry)

    def _wanted(self, slot: int) -> bool:
        """Whether an open round with demand left admits the slot (the gateway's
        ``DemandView.may_assign``), as of the scheduler's last table."""
        sched = self.sched
        if self._wanted_of != sched.compiles:
            self._wanted_of = sched.compiles
            groups = np.zeros(sched.index.num_groups, dtype=bool)
            for js in sched.by_idx:
                if js.wants_devices:
                    groups[js.group] = True
            self._wanted_slots = np.asarray(sched.index.matrix[:, groups].any(axis=1))
        return bool(self._wanted_slots[slot])

    def _run_fast(self, p: _Prepared) -> None:
        """Check-ins in steps: each step runs with one dispatch table, up to the next
        timed event, the first check-in that exhausts a job's budget, or the first round
        close its own assignments cause. A step is decided and committed by compiled
        code (``venn.sim.kernels``).
        """
        sched = self.sched
        n = len(p.batch)
        times = p.batch.time
        tl = p.time
        observed = 0
        keys = np.zeros(0, dtype=np.int64)
        keys_of: np.ndarray | None = None
        v = sched.num_tiers
        heap = self.heap
        i = 0
        while i < n:
            t = tl[i]
            if heap and heap[0][0] <= t:
                self._run_timed(t)
            self.now = t
            if self.unfinished == 0:
                break
            j = max(bisect_left(tl, heap[0][0], i), i + 1) if heap else n
            if sched.reads_supply:
                self._observe(p.slots[observed : i + 1], times[observed : i + 1], t)
                observed = i + 1
            table = sched.table(t)
            if not table.any_candidate:
                i = j
                continue
            sig_of_slot = sched.index.signature_of_slot
            if sig_of_slot is not keys_of:  # signatures change when a new group appears
                keys_of = sig_of_slot
                keys = sig_of_slot[p.slots].astype(np.int64) * v + p.tiers
            stop = self._step(table, keys, p, i, j)
            i = j if stop is None else i + stop
        if observed < n:
            self._observe(p.slots[observed:], times[observed:], None)

    def _observe(self, slots: np.ndarray, times: np.ndarray, now: float | None) -> None:
        """Supply seen up to ``now`` (None: only count it): the check-ins themselves, or the
        reports due by then."""
        if self._feed is None:
            self.sched.observe_many(slots, times)
            return
        self._feed.add(slots, times)
        if now is not None:
            self._feed.deliver(now)

    def _step(
        self, table: DispatchTable, keys: np.ndarray, p: _Prepared, i: int, j: int
    ) -> int | None:
        """Decide check-ins i.. (before j) with ``table`` until one exhausts its job's
        budget, and commit them: the number of check-ins used, or None if no check-in
        before j can be assigned."""
        job_buf, pos_buf = p.scratch()
        tail = self._kernel_tail(p)
        candidates = table.candidates
        if table.uniform:
            stop, jobs = step_uniform(
                keys,
                candidates.reshape(-1, candidates.shape[2]),
                table.counts.reshape(-1),
                p.batch.u,
                table.budget,
                i,
                j,
                job_buf,
                pos_buf,
                *tail,
            )
        else:
            if p.heads_of is not candidates:  # tables with the same heads share them
                p.heads_of = candidates
                p.heads = candidates[:, :, 0].reshape(-1)
            stop, jobs = step_first(keys, p.heads, table.budget, i, j, job_buf, pos_buf, *tail)
        if stop == 0:
            return None
        return self._account(p, stop, jobs)

    def _kernel_tail(self, p: _Prepared) -> tuple[object, ...]:
        """The arguments every compiled call on batch ``p`` ends with (``commit``'s from
        ``time`` on), made again when the round store grows."""
        store = self._store
        if p.tail_of is not store.finish:
            p.tail_of = store.finish
            out, kth, grouped = p.outputs(len(self._needed_a))
            p.tail = (
                *p.columns,
                WINDOW_SLACK_S,
                self._workload_a,
                self._needed_a,
                *store.columns,
                out,
                kth,
                grouped,
            )
        return p.tail

    def _commit_step(
        self, p: _Prepared, positions: dict[int, list[int]], i: int, j: int, stop: int
    ) -> int:
        """Run the tasks of a step decided in Python (each picked job's check-in
        numbers, ascending) and account them, as ``_step`` does; returns the number of
        check-ins the step used (fewer than ``stop`` if a round it fills closes before
        its last check-in: the rest belong to the next table)."""
        job_buf, pos_buf = p.scratch()
        m = 0
        store = self._store
        for job, mine in positions.items():
            store.reserve(job, int(store.count[job]) + len(mine))
            job_buf[m : m + len(mine)] = job
            pos_buf[m : m + len(mine)] = mine
            m += len(mine)
        stop, jobs = commit(job_buf, pos_buf, m, i, j, stop, *self._kernel_tail(p))
        return self._account(p, stop, jobs)

    def _account(self, p: _Prepared, stop: int, jobs: int) -> int:
        """Account a committed step in the scheduler and the round records (``commit``'s
        outputs for ``jobs`` jobs); returns ``stop``."""
        if stop < 0:
            raise RuntimeError("a round has more results than its row holds")
        out, kth, grouped = p.outputs(len(self._needed_a))
        tl = p.time
        live_of = self._live_of
        sched = self.sched
        by_idx = sched.by_idx
        assigned = 0
        for (job, kept, failed, start), close_at in zip(
            out[:jobs].tolist(), kth[:jobs].tolist(), strict=True
        ):
            if kept == 0:
                continue
            r = by_idx[job].remaining
            fill_at = tl[int(grouped[start + r - 1])] if kept >= r else 0.0
            sched.assign_many(job, kept, fill_at)
            assigned += kept
            lr = live_of[job]
            assert lr is not None
            rr = lr.record
            rr.assigned += kept
            rr.failures += failed
            if close_at < lr.close_candidate:
                lr.close_candidate = close_at
                self._push(close_at, _CLOSE, rr.job_id, rr.attempt)
        self.assignments += assigned
        return stop


class _Prepared:
    """A batch of check-ins with what every step reads of it."""

    def __init__(
        self, batch: CheckinBatch, slots: np.ndarray, tiers: np.ndarray, transfer: np.ndarray
    ) -> None:
        self.batch = batch
        self.slots = slots
        self.tiers = tiers
        self.transfer = transfer
        self.time: list[float] = batch.time.tolist()
        self.tier_list: list[int] = tiers.tolist()
        self._u: list[float] | None = None
        # The columns a compiled step reads (``venn.sim.kernels.commit``'s order).
        self.columns = (batch.time, batch.end, batch.noise, batch.comp, transfer, tiers)
        self._scratch: tuple[np.ndarray, np.ndarray] | None = None
        self._outputs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        # Each row's first candidate, of the candidates array ``heads_of``.
        self.heads_of: np.ndarray | None = None
        self.heads = np.zeros(0, dtype=np.int64)
        self.tail: tuple[object, ...] = ()  # see ``Simulation._kernel_tail``
        self.tail_of: np.ndarray | None = None

    @property
    def u(self) -> list[float]:
        if self._u is None:
            self._u = self.batch.u.tolist()
        return self._u

    def scratch(self) -> tuple[np.ndarray, np.ndarray]:
        """A step's picked jobs and check-in numbers (room for the whole batch)."""
        if self._scratch is None:
            n = max(1, len(self.batch))
            self._scratch = (np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64))
        return self._scratch

    def outputs(self, num_jobs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``commit``'s per-job outputs and grouped check-in numbers."""
        out = self._outputs
        if out is None or out[0].shape[0] < num_jobs:
            n = max(1, len(self.batch))
            out = self._outputs = (
                np.zeros((num_jobs, 4), dtype=np.int64),
                np.zeros(num_jobs, dtype=np.float64),
                np.zeros(n, dtype=np.int64),
            )
        return out
