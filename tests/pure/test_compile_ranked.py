"""compile_ranked: every row's candidates in preference order, for check-in partitions
that may have to pass over a job they hold no lease quota for (venn.core.lease)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from venn.core import POLICIES, JobSpec, Requirement, make_scheduler
from venn.core.capacity import TierModel
from venn.core.dispatch import DispatchTable, overtake_count, overtake_counts
from venn.core.open_jobs import OpenJobs

CPU_LEVELS = [0.0, 1.0, 4.0, 7.0]
MEM_LEVELS = [0.0, 10.0, 1000.0]
DEVICES = [{"cpu_f": c, "fp16_mem": m} for c in (0.5, 2.0, 5.0, 8.0) for m in (5.0, 100.0, 1200.0)]
Job = tuple[float, float, int, int, int]  # cpu, memory, demand, rounds, taken

jobs_strategy = st.lists(
    st.tuples(
        st.sampled_from(CPU_LEVELS),
        st.sampled_from(MEM_LEVELS),
        st.integers(1, 40),
        st.integers(1, 3),  # rounds: few, so that order keys are close
        st.integers(0, 39),
    ),
    min_size=1,
    max_size=8,
)


@dataclass
class Compiled:
    first: DispatchTable  # what ``compile`` made
    ranked: DispatchTable  # what ``compile_ranked`` made of the same inputs
    open_jobs: OpenJobs
    sig_matrix: np.ndarray
    sections: np.ndarray | None


def compile_both(policy: str, jobs: list[Job], checkins: list[int]) -> Compiled:
    """One scheduler state, compiled both ways."""
    sched = make_scheduler(policy, seed=3, tiers=TierModel((60.0, 120.0)), supply_window=50)
    for n, (cpu, mem, demand, rounds, _) in enumerate(jobs):
        spec = JobSpec(f"j{n}", Requirement.of(cpu=cpu, memory=mem), demand, rounds, 100.0)
        sched.add_job(spec, 0.0)
        sched.request_round(spec.job_id, 0, 0.0)
    # Supply for the plan (these check-ins are assigned too).
    for t, dev in enumerate(checkins):
        sched.checkin(sched.slot_of(DEVICES[dev]), float(t), tier=dev % 3, u=0.5, device_id=t)
    now = float(len(checkins) + 1)
    for n, (_, _, demand, _, taken) in enumerate(jobs):
        spec = sched.jobs[f"j{n}"].spec
        if taken % demand and sched.jobs[spec.job_id].remaining > taken % demand:
            sched.table(now)  # assignments are counted against a current table
            sched.assign_many(sched.jobs[spec.job_id].idx, taken % demand, now)
    seen: dict[str, Any] = {}
    compiler = sched._compiler
    real = compiler.compile

    def spy(open_jobs: OpenJobs, num_jobs: int, pol: Any, view: Any) -> DispatchTable:
        seen.update(args=(open_jobs, num_jobs, pol, view))
        return real(open_jobs, num_jobs, pol, view)

    compiler.compile = spy  # type: ignore[method-assign,assignment]
    sched._mark(replan=False)  # compile now, whatever the assignments above did
    first = sched.table(now)
    open_jobs, num_jobs, pol, view = seen["args"]
    ranked = compiler.compile_ranked(open_jobs, num_jobs, pol, view)
    return Compiled(first, ranked, open_jobs, view.sig_matrix, pol.section_table(view))


def section_of(c: Compiled, sig: int, idx: int) -> int:
    return 0 if c.sections is None else int(c.sections[sig, c.open_jobs.entries[idx].group])


@settings(max_examples=150, deadline=None)
@given(
    policy=st.sampled_from(sorted(POLICIES)),
    jobs=jobs_strategy,
    checkins=st.lists(st.integers(0, len(DEVICES) - 1), min_size=10, max_size=60),
)
def test_ranked_rows_list_every_eligible_job_in_preference_order(
    policy: str, jobs: list[Job], checkins: list[int]
) -> None:
    c = compile_both(policy, jobs, checkins)
    rows = c.ranked.rows()
    sigs, v, _ = c.ranked.candidates.shape
    entries = c.open_jobs.entries
    # The same pick rule, and the same first choice for every device.
    assert c.ranked.uniform == c.first.uniform
    if c.first.uniform:
        assert rows == c.first.rows()
    else:
        assert [r[0] if r else -1 for r in rows] == c.first.heads()
    for s in range(sigs):
        for t in range(v):
            row = rows[s * v + t]
            # Every open job eligible for the row and allowed on its tier, once.
            want = {
                i
                for i, e in entries.items()
                if s < len(c.sig_matrix)
                and c.sig_matrix[s, e.group]
                and (e.tier is None or e.tier == t)
            }
            assert len(set(row)) == len(row) and set(row) == want
            # Sections in the plan's order; within one, ordered policies by order key.
            secs = [section_of(c, s, i) for i in row]
            assert secs == sorted(secs)
            if c.open_jobs.by_key:
                for (a, sa), (b, sb) in pairwise(zip(row, secs, strict=True)):
                    if sa == sb:
                        assert entries[a].order < entries[b].order  # type: ignore[operator]


@settings(max_examples=150, deadline=None)
@given(
    policy=st.sampled_from(sorted(p for p in POLICIES if p.startswith(("venn", "srsf")))),
    jobs=jobs_strategy,
    checkins=st.lists(st.integers(0, len(DEVICES) - 1), min_size=10, max_size=60),
)
def test_ranked_budgets_stop_at_the_first_overtake_in_a_section(
    policy: str, jobs: list[Job], checkins: list[int]
) -> None:
    """A listed job's budget is its remaining demand, capped at the assignments after
    which it would overtake the job right ahead of it in the same section of some row;
    a job first in its section of every row it is in is not capped (the first of a
    later section is not "behind" the last of the one before: a cap there meant a
    recompile after nearly every assignment, the partitioned simulator's slowness)."""
    c = compile_both(policy, jobs, checkins)
    rows = c.ranked.rows()
    v = c.ranked.candidates.shape[1]
    entries = c.open_jobs.entries
    uncapped = c.open_jobs.budgets(len(c.ranked.budget))
    want = uncapped.copy()
    if c.open_jobs.by_key:
        for r, row in enumerate(rows):
            s = r // v
            for a, b in pairwise(row):
                if section_of(c, s, a) != section_of(c, s, b):
                    continue
                ea, eb = entries[a], entries[b]
                limit = overtake_count(eb.remaining, eb.weight, b, ea.remaining, ea.weight, a)
                want[b] = min(want[b], limit)
    assert c.ranked.budget.tolist() == want.tolist()
    assert all(c.ranked.budget[i] >= 1 for i in entries)
    # A row head's budget is never below what ``compile`` gives it (the same overtakes
    # end its run of first picks; ``compile`` may also cap across sections).
    if not c.first.uniform:
        for head in {h for h in c.first.heads() if h >= 0}:
            assert c.ranked.budget[head] >= c.first.budget[head] or c.first.budget[head] < 0


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 10**5),
            st.sampled_from([1.0, 0.5, 2.0, 0.37, 1.9, 3.3]),
            st.integers(0, 40),
            st.integers(1, 10**5),
            st.sampled_from([1.0, 0.5, 2.0, 0.37, 1.9, 3.3]),
            st.integers(0, 40),
        ),
        min_size=1,
        max_size=50,
    )
)
def test_overtake_counts_match_one_by_one(
    pairs: list[tuple[int, float, int, int, float, int]],
) -> None:
    cols = [np.array(c) for c in zip(*pairs, strict=True)]
    got = overtake_counts(*cols).tolist()
    assert got == [overtake_count(*p) for p in pairs]
