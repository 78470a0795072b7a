"""The trace-driven, discrete-event simulator (semantics of venn-paper.md §5).

Events: job arrival, round request, check-in, round close (at ceil(0.8*D) results or at
the deadline), horizon end. A dispatched task starts after U(0,2) s of noise, takes
``W*comp + 2*C/comm`` seconds, and fails if it ends past its device's window (+80 s).
Ties are broken deterministically: timed events at time t run before a check-in at t,
closes before requests, then by insertion order.

Two modes share the scheduling core:
- ``event``: one ``Scheduler.checkin`` call per check-in (the reference);
- ``fast``: the dispatch table is static between plan changes, so the check-ins up to
  the next plan change are decided as one numpy batch. Both give identical results for
  the same seed (a test checks it).
Check-ins are streamed chunk by chunk from the trace, never all in memory.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from venn.core.matching import TierModel
from venn.core.model import JobSpec
from venn.core.registry import POLICIES, make_scheduler
from venn.core.scheduler import Scheduler
from venn.sim.rounds import ROUND_GAP_S, WINDOW_SLACK_S, JobRecord, LiveRound, RoundRecord
from venn.traces.checkins import CheckinBatch, CheckinSource, capacity_proxy
from venn.traces.devices import DeviceProfiles

Mode = Literal["fast", "event"]

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


class Simulation:
    """One run of a set of jobs over a check-in trace under one policy."""

    def __init__(
        self,
        jobs: Sequence[JobSpec],
        source: CheckinSource,
        profiles: DeviceProfiles,
        config: SimConfig,
        tiers: TierModel | None = None,
    ) -> None:
        if config.policy not in POLICIES:
            raise ValueError(f"unknown policy {config.policy!r}")
        self.config = config
        self.source = source
        self.sched: Scheduler = make_scheduler(
            config.policy,
            seed=config.seed,
            tiers=tiers,
            num_tiers=config.num_tiers,
            fairness_eps=config.fairness_eps,
            supply_window=config.supply_window,
            track_devices=False,
        )
        # Profile i is slot i: the trace's profile column indexes slots directly.
        self.sched.index.add_profiles(profiles.attrs)
        self.records = {j.job_id: JobRecord(j) for j in jobs}
        self.live: dict[str, LiveRound] = {}
        self.heap: list[tuple[float, int, int, str, int]] = []
        self._seq = itertools.count()
        self.checkins = 0
        self.assignments = 0
        self.unfinished = len(self.records)
        self.now = 0.0
        for job in sorted(jobs, key=lambda j: (j.arrival, j.job_id)):
            self._push(job.arrival, _ARRIVAL, job.job_id, 0)
        # Per job idx (registration order) arrays the batch path indexes into.
        self._workload = np.zeros(0)

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
                self._workload = np.append(self._workload, spec.workload_s)
                self._request(job_id, t)
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
        self.live[job_id] = LiveRound(rr)
        self.sched.request_round(job_id, attempt, t)
        self._push(rr.deadline_at, _DEADLINE, job_id, attempt)

    def _maybe_close(self, job_id: str, attempt: int, t: float, kind: int) -> None:
        lr = self.live.get(job_id)
        if lr is None or lr.record.attempt != attempt:
            return
        if kind == _CLOSE and lr.close_candidate != t:
            return  # superseded by an earlier candidate
        succeeded = kind == _CLOSE
        rr = lr.record
        tiers, resp, late = lr.arrived_by(t)
        rr.results = len(resp)
        rr.stragglers = late
        js = self.sched.jobs[job_id]
        rr.filled_at = js.filled_at
        rr.closed_at = t
        rr.succeeded = succeeded
        self.sched.close_round(job_id, attempt, t, succeeded, tiers, resp)
        del self.live[job_id]
        rec = self.records[job_id]
        if succeeded:
            rec.succeeded_rounds += 1
        if rec.succeeded_rounds >= rec.spec.rounds:
            rec.finished_at = t
            self.sched.remove_job(job_id)
            self.unfinished -= 1
        else:
            self._push(t + ROUND_GAP_S, _REQUEST, job_id, 0)

    def _offer_close(self, lr: LiveRound) -> None:
        c = lr.kth_finish(self.records[lr.record.job_id].spec.results_needed)
        if c < lr.close_candidate:
            lr.close_candidate = c
            self._push(c, _CLOSE, lr.record.job_id, lr.record.attempt)

    # -- the run ---------------------------------------------------------------------
    def run(self) -> SimRun:
        """Run until every job finished or the trace/horizon ends."""
        horizon = self.config.horizon_s
        offset = 0
        for batch in self.source.chunks(0.0, horizon):
            if self.unfinished == 0:
                break
            prepared = self._prepare(batch, offset)
            if self.config.mode == "event":
                self._run_event(prepared)
            else:
                self._run_fast(prepared)
            offset += len(batch)
            self.checkins += len(batch)
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
        )

    def _prepare(self, b: CheckinBatch, offset: int) -> _Prepared:
        tiers = (
            self.sched.tiers.tiers_of(capacity_proxy(b.comp, b.comm))
            if self.sched.tiers
            else np.zeros(len(b), dtype=np.int64)
        )
        transfer = 2.0 * self.config.transfer_s / b.comm
        seq = offset + np.arange(len(b), dtype=np.int64)
        return _Prepared(b, b.profile.astype(np.int64), tiers, transfer, seq)

    def _task(self, p: _Prepared, rows: np.ndarray, jobs: np.ndarray) -> tuple[np.ndarray, ...]:
        """(response time, finish time, succeeded) of tasks dispatched at ``rows``."""
        b = p.batch
        resp = b.noise[rows] + self._workload[jobs] * b.comp[rows] + p.transfer[rows]
        finish = b.time[rows] + resp
        ok = finish <= b.end[rows] + WINDOW_SLACK_S
        return resp, finish, ok

    def _run_event(self, p: _Prepared) -> None:
        b = p.batch
        sched = self.sched
        for i in range(len(b)):
            t = float(b.time[i])
            self._run_timed(t)
            self.now = t
            a = sched.checkin(int(p.slots[i]), t, int(p.tiers[i]), float(b.u[i]))
            if a is None:
                continue
            self.assignments += 1
            job = sched.jobs[a.job_id]
            rows = np.array([i])
            resp, finish, ok = self._task(p, rows, np.array([job.idx]))
            lr = self.live[a.job_id]
            lr.record.assigned += 1
            if ok[0]:
                lr.add(finish, p.tiers[rows], resp, p.seq[rows])
                self._offer_close(lr)
            else:
                lr.record.failures += 1

    def _run_fast(self, p: _Prepared) -> None:
        b = p.batch
        sched = self.sched
        n = len(b)
        times = b.time
        observed = 0
        i = 0
        while i < n:
            self._run_timed(float(times[i]))
            self.now = float(times[i])
            if self.unfinished == 0:
                break
            t_next = self.heap[0][0] if self.heap else np.inf
            j = int(np.searchsorted(times, t_next, side="left"))
            j = max(j, i + 1)
            if sched.dirty:
                sched.observe_many(p.slots[observed : i + 1], times[observed : i + 1])
                observed = i + 1
            table = sched.table(float(times[i]))
            sigs = sched.index.signature_of_slot[p.slots[i:j]]
            picks = table.pick_many(sigs, p.tiers[i:j], b.u[i:j])
            valid = np.flatnonzero(picks >= 0)
            if len(valid) == 0:
                i = j
                continue
            stop = self._budget_stop(picks, valid, table.budget)
            used = valid[valid < stop]
            rows = used + i
            jobs = picks[used]
            resp, finish, ok = self._task(p, rows, jobs)
            # A round this batch closes changes the plan: the check-ins from the close on
            # belong to the next batch (a timed event at t runs before a check-in at t).
            cut = self._first_close(jobs, finish, ok)
            if cut <= times[i + stop - 1]:
                keep = times[rows] < cut
                rows, jobs = rows[keep], jobs[keep]
                resp, finish, ok = resp[keep], finish[keep], ok[keep]
                stop = int(np.searchsorted(times[i:j], cut, side="left"))
            self._commit(p, rows, jobs, resp, finish, ok)
            i += stop
        if observed < n:
            sched.observe_many(p.slots[observed:], times[observed:])

    @staticmethod
    def _budget_stop(picks: np.ndarray, valid: np.ndarray, budget: np.ndarray) -> int:
        """Relative index just past the check-in that exhausts some job's budget."""
        jobs = picks[valid]
        order = np.argsort(jobs, kind="stable")
        sorted_jobs = jobs[order]
        change = np.empty(len(sorted_jobs), dtype=bool)
        change[0] = True
        np.not_equal(sorted_jobs[1:], sorted_jobs[:-1], out=change[1:])
        starts = np.flatnonzero(change)
        group_start = np.repeat(starts, np.diff(np.append(starts, len(sorted_jobs))))
        rank = np.arange(len(sorted_jobs)) - group_start + 1
        hit = rank >= budget[sorted_jobs]
        if not hit.any():
            return int(valid[-1]) + 1
        return int(valid[order[hit]].min()) + 1

    def _first_close(self, jobs: np.ndarray, finish: np.ndarray, ok: np.ndarray) -> float:
        """Earliest round close these assignments would cause (inf if none)."""
        cut = np.inf
        for idx in np.unique(jobs):
            job_id = self.sched.by_idx[int(idx)].spec.job_id
            lr = self.live[job_id]
            mine = (jobs == idx) & ok
            k = self.records[job_id].spec.results_needed
            if lr.count + int(mine.sum()) < k:
                continue
            pool = np.concatenate([*lr.finish, finish[mine]])
            cut = min(cut, float(np.partition(pool, k - 1)[k - 1]))
        return cut

    def _commit(
        self,
        p: _Prepared,
        rows: np.ndarray,
        jobs: np.ndarray,
        resp: np.ndarray,
        finish: np.ndarray,
        ok: np.ndarray,
    ) -> None:
        self.assignments += len(rows)
        times = p.batch.time
        for idx in np.unique(jobs):
            mine = np.flatnonzero(jobs == idx)
            js = self.sched.by_idx[int(idx)]
            count = len(mine)
            fill_at = float(times[rows[mine[js.remaining - 1]]]) if count >= js.remaining else 0.0
            self.sched.assign_many(int(idx), count, fill_at)
            lr = self.live[js.spec.job_id]
            lr.record.assigned += count
            good = mine[ok[mine]]
            lr.record.failures += count - len(good)
            if len(good):
                lr.add(finish[good], p.tiers[rows[good]], resp[good], p.seq[rows[good]])
                self._offer_close(lr)


@dataclass(frozen=True)
class _Prepared:
    batch: CheckinBatch
    slots: np.ndarray
    tiers: np.ndarray
    transfer: np.ndarray
    seq: np.ndarray
