"""Start a Flower SuperNode that Venn schedules:

    python -m venn.integrations.flower.supernode --gateway http://127.0.0.1:8080 \\
        [--device-token T | --enroll-token T] [--checkin-interval 1] \\
        -- --insecure --superlink 127.0.0.1:9095 --node-config "device-id='d1' attr.ram=8"

Everything after ``--`` goes to `flower-supernode` unchanged. The launcher reads the node's
Venn profile from the same ``--node-config`` (Flower's parser), enrols the device when given
an enrol token, starts the SuperNode with ``VENN_GATEWAY_URL`` and ``VENN_DEVICE_TOKEN`` in
its environment (for the ClientApp mod), and checks in to the gateway until the SuperNode
exits or the launcher is stopped (SIGTERM/SIGINT stop both).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from flwr.common.config import parse_config_args

from venn.integrations.flower.agent import NodeAgent, enroll
from venn.integrations.flower.node import GATEWAY_ENV, TOKEN_ENV
from venn.integrations.flower.profile import NodeProfile
from venn.settings import Settings, env_name

log = logging.getLogger("venn.flower")

ENROLL_ENV = env_name("flower", "enroll_token")


def supernode_command() -> list[str]:
    """`flower-supernode` of this Python environment (else the one on PATH)."""
    beside = Path(sys.executable).with_name("flower-supernode")
    found = str(beside) if beside.exists() else shutil.which("flower-supernode")
    if found is None:
        raise RuntimeError("flower-supernode not found: install flwr in this environment")
    return [found]


def node_config_of(flower_args: Sequence[str]) -> str:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--node-config", default="")
    known, _ = parser.parse_known_args(list(flower_args))
    if not known.node_config:
        raise SystemExit("the SuperNode needs --node-config with device-id='<id>'")
    return str(known.node_config)


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    args = list(argv)
    split = args.index("--") if "--" in args else len(args)
    parser = argparse.ArgumentParser(prog="python -m venn.integrations.flower.supernode")
    flower = Settings.from_env(running=False).flower
    parser.add_argument("--gateway", default=flower.gateway_url or None, required=False)
    parser.add_argument("--device-token", default=flower.device_token or None)
    parser.add_argument("--enroll-token", default=flower.enroll_token or None)
    parser.add_argument("--checkin-interval", type=float, default=1.0)
    parser.add_argument("--log-level", default="INFO")
    options = parser.parse_args(args[:split])
    if not options.gateway:
        parser.error(f"--gateway (or {GATEWAY_ENV}) is required")
    return options, args[split + 1 :]


async def run(options: argparse.Namespace, flower_args: list[str]) -> int:
    profile = NodeProfile.from_node_config(parse_config_args([node_config_of(flower_args)]))
    token = options.device_token
    if not token and options.enroll_token:
        token = await enroll(options.gateway, options.enroll_token, profile.device_id)
    env = {**os.environ, GATEWAY_ENV: options.gateway}
    if token:
        env[TOKEN_ENV] = token
    env.pop(ENROLL_ENV, None)  # the ClientApps get the device's token, not the enrol token
    child = subprocess.Popen([*supernode_command(), *flower_args], env=env)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    agent = NodeAgent(profile, options.gateway, token, interval_s=options.checkin_interval)
    checkins = asyncio.create_task(agent.run(stop))
    exited = asyncio.create_task(asyncio.to_thread(child.wait))
    await asyncio.wait({exited, asyncio.create_task(stop.wait())}, return_when="FIRST_COMPLETED")
    stop.set()
    await checkins
    if child.poll() is None:
        child.terminate()
        try:
            await asyncio.wait_for(asyncio.shield(exited), 15)
        except TimeoutError:
            child.kill()
    with contextlib.suppress(Exception):
        await exited
    log.info("%s: %d check-ins, %d assignments", profile.device_id, agent.stats.checkins,
             agent.stats.assigned)  # fmt: skip
    return int(child.returncode or 0)


def main(argv: Sequence[str] | None = None) -> int:
    options, flower_args = parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=options.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return asyncio.run(run(options, flower_args))


if __name__ == "__main__":
    sys.exit(main())
