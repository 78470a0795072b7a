"""The trace-driven, discrete-event simulator (semantics of venn-paper.md §5).

Events: job arrival, round request, check-in, round close (at ceil(0.8*D) results or at
the deadline), horizon end. A dispatched task starts after U(0,2) s of noise, takes
``W*comp + 2*C/comm`` seconds, and fails if it ends past its device's window (+80 s).
Ties are broken deterministically: timed events at time t run before a check-in at t,
closes before requests, then by insertion order.

Two modes share the scheduling core:
- ``event``: one ``Scheduler.checkin`` call per check-in (the reference);
- ``fast``: the dispatch table is static between plan changes, so the check-ins up to
  the next plan change are decided as one step against it, and the step's assignments
  are committed per job (task times come from columns computed once per chunk). Both
  give identical results for the same seed (a test checks it for every policy).
Check-ins are streamed chunk by chunk from the trace, never all in memory.
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress
from typing import Literal

import numpy as np

from venn.core.dispatch import DispatchTable
from venn.core.matching import TierModel
from venn.core.model import JobSpec
from venn.core.registry import POLICIES, make_scheduler
from venn.core.scheduler import Scheduler
from venn.sim.rounds import (
    ROUND_GAP_S,
    WINDOW_SLACK_S,
    JobRecord,
    LiveRound,
    RoundRecord,
    kth_of_union,
)
from venn.traces.checkins import CheckinBatch, CheckinSource, capacity_proxy
from venn.traces.devices import DeviceProfiles

Mode = Literal["fast", "event"]

_CLOSE, _DEADLINE, _ARRIVAL, _REQUEST, _MESSAGE = 0, 1, 2, 3, 4


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
    # Emulated check-in partitions sharing rounds by leases (venn.sim.partitioned);
    # 1 is the single-worker path. Lease messages arrive ``lease_delay_s`` after sending.
    partitions: int = 1
    lease_delay_s: float = 0.5


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
        # By job idx (registration order): the open round, and the results it needs.
        self._live_of: list[LiveRound | None] = []
        self._needed: list[int] = []
        self._detail = self.sched.tails is not None  # matching learns from the results
        self.heap: list[tuple[float, int, int, str, int]] = []
        self._seq = itertools.count()
        self.checkins = 0
        self.assignments = 0
        self.unfinished = len(self.records)
        self.now = 0.0
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
                self._workload.append(spec.workload_s)
                self._live_of.append(None)
                self._needed.append(spec.results_needed)
                self._request(job_id, t)
            elif kind == _REQUEST:
                self._request(job_id, t)
            elif kind == _MESSAGE:
                self._deliver(attempt, t)
            else:
                self._maybe_close(job_id, attempt, t, kind)

    def _request(self, job_id: str, t: float) -> None:
        rec = self.records[job_id]
        attempt = len(rec.rounds)
        spec = rec.spec
        rr = RoundRecord(job_id, attempt, t, spec.demand, t + spec.deadline)
        rec.rounds.append(rr)
        lr = self.live[job_id] = LiveRound(rr, self._detail)
        self.sched.request_round(job_id, attempt, t)
        self._live_of[self.sched.jobs[job_id].idx] = lr
        self._push(rr.deadline_at, _DEADLINE, job_id, attempt)
        self._round_opened(job_id, attempt, spec.demand, t)

    # Hooks for a subclass that shares rounds between partitions (no-ops here).
    def _round_opened(self, job_id: str, attempt: int, demand: int, t: float) -> None:
        pass

    def _round_closed(self, job_id: str, attempt: int) -> None:
        pass

    def _deliver(self, message: int, t: float) -> None:
        raise NotImplementedError("no messages in a single-partition run")

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
        js = self.sched.jobs[job_id]
        rr.filled_at = js.filled_at
        rr.closed_at = t
        rr.succeeded = succeeded
        self.sched.close_round(job_id, attempt, t, succeeded, tiers, resp)
        self._round_closed(job_id, attempt)
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
                lr.add([float(finish[0])], [int(p.tiers[i])], [float(resp[0])])
                self._offer_close(lr, job.spec.results_needed)
            else:
                lr.record.failures += 1

    def _run_fast(self, p: _Prepared) -> None:
        """Check-ins in steps: each step runs with one dispatch table, up to the next
        timed event, the first check-in that exhausts a job's budget, or the first round
        close its own assignments cause. The check-ins of a step are decided one by one
        in plain Python (steps are short: a few dozen check-ins), and committed at once.
        """
        sched = self.sched
        n = len(p.batch)
        times = p.batch.time
        tl = p.time
        observed = 0
        keys: list[int] = []
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
                sched.observe_many(p.slots[observed : i + 1], times[observed : i + 1])
                observed = i + 1
            table = sched.table(t)
            if not table.any_candidate:
                i = j
                continue
            sig_of_slot = sched.index.signature_of_slot
            if sig_of_slot is not keys_of:  # signatures change when a new group appears
                keys_of = sig_of_slot
                keys = (sig_of_slot[p.slots] * v + p.tiers).tolist()
            picked = self._scan(table, keys, p, i, j)
            if picked is None:
                i = j
                continue
            stop, positions = picked
            stop = self._commit_step(p, positions, i, j, stop)
            i += stop
        if observed < n:
            sched.observe_many(p.slots[observed:], times[observed:])

    def _scan(
        self, table: DispatchTable, keys: list[int], p: _Prepared, i: int, j: int
    ) -> tuple[int, dict[int, list[int]]] | None:
        """Decide check-ins i.. (before j) with ``table`` until one exhausts its job's
        budget: (check-ins used, each picked job's check-in numbers), or None if no
        check-in before j can be assigned."""
        budget = table.budget
        positions: dict[int, list[int]] = {}
        limits: dict[int, int] = {}
        last = -1
        num_rows = table.num_rows
        if table.uniform:
            rows = table.rows()
            us = p.u
            for c in range(i, j):
                key = keys[c]
                if key >= num_rows:
                    continue
                row = rows[key]
                m = len(row)
                if not m:
                    continue
                job = row[min(int(us[c] * m), m - 1)]
                last = c
                mine = positions.get(job)
                if mine is None:
                    mine = positions[job] = [c]
                    limits[job] = int(budget[job])
                else:
                    mine.append(c)
                if len(mine) >= limits[job]:
                    break
        else:
            heads = table.heads()
            for c in range(i, j):
                key = keys[c]
                if key >= num_rows:
                    continue
                job = heads[key]
                if job < 0:
                    continue
                last = c
                mine = positions.get(job)
                if mine is None:
                    mine = positions[job] = [c]
                    limits[job] = int(budget[job])
                else:
                    mine.append(c)
                if len(mine) >= limits[job]:
                    break
        if last < 0:
            return None
        return last - i + 1, positions

    def _commit_step(
        self, p: _Prepared, positions: dict[int, list[int]], i: int, j: int, stop: int
    ) -> int:
        """Run the tasks of one step's assignments and account them; returns the number
        of check-ins the step used (fewer than ``stop`` if a round it fills closes
        before its last check-in: the rest belong to the next table)."""
        tl = p.time
        workload = self._workload
        live_of = self._live_of
        needed = self._needed
        done: list[tuple[int, list[int], list[float], list[bool] | None, _Tasks]] = []
        cut = np.inf
        for job in sorted(positions):
            mine = positions[job]
            tasks = p.tasks(workload[job])
            finish = list(map(tasks.finish.__getitem__, mine))
            bad = tasks.bad
            # No failure between the first and the last check-in: all succeeded.
            ok = None
            if bad[mine[-1] + 1] != bad[mine[0]]:
                ok = list(map(tasks.ok.__getitem__, mine))
            done.append((job, mine, finish, ok, tasks))
            # The earliest round close these assignments would cause.
            k = needed[job]
            lr = live_of[job]
            assert lr is not None
            if lr.count + (len(finish) if ok is None else sum(ok)) >= k:
                new = sorted(finish if ok is None else compress(finish, ok))
                cut = min(cut, kth_of_union(lr.sorted_finish(), new, k))
        if cut <= tl[i + stop - 1]:
            # A round this step closes changes the plan: the check-ins from the close on
            # belong to the next step (a timed event at t runs before a check-in at t).
            stop = bisect_left(tl, cut, i, j) - i
            limit = i + stop
        else:
            limit = j
        tiers = p.tier_list
        detail = self._detail
        sched = self.sched
        by_idx = sched.by_idx
        assigned = 0
        for job, mine, finish, ok, tasks in done:
            count = len(mine) if limit == j else bisect_left(mine, limit)
            if count == 0:
                continue
            js = by_idx[job]
            fill_at = tl[mine[js.remaining - 1]] if count >= js.remaining else 0.0
            sched.assign_many(job, count, fill_at)
            assigned += count
            lr = live_of[job]
            assert lr is not None
            lr.record.assigned += count
            if ok is None and count == len(mine):
                if detail:
                    lr.add(
                        finish,
                        list(map(tiers.__getitem__, mine)),
                        list(map(tasks.resp.__getitem__, mine)),
                    )
                else:
                    lr.add(finish)
            else:
                good = list(range(count)) if ok is None else [q for q in range(count) if ok[q]]
                lr.record.failures += count - len(good)
                if not good:
                    continue
                if detail:
                    lr.add(
                        [finish[q] for q in good],
                        [tiers[mine[q]] for q in good],
                        [tasks.resp[mine[q]] for q in good],
                    )
                else:
                    lr.add([finish[q] for q in good])
            k = needed[job]
            if len(lr.finish) >= k:  # else no close time yet (``_offer_close`` is a no-op)
                self._offer_close(lr, k)
        self.assignments += assigned
        return stop


class _Tasks:
    """Response time, finish time and success of a task of workload ``w`` dispatched at
    each check-in of a batch (the same float operations as the event mode's)."""

    __slots__ = ("bad", "finish", "ok", "resp")

    def __init__(self, p: _Prepared, w: float) -> None:
        b = p.batch
        resp = b.noise + w * b.comp + p.transfer
        finish = b.time + resp
        ok = finish <= b.end + WINDOW_SLACK_S
        self.resp: list[float] = resp.tolist()
        self.finish: list[float] = finish.tolist()
        self.ok: list[bool] = ok.tolist()
        # Failed tasks before each check-in (none in [a, b] iff bad[b + 1] == bad[a]).
        self.bad: list[int] = np.concatenate(([0], np.cumsum(~ok))).tolist()


class _Prepared:
    """A batch of check-ins with what every step reads of it as Python lists."""

    def __init__(
        self, batch: CheckinBatch, slots: np.ndarray, tiers: np.ndarray, transfer: np.ndarray
    ) -> None:
        self.batch = batch
        self.slots = slots
        self.tiers = tiers
        self.transfer = transfer
        self.time: list[float] = batch.time.tolist()
        self.tier_list: list[int] = tiers.tolist()
        self.partition: list[int] = []  # each check-in's partition (partitioned runs)
        self._u: list[float] | None = None
        self._tasks: dict[float, _Tasks] = {}

    @property
    def u(self) -> list[float]:
        if self._u is None:
            self._u = self.batch.u.tolist()
        return self._u

    def tasks(self, w: float) -> _Tasks:
        """The tasks of workload ``w`` (computed for the whole batch on first use)."""
        out = self._tasks.get(w)
        if out is None:
            out = self._tasks[w] = _Tasks(self, w)
        return out
