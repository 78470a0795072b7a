"""The mechanism that applies a policy: job and round bookkeeping, plan recomputation,
tier matching and the compiled dispatch table.

Events in (all carry ``now``; the core never reads a clock):
``add_job``, ``request_round``, ``checkin`` -> ``Assignment | None``, ``close_round``,
``remove_job``. Replayed events are ignored (each returns whether it changed state), so
an at-least-once pipeline can feed it directly.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from venn.core.dispatch import (
    NO_LIMIT,
    DispatchTable,
    empty_table,
    overtake_after_many,
    overtake_count,
)
from venn.core.eligibility import EligibilityIndex
from venn.core.fairness import Progress, demand_weight, group_queue_scale, progress_ratio
from venn.core.matching import TailTracker, TierModel, should_restrict
from venn.core.model import Assignment, JobSpec
from venn.core.policies.base import OpenJob, Policy, PolicyView
from venn.core.supply import SupplyWindow

_MASK64 = (1 << 64) - 1
# Sizes up to which the plain-Python compile beats numpy (numpy calls cost microseconds
# each, bit-set work in Python is linear in the jobs): row sections (signatures x tiers x
# sections) and open jobs for a first pick; jobs x row sections for a uniform pick.
SMALL_TABLE = 2048
SMALL_JOBS = 20_000
SMALL_UNIFORM = 4096


def _splitmix(*parts: int) -> int:
    """A tiny deterministic hash (splitmix64) for per-round random draws."""
    x = 0x9E3779B97F4A7C15
    for p in parts:
        x = (x ^ (p & _MASK64)) * 0xBF58476D1CE4E5B9 & _MASK64
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK64
        x ^= x >> 31
    return x


def _device_key(device_id: Hashable | None) -> str | int:
    """An assignment's device id: as given if a str or int, else its str (-1 if none)."""
    if device_id is None:
        return -1
    return device_id if isinstance(device_id, str | int) else str(device_id)


def _mean(values: deque[float]) -> float:
    """``float(np.mean(values))`` (the same sum and division), without its overhead."""
    return float(np.add.reduce(np.array(values, dtype=np.float64))) / len(values)


@dataclass
class JobState:
    """Everything the core tracks of one job."""

    spec: JobSpec
    idx: int
    group: int
    registered_at: float
    rounds_done: int = 0
    attempts: int = 0
    round_index: int = -1
    round_open: bool = False
    demand: int = 0
    remaining: int = 0
    requested_at: float = 0.0
    filled_at: float | None = None
    tier: int | None = None  # capacity tier the current round is restricted to
    assigned: int = 0  # devices assigned to the current round
    service: int = 0  # devices assigned over the job's life
    devices: set[Hashable] = field(default_factory=set)
    sched_delays: deque[float] = field(default_factory=lambda: deque(maxlen=10))
    response_times: deque[float] = field(default_factory=lambda: deque(maxlen=10))

    @property
    def finished(self) -> bool:
        return self.rounds_done >= self.spec.rounds


class Scheduler:
    """Applies one policy, optionally with tier matching and epsilon fairness.

    ``restrict_contested`` says when matching may restrict a round to a capacity tier.
    True is Algorithm 2 as the paper states it: whenever the job's own test passes.
    False (Venn's default) adds a condition: no other job with open demand may be
    eligible for the devices the round passes over, and a restriction lifts at the first
    plan recompute where such a job appears. A restricted round hands the slower tiers
    to its competitors while it fills more slowly; on the contended Table 1 workloads
    their loss outweighs its gain (docs/reproduction.md, "Tier matching under
    contention"), while devices nobody else wants cost nobody anything.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        tiers: TierModel | None = None,
        fairness_eps: float = 0.0,
        supply_window: int = 1000,
        seed: int = 0,
        track_devices: bool = True,
        restrict_contested: bool = False,
    ) -> None:
        self.policy = policy
        self.tiers = tiers
        self.restrict_contested = restrict_contested
        self._overlap = np.zeros((0, 0), dtype=bool)  # groups sharing a signature
        self._overlap_of: np.ndarray | None = None
        self.fairness_eps = fairness_eps
        self.seed = seed
        self.track_devices = track_devices
        self.index = EligibilityIndex()
        self.supply = SupplyWindow(supply_window)
        self.tails = TailTracker(tiers.num_tiers) if tiers else None
        self.jobs: dict[str, JobState] = {}
        self.by_idx: list[JobState] = []
        self.active_devices: dict[Hashable, tuple[str, int]] = {}
        self._table = empty_table(0)
        self._dirty = True
        self._replan = True
        self._bits_cache: _RowSections | None = None
        self.compiles = 0
        self.replans = 0
        self.restricted = 0  # rounds restricted to a tier at their request
        self.lifted = 0  # of those, restrictions lifted because a competitor appeared

    # -- jobs and rounds -------------------------------------------------------------
    @property
    def num_tiers(self) -> int:
        return self.tiers.num_tiers if self.tiers else 1

    def add_job(self, spec: JobSpec, now: float) -> bool:
        """Register a job; a replayed registration is ignored."""
        if spec.job_id in self.jobs:
            return False
        state = JobState(spec, len(self.by_idx), self.index.group(spec.requirement), now)
        self.jobs[spec.job_id] = state
        self.by_idx.append(state)
        self._mark(replan=True)
        return True

    def request_round(
        self, job_id: str, round_index: int, now: float, demand: int | None = None
    ) -> bool:
        """Open a round; ignored if the job is unknown, finished, or the round is not new."""
        js = self.jobs.get(job_id)
        if js is None or js.finished or round_index <= js.round_index:
            return False
        if js.round_open:
            self._end_round(js)
        js.round_index = round_index
        js.round_open = True
        js.demand = js.remaining = demand if demand is not None else js.spec.demand
        js.assigned = 0
        js.requested_at = now
        js.filled_at = None
        js.tier = self._matching_tier(js)
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
        """Close the job's open round; response times (by device tier) feed the matching."""
        js = self.jobs.get(job_id)
        if js is None or not js.round_open or js.round_index != round_index:
            return False
        filled = js.filled_at if js.filled_at is not None else now
        js.sched_delays.append(filled - js.requested_at)
        js.response_times.append(now - filled)
        if self.tails is not None and len(response_times):
            self.tails.record(tiers, response_times)
        js.attempts += 1
        if succeeded:
            js.rounds_done += 1
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
        for device in js.devices:
            self.active_devices.pop(device, None)
        js.devices.clear()

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
        if js.remaining <= 0:
            js.filled_at = now
        if self.track_devices:
            self.active_devices[device_id] = (job_id, round_index)
            js.devices.add(device_id)
        self._mark(replan=True)
        return True

    def _matching_tier(self, js: JobState) -> int | None:
        if self.tiers is None or self.tails is None or not js.response_times:
            return None  # first rounds skip matching: no profile yet
        v = self.tiers.num_tiers
        u = _splitmix(self.seed, js.idx, js.attempts) % v
        resp = _mean(js.response_times)
        sched = _mean(js.sched_delays)
        if resp <= 0 or (sched > 0 and 1 + resp / sched <= v):
            # should_restrict is False whatever the tail ratio (g >= 0, so
            # v + g*c >= v >= 1 + c): skip computing it.
            return None
        g = self.tails.tail_ratio(u, self.tiers.prior_tail_ratio)
        if not should_restrict(v, g, resp, sched):
            return None
        if not self.restrict_contested and self._contested(js, self._open_states()):
            return None
        return u

    def _contested(self, js: JobState, states: Sequence[JobState]) -> bool:
        """Whether another job with open demand shares a signature with ``js``."""
        sig_matrix = self.index.signature_matrix  # a new array whenever the index changes
        if self._overlap_of is not sig_matrix:
            m = sig_matrix.astype(np.int64)
            self._overlap = (m.T @ m) > 0
            self._overlap_of = sig_matrix
        row = self._overlap[js.group]
        return any(other is not js and row[other.group] for other in states)

    def _lift_contested_restrictions(self, states: Sequence[JobState]) -> None:
        """Drop the tier restriction of every open round that another open job contests
        (for the rest of the round: a later request decides afresh)."""
        for js in states:
            if js.tier is not None and self._contested(js, states):
                js.tier = None
                self.lifted += 1

    # -- check-ins -------------------------------------------------------------------
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
    ) -> Assignment | None:
        """Decide one check-in: the device's slot, capacity tier and a U(0,1) draw."""
        self.supply.observe(slot, now)
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

    # -- batch interface (the fast simulator) ----------------------------------------
    def observe_many(self, slots: np.ndarray, times: np.ndarray) -> None:
        """Feed check-ins to the supply window without deciding them."""
        self.supply.observe_many(slots, times)

    def assign_many(self, idx: int, count: int, fill_time: float) -> None:
        """Account ``count`` assignments decided with the current table for job ``idx``.

        ``fill_time`` is the time of the assignment that would fill the demand.
        """
        self._take(self.by_idx[idx], count, fill_time)

    def _take(self, js: JobState, count: int, now: float) -> None:
        js.remaining -= count
        js.assigned += count
        js.service += count
        budget = self._table.budget
        budget[js.idx] -= count
        if js.remaining <= 0:
            js.filled_at = now
            self._mark(replan=True)
        elif budget[js.idx] <= 0:
            self._mark(replan=False)

    # -- compilation -----------------------------------------------------------------
    def _mark(self, replan: bool) -> None:
        self._dirty = True
        self._replan = self._replan or replan

    @property
    def dirty(self) -> bool:
        return self._dirty

    def table(self, now: float) -> DispatchTable:
        """The dispatch table for this instant, recompiled if a plan event happened."""
        if self._dirty:
            self._compile(now)
        return self._table

    def _open_states(self) -> list[JobState]:
        # ``jobs`` is in idx order: add_job inserts each job with the next idx.
        return [js for js in self.jobs.values() if js.round_open and js.remaining > 0]

    def _open_jobs(self, now: float) -> tuple[OpenJob, ...]:
        return self._view(now).open_jobs

    def _progress_ratios(self, states: list[JobState], now: float) -> dict[int, float]:
        rate = self.supply.rate_per_s()
        counts = self.supply.slot_counts(self.index.num_slots)
        total = counts.sum()
        concurrent = sum(1 for js in self.jobs.values() if not js.finished)
        out = {}
        for js in states:
            share = float(counts[self.index.matrix[:, js.group]].sum() / total) if total else 0.0
            eligible_rate = rate * share
            resp = _mean(js.response_times) if js.response_times else js.spec.workload_s
            per_round = (js.spec.demand / eligible_rate if eligible_rate > 0 else 0.0) + resp
            done = (js.rounds_done + js.assigned / max(1, js.demand)) / js.spec.rounds
            p = Progress(now - js.registered_at, done, js.spec.rounds * per_round)
            out[js.idx] = progress_ratio(p, concurrent)
        return out

    def _supply_by_signature(self) -> np.ndarray:
        # Counts of whole check-ins: the float sums are exact, so counting the window's
        # signatures directly equals summing per-slot counts by signature.
        window = self.supply.window_slots()
        sigs = self.index.signature_of_slot[window]
        counts = np.bincount(sigs, minlength=self.index.num_signatures)
        return counts.astype(np.float64)

    def _build_view(
        self, now: float, states: list[JobState] | None = None
    ) -> tuple[PolicyView, Sequence[int | None]]:
        """The policy's view of the open jobs, and each one's tier restriction (or None)."""
        if states is None:
            states = self._open_states()
        tiers = [js.tier for js in states]
        weights = None
        scale: dict[int, float] = {}
        eps = self.fairness_eps
        if eps and states:
            rhos = self._progress_ratios(states, now)
            weights = [demand_weight(rhos[js.idx], eps) for js in states]
            by_group: dict[int, list[float]] = {}
            for js, w in zip(states, weights, strict=True):
                by_group.setdefault(js.group, []).append(w ** (1 / eps))
            scale = {g: group_queue_scale(r, eps) for g, r in by_group.items()}
        key = self.policy.queue_key
        if key != "round" and states:
            # Keys other than the round's remaining demand are that demand times a weight
            # fixed at each plan recompute, so the budget machinery of ordered policies
            # applies unchanged.
            if key == "job":  # an open round belongs to an unfinished job
                work = [
                    (js.remaining + (js.spec.rounds - js.rounds_done - 1) * js.demand)
                    / js.remaining
                    for js in states
                ]
            else:  # "random": a priority in (0, 1] per round attempt
                work = [
                    ((_splitmix(self.seed, js.idx, js.attempts, 1) >> 11) + 1)
                    / 2.0**53
                    / js.remaining
                    for js in states
                ]
            weights = (
                work if weights is None else [a * b for a, b in zip(weights, work, strict=True)]
            )
        view = PolicyView(
            self.index.signature_matrix,
            self._supply_by_signature,
            [js.idx for js in states],
            [js.group for js in states],
            [js.remaining for js in states],
            weights,
            scale,
            lambda: [js.spec.job_id for js in states],
        )
        return view, tiers

    def _view(self, now: float) -> PolicyView:
        return self._build_view(now)[0]

    def _compile(self, now: float) -> None:
        states = self._open_states()
        if self._replan and not self.restrict_contested:
            # Competitors appear only with plan events (a round request, a new signature).
            self._lift_contested_restrictions(states)
        view, tiers = self._build_view(now, states)
        policy = self.policy
        if self._replan:
            policy.replan(view)
            self.replans += 1
        self.compiles += 1
        self._table = self._tabulate(view, tiers)
        self._dirty = False
        self._replan = False

    def _tabulate(self, view: PolicyView, tiers: Sequence[int | None]) -> DispatchTable:
        """Compile the policy's preference over ``view`` into a dispatch table.

        Row (s, t) lists the open jobs eligible for signature s and allowed on tier t,
        section by section in preference order (the whole row for a uniform pick, its
        head otherwise). A job at the head of some row gets a budget: its remaining
        demand, or fewer if its shrinking demand would overtake the job just ahead of it
        in some section of any row (ordered policies only).
        """
        policy = self.policy
        num_sigs = view.num_signatures
        sigs = max(1, num_sigs)
        v = self.num_tiers
        n = len(view)
        uniform = policy.mode == "uniform"
        width = max(1, n) if uniform else 1
        if n == 0 or num_sigs == 0:
            budget = np.full(len(self.by_idx), NO_LIMIT, dtype=np.int64)
            if n:
                budget[view.idx_list] = view.remaining_list
            return DispatchTable(
                np.full((sigs, v, width), -1, dtype=np.int64),
                np.zeros((sigs, v), dtype=np.int64),
                uniform,
                budget,
            )
        table = policy.section_table(view)
        k = 1 if table is None else policy.num_sections
        if uniform:
            if n * sigs * v * k <= SMALL_UNIFORM:
                return self._tabulate_small(view, tiers, table, k)
            return self._tabulate_numpy(view, tiers, table, k)
        if sigs * v * k <= SMALL_TABLE and n <= SMALL_JOBS:
            return self._tabulate_small(view, tiers, table, k)
        return self._tabulate_classes(view, tiers, table, k)

    def _row_sections(self, table: np.ndarray | None, v: int, k: int) -> _RowSections:
        """The class bit sets for the current eligibility and section tables (cached
        while both stay the same objects)."""
        sig_matrix = self.index.signature_matrix
        cache = self._bits_cache
        if cache is None or not cache.matches(sig_matrix, table, v):
            cache = self._bits_cache = _RowSections(sig_matrix, table, v, k)
        return cache

    def _tabulate_small(
        self,
        view: PolicyView,
        tiers: Sequence[int | None],
        table: np.ndarray | None,
        k: int,
    ) -> DispatchTable:
        """``_tabulate`` in plain Python over bit sets (fast for small instances)."""
        policy = self.policy
        sigs = view.num_signatures
        v = self.num_tiers
        n = len(view)
        num_rows = sigs * v
        idx = view.idx_list
        group = view.group_list
        remaining = view.remaining_list
        budget = [NO_LIMIT] * len(self.by_idx)
        for i, r in zip(idx, remaining, strict=True):
            budget[i] = r
        order = (
            view.order_list(policy.ordering) if n <= 128 else view.order(policy.ordering).tolist()
        )
        sections = self._row_sections(table, v, k)
        class_bits = sections.bits
        # A job's class (group, tier restriction) as one int: group + groups * (tier + 1).
        stride = max(1, view.sig_matrix.shape[1])
        if tiers.count(None) == n:
            keys = group
        else:
            keys = [
                g if t is None else g + stride * (t + 1) for g, t in zip(group, tiers, strict=True)
            ]
        if policy.ordering != "idx":
            keys = list(map(keys.__getitem__, order))
        per_class: dict[int, int] = {}
        for key in keys:
            per_class[key] = per_class.get(key, 0) + 1
        for key in per_class:
            if key not in class_bits:
                sections.add(key, key % stride, key // stride - 1 if key >= stride else None)
        bits = list(map(class_bits.__getitem__, keys))  # row-section bits, preference order
        if policy.mode == "uniform":
            flat: list[int] = []
            counts = []
            rows = []
            for r in range(num_rows):
                row: list[int] = []
                for sec in range(k):
                    bit = 1 << (r * k + sec)
                    row.extend([idx[order[q]] for q in range(n) if bits[q] & bit])
                counts.append(len(row))
                rows.append(row)
                flat.extend(row)
                flat.extend([-1] * (n - len(row)))
            return DispatchTable(
                np.array(flat, dtype=np.int64).reshape(sigs, v, n),
                np.array(counts, dtype=np.int64).reshape(sigs, v),
                True,
                np.array(budget, dtype=np.int64),
                row_lists=rows,
            )
        counts = [0] * num_rows
        members = sections.members
        for key, c in per_class.items():
            for r in members[key]:
                counts[r] += c
        head = [-1] * num_rows  # position in preference order of each row's first job
        section_bits = sections.section_bits
        present = 0  # row sections with at least one job
        for key in per_class:
            present |= class_bits[key]
        done = 0  # rows with a head, as their section-0 bits
        for sec in range(k):
            want = section_bits[sec] & ~(done << sec) & present
            if not want:
                continue
            for q, b in enumerate(bits):
                hit = b & want
                if hit:
                    want ^= hit
                    while hit:
                        low = hit & -hit
                        r = (low.bit_length() - 1) // k
                        head[r] = q
                        done |= 1 << (r * k)
                        hit ^= low
                    if not want:
                        break
        if policy.remaining_ordered:
            weight = view.weight_list
            for q in set(head):
                if q <= 0:
                    continue
                # The nearest job ahead sharing a row section is the one overtaken first.
                b = bits[q]
                a = q - 1
                while a >= 0 and not bits[a] & b:
                    a -= 1
                if a < 0:
                    continue
                pr, pa = order[q], order[a]
                limit = overtake_count(
                    remaining[pr], weight[pr], idx[pr], remaining[pa], weight[pa], idx[pa]
                )
                if limit < remaining[pr]:
                    budget[idx[pr]] = limit
        heads = [idx[order[q]] if q >= 0 else -1 for q in head]
        # One array for all three parts (each numpy call costs more than the data).
        out = np.array(heads + counts + budget, dtype=np.int64)
        return DispatchTable(
            out[:num_rows].reshape(sigs, v, 1),
            out[num_rows : 2 * num_rows].reshape(sigs, v),
            False,
            out[2 * num_rows :],
            heads,
        )

    def _tabulate_numpy(
        self,
        view: PolicyView,
        tiers: Sequence[int | None],
        table: np.ndarray | None,
        k: int,
    ) -> DispatchTable:
        """``_tabulate`` with numpy for a uniform pick: masks over the jobs in preference
        order, compacted row by row into full candidate lists."""
        policy = self.policy
        sigs = view.num_signatures
        v = self.num_tiers
        n = len(view)
        budget = np.full(len(self.by_idx), NO_LIMIT, dtype=np.int64)
        budget[view.idx] = view.remaining
        order = view.order(policy.ordering)
        idx_s = view.idx[order]
        group_s = view.group[order]
        tier_s = np.array([-1 if t is None else t for t in tiers], dtype=np.int64)[order]
        eligible = view.sig_matrix[:, group_s]  # [signatures, jobs in preference order]
        if table is None:
            keep = eligible
        else:
            section_s = table[:, group_s]
            keep = np.concatenate([eligible & (section_s == i) for i in range(k)], axis=1)
        if v > 1:
            if (tier_s >= 0).any():
                allowed = (tier_s < 0) | (tier_s == np.arange(v)[:, None])  # [tiers, jobs]
                if k > 1:
                    allowed = np.tile(allowed, k)
                keep = (keep[:, None, :] & allowed[None, :, :]).reshape(sigs * v, k * n)
            else:
                keep = np.repeat(keep, v, axis=0)
        # Row-major nonzero lists each row's entries in order: section, then preference.
        rows, cols = np.nonzero(keep)
        counts = np.bincount(rows, minlength=sigs * v)
        starts = np.cumsum(counts) - counts
        pos = np.arange(len(rows)) - starts[rows]
        jobs = cols % n if k > 1 else cols  # position in preference order
        candidates = np.full((sigs * v, n), -1, dtype=np.int64)
        candidates[rows, pos] = idx_s[jobs]
        return DispatchTable(candidates.reshape(sigs, v, n), counts.reshape(sigs, v), True, budget)

    def _tabulate_classes(
        self,
        view: PolicyView,
        tiers: Sequence[int | None],
        table: np.ndarray | None,
        k: int,
    ) -> DispatchTable:
        """``_tabulate`` with numpy for a first pick, over job classes.

        Jobs of one class (group and tier restriction) sit in the same row sections, so
        a row section's head is the earliest first job of its classes, and the job a
        head would overtake first is the nearest one ahead of it in a class sharing one
        of its row sections.
        """
        policy = self.policy
        sigs = view.num_signatures
        v = self.num_tiers
        n = len(view)
        num_rows = sigs * v
        idx = view.idx
        budget = np.full(len(self.by_idx), NO_LIMIT, dtype=np.int64)
        budget[idx] = view.remaining
        order = view.order(policy.ordering)
        idx_s = idx[order]
        tier = np.array([-1 if t is None else t for t in tiers], dtype=np.int64)
        klass = (view.group * (v + 1) + tier + 1)[order]
        uniq, first, inv = np.unique(klass, return_index=True, return_inverse=True)
        num_classes = len(uniq)
        c_group = uniq // (v + 1)
        c_tier = uniq % (v + 1) - 1
        allowed = (c_tier[:, None] < 0) | (c_tier[:, None] == np.arange(v))  # [class, tier]
        member = view.sig_matrix[:, c_group].T[:, :, None] & allowed[:, None, :]
        if table is None:
            sections = member.reshape(num_classes, num_rows)
        else:
            sec = table[:, c_group].T  # [class, signature]
            sections = (member[:, :, :, None] & (sec[:, :, None, None] == np.arange(k))).reshape(
                num_classes, num_rows * k
            )
        # Head of each row section: the earliest job of its classes; of each row: the
        # head of its first non-empty section.
        earliest = np.where(sections, first[:, None], n).min(axis=0).reshape(num_rows, k)
        filled = earliest < n
        head = earliest[np.arange(num_rows), filled.argmax(axis=1)]
        has_head = filled.any(axis=1)
        candidates = np.where(has_head, idx_s[np.minimum(head, n - 1)], -1)
        per_class = np.bincount(inv, minlength=num_classes)
        counts = (per_class @ sections).reshape(num_rows, k).sum(axis=1)
        if policy.remaining_ordered:
            receivers = np.unique(head[has_head])
            receivers = receivers[receivers > 0]
            if len(receivers):
                as_float = sections.astype(np.float32)
                share = (as_float[inv[receivers]] @ as_float.T) > 0  # [receiver, class]
                # Positions grouped by class, ascending: the last one before a receiver.
                by_class = np.argsort(inv, kind="stable")
                keys = inv[by_class] * n + by_class
                classes = np.arange(num_classes)
                probe = np.searchsorted(keys, classes[None, :] * n + receivers[:, None]) - 1
                probe_c = np.maximum(probe, 0)
                hit = (probe >= 0) & (keys[probe_c] // n == classes[None, :]) & share
                ahead = np.where(hit, keys[probe_c] % n, -1).max(axis=1)
                ok = ahead >= 0
                if ok.any():
                    b, a = receivers[ok], ahead[ok]
                    rem = view.remaining[order]
                    w = view.weight[order]
                    limit = overtake_after_many(
                        rem[b], w[b], idx_s[b], rem[a], w[a], idx_s[a], view.weighted
                    )
                    budget[idx_s[b]] = np.minimum(budget[idx_s[b]], limit)
        return DispatchTable(candidates.reshape(sigs, v, 1), counts.reshape(sigs, v), False, budget)


class _RowSections:
    """Bit sets of the row sections each job class (group, tier restriction) is in.

    Bit ``(s * v + t) * k + section`` stands for section ``section`` of row (s, t) of a
    dispatch table over ``v`` tiers and ``k`` sections.
    """

    def __init__(self, sig_matrix: np.ndarray, table: np.ndarray | None, v: int, k: int):
        self.sig_matrix = sig_matrix
        self.table = table
        self.v = v
        self.k = k
        self._rows = sig_matrix.tolist()
        self._sections = None if table is None else table.tolist()
        # All rows' bits of one section: sum of 2**(r*k + section) over rows r.
        row_bits = ((1 << (sig_matrix.shape[0] * v * k)) - 1) // ((1 << k) - 1)
        self.section_bits = [row_bits << sec for sec in range(k)]
        self.bits: dict[int, int] = {}  # class key -> its row-section bits
        self.members: dict[int, list[int]] = {}  # class key -> its rows

    def matches(self, sig_matrix: np.ndarray, table: np.ndarray | None, v: int) -> bool:
        return self.sig_matrix is sig_matrix and self.table is table and self.v == v

    def add(self, key: int, group: int, tier: int | None) -> None:
        v, k = self.v, self.k
        tier_bits = 0
        for t in range(v) if tier is None else (tier,):
            tier_bits |= 1 << (t * k)
        bits = 0
        stride = v * k
        sections = self._sections
        for s, row in enumerate(self._rows):
            if row[group]:
                bits |= tier_bits << (s * stride + (sections[s][group] if sections else 0))
        members = []
        b = bits
        while b:
            low = b & -b
            members.append((low.bit_length() - 1) // k)
            b ^= low
        self.bits[key] = bits
        self.members[key] = members
