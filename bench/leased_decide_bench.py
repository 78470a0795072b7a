"""Scheduler CPU per check-in in process, apart from Faust and Kafka: the single mode's
columnar batch path against the leased mode's (issue 13), in the same run.

Both start from the same CheckinBatch messages (128 check-ins, as the gateway sends
them) and 50 jobs of demand 250 that every device is eligible for (demand for 1.5x the
check-ins, as bench/workers_bench.py sets it), policy venn, 12 partitions.

- *single*: what `services/scheduler/app.py` does per message in the single mode:
  `checkin_columns`, `SchedulerState.on_checkin_batch`, `encode`, and the read-back of
  each AssignmentBatch (`own_output`, `on_assignment`).
- *leased*: one worker holding every partition, as one leased worker does:
  `LeasedCheckins.on_checkins` on the device's partition, `encode` of every output, the
  owner's read-back of each AssignmentBatch, and every lease message (grants, reports,
  offers, answers, recalls) handled by its owner or partition in the order sent (a FIFO,
  as one Kafka partition delivers them), with the rows each writes.

Per check-in it counts CPU µs by stage, table rows written (each is a changelog record
in the pipeline), lease messages, and table compiles of the deciding core. CPU time
(process_time), median of the repeats. Prints a table and writes
docs/bench/leased_decide.json.

    .venv/bin/python bench/leased_decide_bench.py [--checkins 20000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import platform
import statistics
import sys
import time
import zlib
from collections import deque
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.checkin_batch_bench import checkin_messages, git_commit  # noqa: E402
from services.scheduler.config import SchedulerConfig  # noqa: E402
from services.scheduler.leases import (  # noqa: E402
    OWNER_KINDS,
    LeasedCheckins,
    LeaseOwner,
    Replica,
)
from services.scheduler.state import SchedulerState, speed_proxies  # noqa: E402
from venn import events as ev  # noqa: E402
from venn.checkin_columns import AttrsCache, checkin_columns  # noqa: E402
from venn.core.lease import LeaseRule  # noqa: E402
from venn.settings import Settings  # noqa: E402

JSON_OUT = ROOT / "docs" / "bench" / "leased_decide.json"
BATCH = 128
DEMAND = 250
PARTITIONS = 12
STAGES = ("decode", "decide", "encode", "read_back", "lease_messages")


class CountingTable(MutableMapping[str, Any]):
    """A dict that counts writes and deletes (each a changelog record in the pipeline)."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.writes = 0

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.writes += 1
        self.data[key] = value

    def __delitem__(self, key: str) -> None:
        self.writes += 1
        del self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


def partition_of(key: str) -> int:
    return zlib.crc32(key.encode()) % PARTITIONS


class Worker:
    """One scheduler worker's state, in the single or the leased mode, with its tables."""

    def __init__(self, leased: bool) -> None:
        self.config = SchedulerConfig(
            settings=Settings(topic_partitions=PARTITIONS), policy="venn", leased=leased
        )
        self.jobs, self.rounds, self.lease = CountingTable(), CountingTable(), CountingTable()
        self.state = SchedulerState(self.config, self.jobs, self.rounds)
        self.replica: Replica | None = None
        if leased:
            rule = LeaseRule(PARTITIONS)
            self.replica = Replica(self.config)
            self.state.lease_owner = LeaseOwner(rule, self.lease)
            self.state.leased = LeasedCheckins(
                self.config, rule, self.replica, self.lease, speed_proxies
            )
        self.messages: deque[ev.LeaseMessage] = deque()
        self.lease_messages = 0
        self.state.ensure_loaded(time.time())

    def rows(self) -> int:
        return self.jobs.writes + self.rounds.writes + self.lease.writes

    def compiles(self) -> int:
        core = self.replica.core if self.replica is not None else self.state.core
        return core.compiles

    def open_jobs(self, jobs: int, attr: str) -> None:
        now = time.time()
        for j in range(jobs):
            job_id = f"job-{j}"
            q = partition_of(job_id)
            registered = ev.JobRegistered(
                event_id=f"reg-{job_id}", time=now, job_id=job_id, requirement={attr: 1.0},
                demand=DEMAND, rounds=100, deadline_s=600.0, workload_s=30.0,
            )  # fmt: skip
            requested = ev.RoundRequested(
                event_id=f"rr-{job_id}", time=now, job_id=job_id, round_index=0, demand=DEMAND
            )
            self.state.on_job_event(registered, q, now)
            self.route(self.state.on_job_event(requested, q, now) or [])
            if self.replica is not None:
                self.replica.apply(self.jobs[job_id], now)
        if self.replica is not None:
            self.deliver(now)

    def route(self, out: list[ev.Event]) -> list[ev.Event]:
        """Queue the lease messages; returns the other outputs."""
        rest = []
        for o in out:
            if isinstance(o, ev.LeaseMessage):
                self.messages.append(o)
            else:
                rest.append(o)
        return rest

    def deliver(self, now: float) -> list[ev.Event]:
        """Handle every queued lease message (and those they cause), in order."""
        out: list[ev.Event] = []
        owner, leased = self.state.lease_owner, self.state.leased
        assert owner is not None and leased is not None
        while self.messages:
            m = self.messages.popleft()
            self.lease_messages += 1
            if m.kind in OWNER_KINDS:
                made = owner.on_event(m, partition_of(m.job_id), now)
            else:
                made = leased.on_event(m, m.partition, now)
            out += self.route(made)
        return out


def run(leased: bool, messages: list[bytes], jobs: int) -> dict[str, Any]:
    worker = Worker(leased)
    worker.open_jobs(jobs, "bench")
    state = worker.state
    cache = AttrsCache()
    allowed_back = ev.ALLOWED_ON["venn.assignments"]
    spent = dict.fromkeys(STAGES, 0.0)
    clock = time.process_time
    assigned = 0
    rows0, compiles0, leases0 = worker.rows(), worker.compiles(), worker.lease_messages
    gc.collect()
    for raw in messages:
        now = time.time()
        t0 = clock()
        cols = checkin_columns(raw, cache)
        assert cols is not None
        t1 = clock()
        if state.leased is not None:
            # The gateway's batches mix partitions; the pipeline's producer keys each
            # check-in by its device, so a partition sees its own devices' check-ins.
            q = partition_of(cols.event_id)
            out = worker.route(state.leased.on_checkins(cols, q, now))
        else:
            out = state.on_checkin_batch(cols, now)
        state.recent.add(cols.event_id)
        t2 = clock()
        values = [ev.encode(o) for o in out]
        t3 = clock()
        for event, value in zip(out, values, strict=True):
            if not isinstance(event, ev.AssignmentBatch):
                continue
            state.sent_output(event, value)
            back = state.own_output(value) or ev.decode(value, allowed_back)
            state.on_assignment(back, partition_of(event.job_id), now)
            assigned += len(event.assignments)
        t4 = clock()
        t5 = t4
        if state.leased is not None:
            more = worker.deliver(now)
            for event in more:
                value = ev.encode(event)
                if isinstance(event, ev.AssignmentBatch):
                    state.sent_output(event, value)
                    back = state.own_output(value) or ev.decode(value, allowed_back)
                    state.on_assignment(back, partition_of(event.job_id), now)
                    assigned += len(event.assignments)
            t5 = clock()
        spent["decode"] += t1 - t0
        spent["decide"] += t2 - t1
        spent["encode"] += t3 - t2
        spent["read_back"] += t4 - t3
        spent["lease_messages"] += t5 - t4
    count = len(messages) * BATCH
    total = sum(spent.values())
    return {
        "us_per_checkin": {k: v / count * 1e6 for k, v in spent.items()}
        | {"total": total / count * 1e6},
        "rows_per_checkin": (worker.rows() - rows0) / count,
        "lease_messages_per_checkin": (worker.lease_messages - leases0) / count,
        "compiles_per_checkin": (worker.compiles() - compiles0) / count,
        "assigned": assigned,
    }


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = runs[0]["us_per_checkin"].keys()
    return {
        "us_per_checkin": {
            k: round(statistics.median(r["us_per_checkin"][k] for r in runs), 2) for k in keys
        },
        "total_repeats": [round(r["us_per_checkin"]["total"], 2) for r in runs],
        **{
            k: round(statistics.median(r[k] for r in runs), 4)
            for k in ("rows_per_checkin", "lease_messages_per_checkin", "compiles_per_checkin")
        },
        "assigned": runs[0]["assigned"],
    }


def measure(n: int, repeats: int) -> dict[str, Any]:
    jobs = math.ceil(1.5 * n / DEMAND)
    runs: dict[str, list[dict[str, Any]]] = {"single": [], "leased": []}
    for _ in range(repeats):  # interleaved, so that machine noise hits both
        for mode in runs:
            # Fresh messages each run: older check-ins would be stale (10 s) and dropped.
            messages = checkin_messages(n, {"bench": 2.0}, "elig")
            runs[mode].append(run(mode == "leased", messages, jobs))
    return {"jobs": jobs, "checkins": n} | {mode: median_of(r) for mode, r in runs.items()}


def report(result: dict[str, Any]) -> str:
    lines = [
        "| mode | decode | decide | encode | read-back | lease messages | total µs/check-in "
        "| repeats | rows/check-in | lease messages/check-in | compiles/check-in | assigned |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode in ("single", "leased"):
        r = result[mode]
        us = r["us_per_checkin"]
        lines.append(
            f"| {mode} | {us['decode']:.2f} | {us['decide']:.2f} | {us['encode']:.2f} | "
            f"{us['read_back']:.2f} | {us['lease_messages']:.2f} | **{us['total']:.2f}** | "
            f"{', '.join(f'{x:.2f}' for x in r['total_repeats'])} | "
            f"{r['rows_per_checkin']:.3f} | {r['lease_messages_per_checkin']:.3f} | "
            f"{r['compiles_per_checkin']:.3f} | {r['assigned']:,} |"
        )
    single, leased = result["single"]["us_per_checkin"], result["leased"]["us_per_checkin"]
    lines.append("")
    lines.append(
        f"{result['jobs']} jobs x {DEMAND}, {result['checkins']:,} check-ins, "
        f"{PARTITIONS} partitions: leased / single = "
        f"{leased['total'] / single['total']:.1f}x CPU per check-in."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/leased_decide_bench.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--checkins", type=int, default=20_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args(argv)
    started = time.time()
    result = measure(args.checkins, args.repeats)
    out: dict[str, Any] = {
        "meta": {
            "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
            "machine": f"{platform.machine()} {platform.python_implementation()} "
            f"{platform.python_version()}",
            "command": "python bench/leased_decide_bench.py"
            + (f" --checkins {args.checkins}" if args.checkins != 20_000 else "")
            + (f" --repeats {args.repeats}" if args.repeats != 3 else ""),
            "commit": git_commit(),
            "wall_s": round(time.time() - started, 1),
        },
        **result,
    }
    print(report(result))
    if not args.no_write:
        JSON_OUT.parent.mkdir(parents=True, exist_ok=True)
        JSON_OUT.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {JSON_OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
