"""`python -m services.coordinator --workload NAME|PATH [--jobs N] [--speedup X]`.

Runs every job of a sampled workload (arrivals in trace seconds from now, optionally
compressed) and prints one line per finished job.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import time

from services.coordinator.runner import compress_arrivals, run_coordinator
from venn.sdk.clock import TraceClock
from venn.settings import Settings
from venn.workloads import load_workload, resolve_workload


def parse_args() -> argparse.Namespace:
    settings = Settings.from_env()
    p = argparse.ArgumentParser(prog="python -m services.coordinator", description=__doc__)
    p.add_argument("--workload", default="demo", help="workload name or YAML path")
    p.add_argument("--jobs", type=int, default=5)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--speedup", type=float, default=settings.speedup)
    p.add_argument("--arrival-scale", type=float, default=1.0, help="x inter-arrival gaps")
    p.add_argument("--epoch", type=float, default=None, help="wall time of trace time 0")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args()


async def main_async(args: argparse.Namespace) -> int:
    workload = load_workload(resolve_workload(args.workload), args.jobs, args.seed)
    jobs = compress_arrivals(workload.jobs, args.arrival_scale)
    clock = TraceClock(args.speedup, time.time() if args.epoch is None else args.epoch)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # SIGTERM leaves the jobs running: a coordinator started again resumes them.
    outcomes = await run_coordinator(
        Settings.from_env().for_role("coordinator"),
        jobs,
        args.speedup,
        stop,
        clock=clock,
        cancel_on_stop=False,
    )
    for job_id, o in outcomes.items():
        print(f"{job_id}: finished={o.finished} jct_s={o.jct_s} attempts={o.attempts}")
    return 0 if all(o.finished for o in outcomes.values()) else 1


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    raise SystemExit(asyncio.run(main_async(args)))


if __name__ == "__main__":
    main()
