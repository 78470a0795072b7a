"""A lower bound on the average JCT that any policy can reach on a given trace.

"Any policy" includes one that knows the whole future: which device checks in when,
how fast it is, when its window ends. The bound is the optimum of a *relaxation* of the
simulator's problem (``venn.sim.engine``): every constraint below is one that every
schedule of the simulator satisfies, and everything the simulator demands on top is
dropped. So no schedule, whatever policy made it, has a lower (censored) average JCT.

What a schedule must do (the simulator's rules)
-----------------------------------------------
A job of class c (its requirement and task workload W) arrives at a_j and runs R_j
rounds one after the other. A round is requested at the job's arrival or 0.1 s after its
previous round closed; it may take check-ins at or after its request, at most D_j of
them, one job per check-in; a task started at a check-in at t returns its result at
``t + noise + W*comp + 2*C/comm`` and fails if that is past its window's end + 80 s. The
round succeeds, and closes, when ``k_j = ceil(0.8*D_j)`` results have arrived (before
its deadline; otherwise it fails at the deadline and is requested again). The job
completes when its R_j-th round succeeds. Call a check-in *useful* to class c if the
device is eligible for c's requirement and a task of workload W would succeed on it.

The relaxation
--------------
1. **Units.** Of each successful round keep the k_j results that closed it: a finished
   job has received ``n_j = R_j * k_j`` units, each a distinct check-in that is useful
   to its class, at or after a_j. Failed rounds, the D_j - k_j extra devices and the
   stragglers are dropped (they cost a real schedule supply; the bound gives them free).
2. **Capacity.** Time is cut into slots (a uniform grid plus every job's arrival). In
   a slot, the units of all jobs together fit the slot's useful check-ins: a
   transportation problem from check-ins (grouped by the set of classes they are useful
   to) to classes, kept exactly as flow variables. Which check-in inside the slot, and
   the one-task-at-a-time rule of a device, are dropped.
3. **Completion, alone.** ``C_j >= E_j``, the earliest completion of job j with the whole
   trace to itself: each round, requested at q, closes at the earliest at the k_j-th
   smallest result time among the check-ins useful to j at or after q, and the next
   is requested 0.1 s later. Deadlines are dropped (a round that a deadline fails only
   starts its successor later; the greedy recursion is monotone in q, so taking every
   round at its earliest is optimal), and so is the D_j cap (k_j <= D_j).
4. **Completion, shared (time-indexed LP).** z_jk is "job j's last unit is in slot k"
   (or after the horizon), relaxed to [0, 1]: units received by the end of slot k are at
   least ``n_j * P(last unit in a slot <= k)``, and units received in slot k are at most
   the class's useful check-ins there times ``P(last unit in a slot >= k)`` (a job
   takes nothing after its last unit). If the last unit is in slot k then
   ``C_j >= max(E_j, f_ck)``, f_ck the earliest result time of a check-in of slot k
   useful to c (the last unit's result arrives by the close).
5. **Censoring.** The objective is the censored JCT ``min(C_j, H) - a_j`` the report
   ranks policies by (``venn.sim.metrics``): a last unit after H, or none, costs
   ``H - a_j``, so only the trace up to H is needed.

**Any slot length.** Nothing above needs a particular grid: every inequality of items
2-5 holds for any cut of time into slots that has every arrival as a boundary (which
``_grid`` ensures, so a slot lies wholly before or wholly after each arrival). Item 2
counts a schedule's units in [b_k, b_k+1) against the check-ins there; item 3's
``U_j(tau)`` holds at every tau, the slot ends included; item 4's f_ck is the earliest
result of *any* useful check-in of the slot, which the last unit's cannot precede however
wide the slot is. So an integral schedule maps to a feasible point of the LP for every
slot length, and the LP optimum bounds it from below. A coarser slot only loosens the
bound (f_ck earlier, capacity pooled over longer spans) and shrinks the LP (variables
~ 3 x jobs x slots); the full-scale report uses a coarser slot than the 1 h default.

The LP optimum (HiGHS, through ``scipy.optimize.milp`` without integrality) is then
at most the censored JCT sum of every schedule. Two things make it weaker than the
optimum: fractional z (the time-indexed relaxation's gap, which rules 4's second
inequality narrows) and items 1-3. ``tests/pure/test_bound.py`` compares it with the
brute-force optimum of small instances under the full rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from venn.core.model import JobSpec, Requirement
from venn.sim.rounds import ROUND_GAP_S, WINDOW_SLACK_S
from venn.traces.checkins import CheckinSource
from venn.traces.devices import DeviceProfiles

MAX_CLASSES = 60  # class masks are int64 bit sets


@dataclass(frozen=True)
class BoundJob:
    """What the bound needs of one job."""

    job_id: str
    arrival: float
    rounds: int
    results_needed: int  # k_j: results that make a round succeed
    klass: int  # index of its (requirement, workload) class

    @property
    def units(self) -> int:
        """n_j: results that a finished job has received, counting k_j per round."""
        return self.rounds * self.results_needed


@dataclass(frozen=True)
class Supply:
    """The trace's check-ins (ascending ``time``) as the bound sees them.

    ``useful`` is a bit set per check-in: bit c when the device is eligible for class c
    and a task of class c's workload would succeed on it; ``finish[:, w]`` is when that
    task's result would arrive, for workload index ``w = workload_of[c]``.
    """

    time: np.ndarray  # float64 [n], ascending
    useful: np.ndarray  # int64 [n], bit set over classes
    finish: np.ndarray  # float64 [n, distinct workloads]
    workload_of: tuple[int, ...]  # class -> column of ``finish``

    @property
    def num_classes(self) -> int:
        return len(self.workload_of)

    def of_class(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        """(time, result time) of the check-ins useful to class ``c``, in time order."""
        rows = np.flatnonzero(self.useful & (1 << c))
        return self.time[rows], self.finish[rows, self.workload_of[c]]


@dataclass(frozen=True)
class BoundResult:
    """The bound on one instance (sums and means over all jobs; seconds)."""

    jobs: int
    horizon_s: float
    slot_s: float
    slots: int
    lp_total_s: float  # lower bound on the sum of censored JCTs (the LP optimum)
    alone_total_s: float  # sum of min(E_j, H) - a_j: the bound without contention
    earliest_s: tuple[float, ...]  # E_j per job (inf: not within the trace)
    status: str

    @property
    def lp_mean_s(self) -> float:
        return self.lp_total_s / self.jobs if self.jobs else 0.0

    @property
    def alone_mean_s(self) -> float:
        return self.alone_total_s / self.jobs if self.jobs else 0.0


def earliest_rounds(
    job: BoundJob, time: np.ndarray, finish: np.ndarray, gap_s: float = ROUND_GAP_S
) -> tuple[np.ndarray, float]:
    """The job alone with every useful check-in to itself, each round as early as it can
    be: (request time of each round reached, completion E_j or inf).

    ``time`` (ascending) and ``finish`` (> time) are the check-ins useful to the job's
    class. The round requested at q closes at the k-th smallest result time among
    check-ins at or after q, and the next is requested ``gap_s`` later. Closing a round
    later never lets a later round close earlier (fewer check-ins remain), so in every
    schedule round r is requested no earlier than here, and the job completes no
    earlier than E_j. Returns E_j = inf if the check-ins run out first.
    """
    k = job.results_needed
    n = len(time)
    q = job.arrival
    requests = []
    close = q
    for _ in range(job.rounds):
        requests.append(q)
        lo = int(np.searchsorted(time, q, side="left"))
        if n - lo < k:
            return np.array(requests), math.inf
        hi = lo + k
        while True:
            kth = float(np.partition(finish[lo:hi], k - 1)[k - 1])
            # Check-ins after ``kth`` return later than it: the window is complete.
            reach = int(np.searchsorted(time, kth, side="right"))
            if reach <= hi:
                break
            hi = reach
        close = kth
        q = close + gap_s
    return np.array(requests), close


def units_before(
    job: BoundJob, requests: np.ndarray, time: np.ndarray, ends: np.ndarray
) -> np.ndarray:
    """U_j(tau) for each tau in ``ends``: at most this many of the job's units (k_j per
    round) can come from check-ins before tau, in any schedule.

    With m rounds requested before tau in ``earliest_rounds`` (``requests``), a schedule
    has requested at most m rounds before tau, each no earlier; the units of its rounds
    before the last are at most k_j each, and those of the last come from check-ins at
    or after its request, so from at most the useful check-ins in [q_m, tau).
    """
    k = job.results_needed
    m = np.searchsorted(requests, ends, side="left")  # requests before tau
    last = requests[np.maximum(m - 1, 0)]
    available = np.searchsorted(time, ends, side="left") - np.searchsorted(time, last, "left")
    return np.where(m > 0, (m - 1) * k + np.minimum(k, np.maximum(available, 0)), 0)


def supply_from_source(
    source: CheckinSource,
    classes: Sequence[tuple[Requirement, float]],
    profiles: DeviceProfiles,
    horizon_s: float,
    transfer_s: float = 10.0,
) -> Supply:
    """The check-ins of ``source`` before ``horizon_s``, with their usefulness to each
    (requirement, workload) class, computed as the simulator computes task outcomes."""
    if len(classes) > MAX_CLASSES:
        raise ValueError(f"at most {MAX_CLASSES} classes")
    workloads = sorted({w for _, w in classes})
    workload_of = tuple(workloads.index(w) for _, w in classes)
    admitted = [profiles.admitted(req) for req, _ in classes]
    times, useful, finish = [], [], []
    for b in source.chunks(0.0, horizon_s):
        transfer = 2.0 * transfer_s / b.comm
        ends = [b.time + b.noise + w * b.comp + transfer for w in workloads]
        mask = np.zeros(len(b), dtype=np.int64)
        for c, (_, w) in enumerate(classes):
            fin = ends[workloads.index(w)]
            ok = admitted[c][b.profile] & (fin <= b.end + WINDOW_SLACK_S)
            mask |= ok.astype(np.int64) << c
        times.append(b.time)
        useful.append(mask)
        finish.append(np.stack(ends, axis=1))
    if not times:
        return Supply(
            np.empty(0), np.empty(0, np.int64), np.empty((0, len(workloads))), workload_of
        )
    return Supply(
        np.concatenate(times), np.concatenate(useful), np.concatenate(finish), workload_of
    )


def bound_jobs(specs: Sequence[JobSpec]) -> tuple[list[BoundJob], list[tuple[Requirement, float]]]:
    """The jobs as the bound sees them, and their classes (first-seen order)."""
    classes: list[tuple[Requirement, float]] = []
    jobs = []
    for s in specs:
        key = (s.requirement, s.workload_s)
        if key not in classes:
            classes.append(key)
        jobs.append(BoundJob(s.job_id, s.arrival, s.rounds, s.results_needed, classes.index(key)))
    return jobs, classes


def _grid(jobs: Sequence[BoundJob], horizon_s: float, slot_s: float) -> np.ndarray:
    """Slot boundaries: a uniform grid from the first arrival, every arrival, and H."""
    start = min(j.arrival for j in jobs)
    uniform = np.arange(start, horizon_s, slot_s)
    arrivals = [j.arrival for j in jobs if j.arrival < horizon_s]
    return np.unique(np.concatenate([uniform, arrivals, [horizon_s]]))


class _Layout:
    """Column indices of the LP's variables."""

    def __init__(self, num_jobs: int, num_slots: int, num_flows: int) -> None:
        jk = num_jobs * num_slots
        self.jobs, self.slots = num_jobs, num_slots
        self.w = 0  # w[j, k]: units of job j in slot k
        self.cum = jk  # W[j, k]: units of job j in slots <= k
        self.r = 2 * jk  # R[j, k], k <= K: P(last unit in slot >= k); R[j, K]: after H
        self.flow = 2 * jk + num_jobs * (num_slots + 1)
        self.size = self.flow + num_flows

    def wi(self, j: np.ndarray, k: np.ndarray) -> np.ndarray:
        return self.w + j * self.slots + k

    def ci(self, j: np.ndarray, k: np.ndarray) -> np.ndarray:
        return self.cum + j * self.slots + k

    def ri(self, j: np.ndarray, k: np.ndarray) -> np.ndarray:
        return self.r + j * (self.slots + 1) + k


class _Rows:
    """Sparse constraint rows ``lo <= A x <= hi`` built up block by block."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.vals: list[np.ndarray] = []
        self.lo: list[np.ndarray] = []
        self.hi: list[np.ndarray] = []
        self.count = 0

    def add(
        self,
        terms: Sequence[tuple[np.ndarray, np.ndarray | float]],
        lo: np.ndarray | float,
        hi: np.ndarray | float,
        n: int,
    ) -> None:
        """n rows; each term gives every row one (column, coefficient)."""
        row = self.count + np.arange(n)
        for cols, vals in terms:
            self.rows.append(row)
            self.cols.append(np.asarray(cols, dtype=np.int64))
            self.vals.append(np.broadcast_to(np.asarray(vals, dtype=np.float64), (n,)))
        self.lo.append(np.broadcast_to(np.asarray(lo, dtype=np.float64), (n,)))
        self.hi.append(np.broadcast_to(np.asarray(hi, dtype=np.float64), (n,)))
        self.count += n

    def add_sparse(
        self, row: np.ndarray, col: np.ndarray, val: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> None:
        """Rows given as coordinates (``row`` counts from 0 within the block)."""
        self.rows.append(self.count + row)
        self.cols.append(col)
        self.vals.append(val)
        self.lo.append(lo)
        self.hi.append(hi)
        self.count += len(lo)

    def constraint(self, size: int) -> LinearConstraint:
        a = sparse.csr_array(
            (np.concatenate(self.vals), (np.concatenate(self.rows), np.concatenate(self.cols))),
            shape=(self.count, size),
        )
        return LinearConstraint(a, np.concatenate(self.lo), np.concatenate(self.hi))


def lp_bound(
    jobs: Sequence[BoundJob], supply: Supply, horizon_s: float, slot_s: float = 3600.0
) -> BoundResult:
    """The lower bound on the sum (and mean) of censored JCTs ``min(C_j, H) - a_j`` of
    every schedule of ``jobs`` on ``supply`` (the module docstring gives the model)."""
    if not slot_s > 0:
        raise ValueError(f"slot_s must be positive, not {slot_s}")
    if not jobs:
        return BoundResult(0, horizon_s, slot_s, 0, 0.0, 0.0, (), "no jobs")
    num_classes = supply.num_classes
    per_class = [supply.of_class(c) for c in range(num_classes)]
    alone = [earliest_rounds(j, *per_class[j.klass]) for j in jobs]
    earliest = [e for _, e in alone]
    arrival = np.array([j.arrival for j in jobs])
    alone_total = float((np.minimum(np.array(earliest), horizon_s) - arrival).sum())

    bounds = _grid(jobs, horizon_s, slot_s)
    num_slots = len(bounds) - 1
    num_jobs = len(jobs)
    # Check-ins per slot, grouped by the set of classes they are useful to.
    inside = (supply.time >= bounds[0]) & (supply.time < horizon_s)
    slot = np.searchsorted(bounds, supply.time[inside], side="right") - 1
    masks, mask_of = np.unique(supply.useful[inside], return_inverse=True)
    count = np.zeros((num_slots, len(masks)))
    np.add.at(count, (slot, mask_of), 1.0)
    member = ((masks[:, None] >> np.arange(num_classes)[None, :]) & 1).astype(bool)  # [M, C]
    useful_count = count @ member  # [K, C]: check-ins of slot k useful to class c
    # Earliest result time of a check-in of slot k useful to class c.
    first_result = np.full((num_slots, num_classes), np.inf)
    for c in range(num_classes):
        t, f = per_class[c]
        keep = (t >= bounds[0]) & (t < horizon_s)
        np.minimum.at(first_result[:, c], np.searchsorted(bounds, t[keep], "right") - 1, f[keep])

    # Flows: one per (slot, mask present in it, class in the mask).
    pk, pm = np.nonzero(count)
    pair, fc = np.nonzero(member[pm])
    fk = pk[pair]
    lay = _Layout(num_jobs, num_slots, len(fk))

    # Every (job, slot) pair, job-major: job j's slots are rows j*K .. j*K + K - 1.
    jj = np.repeat(np.arange(num_jobs), num_slots)
    kk = np.tile(np.arange(num_slots), num_jobs)
    klass = np.array([j.klass for j in jobs])
    units = np.array([j.units for j in jobs], dtype=np.float64)
    cap = useful_count[kk, klass[jj]]
    open_ = bounds[kk] >= arrival[jj]  # slot k starts at or after the arrival

    lb = np.zeros(lay.size)
    ub = np.full(lay.size, np.inf)
    ub[lay.wi(jj, kk)] = np.where(open_, cap, 0.0)
    r_first = lay.ri(np.arange(num_jobs), np.zeros(num_jobs, dtype=np.int64))
    lb[r_first] = ub[r_first] = 1.0  # the last unit is somewhere
    ub[lay.r : lay.flow] = np.minimum(ub[lay.r : lay.flow], 1.0)
    fixed_one = lay.ri(jj, kk)[~open_]  # slots before arrival: the last unit is later
    lb[fixed_one] = 1.0
    # Round by round, no schedule has more units before the end of slot k than U_j.
    reach = np.concatenate(
        [
            units_before(j, q, per_class[j.klass][0], bounds[1:])
            for j, (q, _) in zip(jobs, alone, strict=True)
        ]
    ).astype(np.float64)
    ub[lay.ci(jj, kk)] = reach

    rows = _Rows()
    n = len(jj)
    row = np.arange(n)
    has_prev = kk > 0
    # W[j,k] - W[j,k-1] - w[j,k] = 0
    rows.add_sparse(
        np.concatenate([row, row, row[has_prev]]),
        np.concatenate([lay.ci(jj, kk), lay.wi(jj, kk), lay.ci(jj[has_prev], kk[has_prev] - 1)]),
        np.concatenate([np.ones(n), -np.ones(n), -np.ones(int(has_prev.sum()))]),
        np.zeros(n),
        np.zeros(n),
    )
    # z[j,k] = R[j,k] - R[j,k+1] >= 0, and = 0 where slot k cannot hold the last unit
    # (no useful check-in there, or before the arrival).
    possible = open_ & np.isfinite(first_result[kk, klass[jj]]) & (reach >= units[jj])
    rows.add(
        [(lay.ri(jj, kk), 1.0), (lay.ri(jj, kk + 1), -1.0)],
        0.0,
        np.where(possible, np.inf, 0.0),
        n,
    )
    # Units by the end of slot k >= n_j * P(last unit in a slot <= k).
    rows.add([(lay.ci(jj, kk), 1.0), (lay.ri(jj, kk + 1), units[jj])], units[jj], np.inf, n)
    # Units in slot k <= useful check-ins * P(last unit in a slot >= k).
    rows.add([(lay.wi(jj, kk), 1.0), (lay.ri(jj, kk), -cap)], -np.inf, 0.0, n)
    # Capacity: the check-ins of one (slot, mask) flow to at most one class each ...
    flows = lay.flow + np.arange(len(fk))
    rows.add_sparse(pair, flows, np.ones(len(fk)), np.full(len(pk), -np.inf), count[pk, pm])
    # ... and a class's jobs take in slot k at most what flows to the class.
    demand_row = kk * num_classes + klass[jj]
    flow_row = fk * num_classes + fc
    rows.add_sparse(
        np.concatenate([demand_row, flow_row]),
        np.concatenate([lay.wi(jj, kk), flows]),
        np.concatenate([np.ones(n), -np.ones(len(fk))]),
        np.full(num_slots * num_classes, -np.inf),
        np.zeros(num_slots * num_classes),
    )

    # Objective: sum_k cost[j,k] * (R[j,k] - R[j,k+1]) + (H - a_j) * R[j,K].
    e = np.array(earliest)
    cost = np.minimum(np.maximum(e[jj], first_result[kk, klass[jj]]), horizon_s) - arrival[jj]
    cost = np.where(possible, cost, 0.0).reshape(num_jobs, num_slots)
    after = (horizon_s - arrival)[:, None]
    full = np.concatenate([cost, after], axis=1)  # [J, K + 1]
    coef = full - np.concatenate([np.zeros((num_jobs, 1)), full[:, :-1]], axis=1)
    objective = np.zeros(lay.size)
    objective[lay.r : lay.flow] = coef.ravel()
    res = milp(
        objective,
        constraints=rows.constraint(lay.size),
        bounds=Bounds(lb, ub),
        options={"presolve": True},
    )
    if res.status != 0 or res.fun is None:
        raise RuntimeError(f"bound LP not solved: {res.message}")
    return BoundResult(
        num_jobs,
        horizon_s,
        slot_s,
        num_slots,
        float(res.fun),
        alone_total,
        tuple(earliest),
        str(res.message),
    )
