"""`python -m services.devices [--speedup X] [--rate R] [--trace PATH]`: run a device fleet."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import time

from services.devices.fleet import run_devices, synthetic_source
from venn.sdk.clock import TraceClock
from venn.settings import Settings
from venn.traces.checkins import CheckinSource, load_trace


def parse_args() -> argparse.Namespace:
    settings = Settings.from_env()
    p = argparse.ArgumentParser(prog="python -m services.devices", description=__doc__)
    p.add_argument("--speedup", type=float, default=settings.speedup, help="trace s per wall s")
    p.add_argument("--trace", default="synthetic", help="'synthetic' or a FedScale CSV path")
    p.add_argument("--capacity", default=None, help="FedScale capacity file (with --trace)")
    p.add_argument("--rate", type=float, default=3.0, help="synthetic check-ins per trace s")
    p.add_argument("--devices", type=int, default=None, help="synthetic fleet size")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=float, default=0.0, help="trace time to start from (s)")
    p.add_argument("--epoch", type=float, default=None, help="wall time of --start (shared)")
    p.add_argument(
        "--gateway", default=None, help="check in over HTTP at this gateway URL (default: Kafka)"
    )
    p.add_argument("--log-level", default="INFO")
    return p.parse_args()


async def main_async(args: argparse.Namespace) -> None:
    source: CheckinSource
    if args.trace == "synthetic":
        source = synthetic_source(args.rate, args.devices, args.seed)
    else:
        source = load_trace(args.trace, seed=args.seed, capacity_file=args.capacity)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    epoch = time.time() if args.epoch is None else args.epoch
    clock = TraceClock(speedup=args.speedup, epoch=epoch, origin=args.start)
    stats = await run_devices(
        Settings.from_env().for_role("devices"),
        source,
        args.speedup,
        stop,
        clock=clock,
        start=args.start,
        gateway_url=args.gateway,
    )
    logging.getLogger("venn.devices").info("stopped: %s", stats)


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
