"""The simulator with P emulated check-in partitions sharing rounds by leases
(venn.sim.partitioned): with one partition and instant messages it decides exactly as
the single-worker simulator; with twelve, every job finishes, no round gets more than D
assignments and no device holds two active assignments."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from itertools import pairwise

import numpy as np
import pytest

from venn.core.lease import LeaseRule
from venn.core.model import JobSpec
from venn.sim.engine import SimConfig, SimRun, Simulation, _Prepared
from venn.sim.partitioned import HeldDevice, PartitionedSimulation, partition_of
from venn.sim.rounds import WINDOW_SLACK_S
from venn.sim.runner import tier_model
from venn.traces.checkins import SyntheticTrace
from venn.traces.devices import load_device_profiles
from venn.workloads import Workload, load_workload


def small(
    workload: str = "even", jobs: int = 6, shrink: int = 100
) -> tuple[Workload, list[JobSpec]]:
    wl = load_workload(workload, jobs=jobs)
    return wl, [dataclasses.replace(j, rounds=max(2, j.rounds // shrink)) for j in wl.jobs]


def fingerprint(run: SimRun) -> list[object]:
    return [
        (
            j.spec.job_id,
            j.finished_at,
            [
                (x.attempt, x.filled_at, x.closed_at, x.assigned, x.results, x.succeeded)
                for x in j.rounds
            ],
        )
        for j in run.jobs
    ]


class Recorded(PartitionedSimulation):
    """Notes every assignment: (device, job idx, round, start, end of its activity)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.log: list[tuple[int, str, int, float, float]] = []

    def _commit_step(
        self, p: _Prepared, positions: dict[int, list[int]], i: int, j: int, stop: int
    ) -> int:
        stop = super()._commit_step(p, positions, i, j, stop)
        b = p.batch
        for job, mine in positions.items():
            w = self._workload[job]
            js = self.sched.by_idx[job]
            job_id, rnd = js.spec.job_id, js.round_index
            for c in mine:
                if c >= i + stop:
                    break
                finish = float(b.time[c] + (b.noise[c] + w * b.comp[c] + p.transfer[c]))
                # Active until its result arrives, or until its window closes if it fails.
                window_end = float(b.end[c]) + WINDOW_SLACK_S
                end = finish if finish <= window_end else window_end
                self.log.append((int(b.device_id[c]), job_id, rnd, p.time[c], end))
        return stop

    def _assign_held(self, job: int, held: HeldDevice, t: float) -> None:
        super()._assign_held(job, held, t)
        js = self.sched.by_idx[job]
        finish = t + held.noise + self._workload[job] * held.comp + held.transfer
        ok = finish <= held.window_end + WINDOW_SLACK_S
        end = finish if ok else held.window_end + WINDOW_SLACK_S
        self.log.append((held.device_id, js.spec.job_id, js.round_index, t, end))


def make(
    cls: type[Simulation],
    policy: str,
    partitions: int,
    delay: float,
    shrink: int = 100,
    backstop: bool = True,
) -> Simulation:
    wl, jobs = small(shrink=shrink)
    cfg = SimConfig(
        policy=policy,
        seed=wl.seed,
        horizon_s=wl.horizon_s,
        partitions=partitions,
        lease_delay_s=delay,
    )
    tiers = tier_model(SyntheticTrace(seed=wl.seed, horizon_s=86_400.0), 3)
    source = SyntheticTrace(seed=wl.seed, horizon_s=wl.horizon_s)
    if issubclass(cls, PartitionedSimulation):
        rule = LeaseRule(partitions, backstop=backstop)
        return cls(jobs, source, load_device_profiles(), cfg, tiers, rule)
    return cls(jobs, source, load_device_profiles(), cfg, tiers)


@pytest.mark.parametrize("policy", ["venn", "srsf", "fifo", "random"])
def test_one_partition_with_instant_messages_decides_as_the_single_worker(policy: str) -> None:
    """Why exactly equal: the one partition's first grant is half of D and its report at
    the low-water mark is answered with the whole reserve before the next check-in (zero
    delay: a message at t runs before a check-in at t), so its quota always equals the
    round's remaining demand; it never passes over the ranked table's first candidate,
    which is ``compile``'s head; and the ranked table's extra recompiles (tighter
    budgets) change no decision."""
    single = make(Simulation, policy, 1, 0.0).run()
    part = make(PartitionedSimulation, policy, 1, 0.0)
    run = part.run()
    assert isinstance(part, PartitionedSimulation) and part.passed_over == 0
    assert part.message_counts.get("Offer", 0) == 0
    assert run.assignments == single.assignments > 0
    assert fingerprint(run) == fingerprint(single)


@pytest.mark.parametrize("backstop", [True, False])
def test_twelve_partitions_keep_the_invariants(backstop: bool) -> None:
    # Rounds / 20: long enough (about a simulated day) for devices to check in again.
    sim = make(Recorded, "venn", 12, 0.5, shrink=20, backstop=backstop)
    assert isinstance(sim, Recorded)
    run = sim.run()
    # Every job finishes (the horizon is the workload's, long enough for all of them).
    assert all(j.finished_at is not None for j in run.jobs)
    # Partitions did pass over jobs they held no quota for: the leases were exercised.
    assert sim.passed_over > 0 and sim.messages_sent > 0
    counts = sim.message_counts
    if backstop:
        # Devices were offered, accepted, refused (then mostly given to another job)
        # and quota was recalled and given back.
        assert sim.offers_accepted > 0 and sim.offers_refused > 0
        assert sim.refused_reassigned > 0
        assert counts["Offer"] == counts["Answer"] == sim.offers_accepted + sim.offers_refused
        assert counts["Recall"] > 0
        assert not sim._held  # every held device was answered
    else:
        assert set(counts) == {"Grant", "Report"}
    # No round gets more than D assignments.
    per_round: dict[tuple[str, int], int] = defaultdict(int)
    for _, job, rnd, _, _ in sim.log:
        per_round[(job, rnd)] += 1
    demand = {j.spec.job_id: j.spec.demand for j in run.jobs}
    assert all(n <= demand[job] for (job, _), n in per_round.items())
    for j in run.jobs:
        assert all(r.assigned <= j.spec.demand for r in j.rounds)
    assert sum(per_round.values()) == run.assignments
    # A device never holds two active assignments, and always checks in at one partition.
    by_device: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for dev, _, _, start, end in sim.log:
        by_device[dev].append((start, end))
    assert sum(len(spans) > 1 for spans in by_device.values()) > 1000
    for spans in by_device.values():
        spans.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in pairwise(spans))
    devices = np.array(sorted(by_device), dtype=np.int64)
    assert (partition_of(devices, 12) == partition_of(devices.copy(), 12)).all()


def test_partitions_spread_devices_evenly() -> None:
    parts = partition_of(np.arange(120_000, dtype=np.int64), 12)
    counts = np.bincount(parts, minlength=12)
    assert counts.min() > 0.97 * 10_000 and counts.max() < 1.03 * 10_000
