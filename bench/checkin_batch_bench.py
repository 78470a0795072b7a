"""Scheduler CPU per check-in of a CheckinBatch, in process: item by item (the path before
issue 13 item 3) against columnar, in the same run.

Both paths start from the same encoded CheckinBatch messages (128 check-ins each, as the
gateway sends them) and a fresh `SchedulerState` (venn policy) holding the pipeline bench's
jobs: *no job* (no open round admits the devices) and *assign* (200 jobs of 250 devices,
every device eligible). Per message, each path does what the scheduler worker does apart
from Faust and Kafka:

- *item by item*: strict `venn.events.decode`, `SchedulerState.on_checkin` per check-in
  (each assignment's row written as it is decided), one AssignmentBatch per job, `encode`.
- *columnar*: `venn.checkin_columns.checkin_columns`, `SchedulerState.on_checkin_batch`
  (the core's `Scheduler.checkin_batch`, one row per job's batch), `encode`.

Each path also counts table rows written per check-in (each a changelog record in the
pipeline) and the deciding core's table compiles.

The core alone is measured too: `Scheduler.checkin` per check-in against
`Scheduler.checkin_batch`, on the same slots and tiers. CPU time (process_time), median of
the repeats. Prints a table and writes docs/results/bench/checkin_batch.json.

    .venv/bin/python -m bench.checkin_batch_bench [--checkins 50000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import platform
import statistics
import time
import uuid
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import git_commit, preamble
from services.scheduler.outputs import uniform_of
from services.scheduler.state import SchedulerState
from services.scheduler.store import MemoryStore
from venn import events as ev
from venn.checkin_columns import AttrsCache, checkin_columns
from venn.core import make_scheduler
from venn.core.model import JobSpec, Requirement
from venn.settings import SchedulerSettings

ROOT = Path(__file__).resolve().parents[1]

JSON_OUT = ROOT / "docs" / "results" / "bench" / "checkin_batch.json"
BATCH = 128
DEMAND = 250
GOAL_US = 5.0
PARTITIONS = 12
PATHS = ("item_by_item", "columnar")
STAGES = ("decode", "decide", "encode")
COUNTS = ("rows_per_checkin", "compiles_per_checkin")


def checkin_messages(n: int, attrs: dict[str, float], prefix: str) -> list[bytes]:
    """n check-ins (as bench/pipeline_bench.py makes them) in CheckinBatch messages."""
    now = time.time()
    items = [
        ev.encode(
            ev.DeviceCheckin(
                event_id=f"{prefix}-{i}-{uuid.uuid4().hex[:12]}",
                time=now,
                device_id=f"{prefix}-dev-{i:09d}",
                attrs=attrs,
                speed_ms_per_sample=61.5,
                bandwidth_kbps=11873.25,
            )
        )
        for i in range(n)
    ]
    return [
        ev.encode_checkin_batch(f"{prefix}-batch-{s}", now, items[s : s + BATCH])
        for s in range(0, n, BATCH)
    ]


class CountingTable(MutableMapping[bytes, object]):
    """A dict that counts writes and deletes (each a changelog record in the pipeline)."""

    def __init__(self) -> None:
        self.data: dict[bytes, object] = {}
        self.writes = 0

    def __getitem__(self, key: bytes) -> object:
        return self.data[key]

    def __setitem__(self, key: bytes, value: object) -> None:
        self.writes += 1
        self.data[key] = value

    def __delitem__(self, key: bytes) -> None:
        self.writes += 1
        del self.data[key]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


class Worker:
    """One scheduler worker's state and tables."""

    def __init__(self) -> None:
        self.config = SchedulerSettings(policy="venn")
        self.jobs, self.rounds = CountingTable(), CountingTable()
        self.state = SchedulerState(self.config, MemoryStore(self.jobs, self.rounds))
        self.state.ensure_loaded(time.time())

    def counts(self) -> tuple[int, int]:
        """Rows written, table compiles of the core."""
        return self.jobs.writes + self.rounds.writes, self.state.core.compiles

    def open_jobs(self, jobs: int, attr: str) -> None:
        now = time.time()
        for j in range(jobs):
            job_id = f"job-{j}"
            registered = ev.JobRegistered(
                event_id=f"reg-{job_id}", time=now, job_id=job_id, requirement={attr: 1.0},
                demand=DEMAND, rounds=100, deadline_s=600.0, workload_s=30.0,
            )  # fmt: skip
            requested = ev.RoundRequested(
                event_id=f"rr-{job_id}", time=now, job_id=job_id, round_index=0, demand=DEMAND
            )
            self.state.on_job_event(registered, now)
            self.state.on_job_event(requested, now)


def per_item_outputs(state: SchedulerState, batch: ev.CheckinBatch, now: float) -> list[ev.Event]:
    """The scheduler's batch path before columnar decisions: on_checkin per check-in."""
    by_job: dict[str, list[ev.Assignment]] = {}
    declined: list[str] = []
    for checkin in batch.checkins:
        assignment = state.on_checkin(checkin, now)
        if assignment is None:
            declined.append(checkin.event_id)
        else:
            by_job.setdefault(assignment.job_id, []).append(assignment)
    out: list[ev.Event] = [
        ev.AssignmentBatch(
            event_id=f"asgb:{batch.event_id}:{job_id}", time=now, job_id=job_id, assignments=items
        )
        for job_id, items in by_job.items()
    ]
    if batch.reply_to and declined:
        out.append(
            ev.CheckinsDeclined(
                event_id=f"dec:{batch.event_id}",
                time=now,
                reply_to=batch.reply_to,
                checkin_ids=declined,
            )
        )
    return out


def run_path(path: str, messages: list[bytes], jobs: int, attr: str) -> dict[str, Any]:
    """CPU µs per check-in of each stage, rows and compiles per check-in, and the
    assignments made."""
    worker = Worker()
    worker.open_jobs(jobs, attr)
    state = worker.state
    cache = AttrsCache()
    allowed_in = ev.ALLOWED_ON["venn.checkins"]
    spent = dict.fromkeys(STAGES, 0.0)
    clock = time.process_time
    assigned = 0

    before = worker.counts()
    gc.collect()
    for raw in messages:
        now = time.time()
        t0 = clock()
        decoded: Any = checkin_columns(raw, cache) if path != "item_by_item" else None
        if decoded is None:
            decoded = ev.decode(raw, allowed_in)
        t1 = clock()
        if path == "columnar":
            out = state.on_checkin_batch(decoded, now)
        else:
            out = per_item_outputs(state, decoded, now)
        state.recent.add(decoded.event_id)
        t2 = clock()
        for o in out:
            ev.encode(o)
        t3 = clock()
        assigned += sum(len(o.assignments) for o in out if isinstance(o, ev.AssignmentBatch))
        spent["decode"] += t1 - t0
        spent["decide"] += t2 - t1
        spent["encode"] += t3 - t2
    total = sum(spent.values())
    count = len(messages) * BATCH
    after = worker.counts()
    return {
        "us_per_checkin": {k: v / count * 1e6 for k, v in spent.items()}
        | {"total": total / count * 1e6},
        **{k: (a - b) / count for k, a, b in zip(COUNTS, after, before, strict=True)},
        "assigned": assigned,
    }


def core_paths(n: int, jobs: int) -> dict[str, float]:
    """The core alone: CPU µs per check-in, one by one against as arrays."""
    out = {}
    attrs = {"bench": 2.0}
    for name in ("checkin", "checkin_batch"):
        sched = make_scheduler("venn")
        for j in range(jobs):
            spec = JobSpec(f"job-{j}", Requirement.of(bench=1.0), DEMAND, 100, 600.0)
            sched.add_job(spec, 0.0)
            sched.request_round(spec.job_id, 0, 0.0)
        slot = sched.slot_of(attrs)
        devices = [f"dev-{i}" for i in range(n)]
        ids = [f"c-{i}" for i in range(n)]
        slots = np.full(BATCH, slot, dtype=np.int64)
        tiers = np.zeros(BATCH, dtype=np.int64)
        gc.collect()
        start = time.process_time()
        for s in range(0, n, BATCH):
            now = 1.0 + s
            if name == "checkin":
                for i in range(s, min(s + BATCH, n)):
                    sched.checkin(slot, now, 0, uniform_of(ids[i]), devices[i])
            else:
                chunk = devices[s : s + BATCH]
                sched.checkin_batch(slots[: len(chunk)], now, tiers[: len(chunk)], None, chunk)
        out[name] = (time.process_time() - start) / n * 1e6
    return out


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = runs[0]["us_per_checkin"].keys()
    return {
        "us_per_checkin": {
            k: round(statistics.median(r["us_per_checkin"][k] for r in runs), 2) for k in keys
        },
        "total_repeats": [round(r["us_per_checkin"]["total"], 2) for r in runs],
        **{k: round(statistics.median(r[k] for r in runs), 4) for k in COUNTS},
        "assigned": runs[0]["assigned"],
    }


def measure(n: int, repeats: int) -> dict[str, Any]:
    jobs = math.ceil(n / DEMAND)
    workloads = {"no_job": ({"other": 1.0}, "none"), "assign": ({"bench": 2.0}, "elig")}
    result: dict[str, Any] = {"jobs": jobs}
    for name, (attrs, prefix) in workloads.items():
        runs: dict[str, list[dict[str, Any]]] = {path: [] for path in PATHS}
        for _ in range(repeats):  # interleaved, so that machine noise hits every path
            for path in runs:
                # Fresh messages each run: older check-ins would be stale (10 s) and dropped.
                messages = checkin_messages(n, attrs, prefix)
                runs[path].append(run_path(path, messages, jobs, "bench"))
        result[name] = {path: median_of(r) for path, r in runs.items()}
    cores = [core_paths(n, jobs) for _ in range(repeats)]
    result["core"] = {
        k: round(statistics.median(c[k] for c in cores), 2) for k in ("checkin", "checkin_batch")
    }
    return result


def report(result: dict[str, Any]) -> str:
    lines = [
        "| Workload | Path | decode | decide | encode "
        "| total µs/check-in | repeats | rows/check-in | compiles/check-in | assigned |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    jobs = f"{result['jobs']} jobs x {DEMAND}"
    labels = {"no_job": "no job admits the devices", "assign": f"{jobs}, all eligible"}
    for name, label in labels.items():
        for path, r in result[name].items():
            us = r["us_per_checkin"]
            lines.append(
                f"| {label} | {path.replace('_', ' ')} | {us['decode']:.2f} | "
                f"{us['decide']:.2f} | {us['encode']:.2f} | "
                f"**{us['total']:.2f}** | "
                f"{', '.join(f'{x:.2f}' for x in r['total_repeats'])} | "
                f"{r['rows_per_checkin']:.3f} | {r['compiles_per_checkin']:.3f} | "
                f"{r['assigned']:,} |"
            )
    core = result["core"]
    lines.append("")
    lines.append(
        f"Core alone ({jobs}, decisions only): `Scheduler.checkin` one by one "
        f"{core['checkin']:.2f} µs per check-in, `Scheduler.checkin_batch` "
        f"{core['checkin_batch']:.2f} µs."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.checkin_batch_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--checkins", type=int, default=50_000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args(argv)
    preamble("checkin_batch_bench")
    started = time.time()
    result = measure(args.checkins, args.repeats)
    out: dict[str, Any] = {
        "meta": {
            "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
            "machine": f"{platform.machine()} {platform.python_implementation()} "
            f"{platform.python_version()}",
            "command": "python -m bench.checkin_batch_bench"
            + (f" --checkins {args.checkins}" if args.checkins != 50_000 else "")
            + (f" --repeats {args.repeats}" if args.repeats != 5 else ""),
            "commit": git_commit(),
            "checkins": args.checkins,
            "batch": BATCH,
            "repeats": args.repeats,
            "goal_us_per_checkin": GOAL_US,
            "seconds": round(time.time() - started, 1),
        },
        **result,
    }
    print(report(result))
    if not args.no_write:
        JSON_OUT.parent.mkdir(parents=True, exist_ok=True)
        JSON_OUT.write_text(json.dumps(out, indent=1) + "\n")
        print(f"\nwrote {JSON_OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
