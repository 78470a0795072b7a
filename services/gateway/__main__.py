"""`python -m services.gateway [--workers N]`: the device gateway with Settings from env.

With `--workers N`, N processes share the port through SO_REUSEPORT (the kernel spreads
connections); each has its own Kafka clients, as behind any load balancer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal
import subprocess
import sys

import uvloop

from services.gateway.app import run_gateway
from venn.settings import Settings


def _settled(_server: object) -> None:
    """What the process holds once it serves (modules, settings, clients: some 40,000
    objects) goes to the collector's permanent generation, out of every full collection's
    traversal: under a flood those ran every few seconds, each a stall of the event loop
    (issue 34, the flood)."""
    gc.collect()
    gc.freeze()


async def _main(settings: Settings, reuse_port: bool) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    stats = await run_gateway(settings, stop, reuse_port=reuse_port, on_ready=_settled)
    logging.getLogger("venn.gateway").info("stopped: %s", stats)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m services.gateway", description=__doc__)
    parser.add_argument("--workers", type=int, default=1, help="processes sharing the port")
    parser.add_argument("--log-level", default="INFO")
    # A worker started by another with --workers N: it shares the port, starts no others.
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    settings = Settings.from_env()
    children: list[subprocess.Popen[bytes]] = []
    if args.workers > 1 and not args.child:
        command = [sys.executable, "-m", "services.gateway", "--child"]
        command += ["--log-level", args.log_level]
        children += [subprocess.Popen(command) for _ in range(args.workers - 1)]
    reuse_port = args.workers > 1 or args.child
    try:
        uvloop.run(_main(settings, reuse_port))
    finally:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


if __name__ == "__main__":
    main()
