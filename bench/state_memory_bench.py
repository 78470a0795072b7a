"""Memory of one scheduler worker's state, by jobs and by devices holding assignments.

    .venv/bin/python -m bench.state_memory_bench [--no-write]

A `SchedulerState` (venn policy) on plain dicts standing in for the Faust tables, as the
worker holds them with the memory store: the core, the jobs table (a row per job) and the
round table (a row per read-back assignment batch of 128). Each job registers and opens a
round of demand D; check-in batches of distinct devices fill every round, and the worker
reads its assignment batches back. Python heap measured with tracemalloc after a full
collection; the baseline is the small fleet of the same run (100 jobs), the target 1,000
jobs (issue 13 item 7). Prints a table and writes docs/results/bench/state_memory.json, which
docs/notes/scaling.md's capacity formula reads.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench.common import preamble
from services.scheduler.state import SchedulerState
from services.scheduler.store import MemoryStore
from venn import events as ev
from venn.settings import SchedulerSettings

ROOT = Path(__file__).resolve().parents[1]

JSON_OUT = ROOT / "docs" / "results" / "bench" / "state_memory.json"
POINTS = ((100, 100), (1_000, 100), (1_000, 250))
"""(jobs, demand per round): every round full, so jobs x demand devices hold assignments."""
BATCH = 128


def fill(jobs: int, demand: int) -> dict[str, Any]:
    now = time.time()
    jobs_table: dict[bytes, object] = {}
    rounds_table: dict[bytes, object] = {}
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    state = SchedulerState(SchedulerSettings(policy="venn"), MemoryStore(jobs_table, rounds_table))
    state.ensure_loaded(now)
    for j in range(jobs):
        job_id = f"job-{j:05d}"
        state.on_job_event(
            ev.JobRegistered(
                event_id=f"reg-{job_id}", time=now, job_id=job_id, requirement={"ram": 1.0},
                demand=demand, rounds=10, deadline_s=600, workload_s=60,
            ),
            now,
        )  # fmt: skip
        state.on_job_event(
            ev.RoundRequested(
                event_id=f"rr-{job_id}", time=now, job_id=job_id, round_index=0, demand=demand
            ),
            now,
        )
    after_jobs = tracemalloc.get_traced_memory()[0]
    assigned = 0
    device = 0
    while assigned < jobs * demand:
        checkins = [
            ev.DeviceCheckin(
                event_id=f"c-{device + i}", time=now, device_id=f"dev-{device + i:09d}",
                attrs={"ram": 8.0}, speed_ms_per_sample=60.0, bandwidth_kbps=12000.0,
            )
            for i in range(BATCH)
        ]  # fmt: skip
        device += BATCH
        batch = ev.CheckinBatch(event_id=f"b-{device}", time=now, checkins=checkins)
        outs = state.on_checkin_batch(batch, now)
        for out in outs:
            if isinstance(out, ev.AssignmentBatch):
                assigned += len(out.assignments)
        if device > 4 * jobs * demand:
            raise RuntimeError(f"only {assigned} of {jobs * demand} slots filled")
    gc.collect()
    full = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {
        "jobs": jobs,
        "demand": demand,
        "active_assignments": assigned,
        "checkins": device,
        "jobs_mb": round((after_jobs - base) / 2**20, 2),
        "total_mb": round((full - base) / 2**20, 2),
        "bytes_per_job": round((after_jobs - base) / jobs),
        "bytes_per_assignment": round((full - after_jobs) / assigned),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    preamble("state_memory_bench")
    rows = [fill(jobs, demand) for jobs, demand in POINTS]
    print("| jobs | D | devices holding an assignment | check-ins | heap MB (jobs only) "
          "| bytes per job | bytes per held device |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['jobs']:,} | {r['demand']} | {r['active_assignments']:,} | "
              f"{r['checkins']:,} | {r['total_mb']} ({r['jobs_mb']}) | {r['bytes_per_job']:,} "
              f"| {r['bytes_per_assignment']:,} |")  # fmt: skip
    base, target = rows[0], rows[1]
    print(
        f"1,000 jobs / 100 jobs: {target['total_mb'] / max(base['total_mb'], 1e-9):.1f}x the heap "
        f"for {target['active_assignments'] / base['active_assignments']:.0f}x the assignments"
    )
    if not args.no_write:
        JSON_OUT.write_text(json.dumps({"command": "python -m bench.state_memory_bench",
                                        "rows": rows}, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
