"""Start a Flower SuperNode that Venn schedules:

    VENN_ENROLL_TOKEN_FILE=enroll.token venn-flower-supernode --gateway http://HOST:8080 \\
        -- --insecure --superlink HOST:9092 --port 9094 --node-config "device-id='d1' attr.ram=8"

Everything after ``--`` goes to `flower-supernode` unchanged. The launcher reads the node's
profile from the same ``--node-config``, starts the SuperNode with its desk's address in the
environment (for `venn_mod`), learns the node id the SuperLink gave it from the SuperNode's
own log line (``SuperNode ID: <id>``), enrols as the Venn device ``<device-id>@<node id>``
and checks in until the SuperNode exits or the launcher is stopped (SIGTERM/SIGINT stop
both). A restarted SuperNode gets a new node id, hence a new Venn device: Venn never sends
work to the dead one's id.

Tokens never go on a command line (``ps`` shows it to every user): the enrol token comes
from ``VENN_ENROLL_TOKEN`` or the file ``VENN_ENROLL_TOKEN_FILE`` (``--enroll-token-file``).
A fixed device token (``VENN_DEVICE_TOKEN[_FILE]``) checks in under the plain
``device-id``, which the ServerApp finds among the SuperLink's node names: secure mode,
with the node registered as ``flwr supernode register KEY.pub --name <device-id>``.
Neither token reaches the ClientApps.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from venn_flower.agent import GatewayRefused, NodeAgent, enroll_until_done
from venn_flower.desk import Desk
from venn_flower.profile import NodeConfigError, NodeProfile, parse_node_config, venn_device_id

log = logging.getLogger("venn_flower.supernode")

GATEWAY_ENV = "VENN_GATEWAY_URL"
ENROLL_ENV = "VENN_ENROLL_TOKEN"
DEVICE_TOKEN_ENV = "VENN_DEVICE_TOKEN"
SECRET_ENVS = (ENROLL_ENV, f"{ENROLL_ENV}_FILE", DEVICE_TOKEN_ENV, f"{DEVICE_TOKEN_ENV}_FILE")
NODE_ID_LINE = re.compile(rb"SuperNode ID: (\d+)")
"""The line flwr 1.42's SuperNode logs once the SuperLink activated it
(`flwr/supernode/start_client_internal.py`); the one thing read from Flower's log."""
NODE_ID_PATIENCE_S = 30.0


def supernode_command() -> list[str]:
    """`flower-supernode` of this Python environment (else the one on PATH)."""
    beside = Path(sys.executable).with_name("flower-supernode")
    found = str(beside) if beside.exists() else shutil.which("flower-supernode")
    if found is None:
        raise SystemExit("flower-supernode not found: install flwr in this environment")
    return [found]


def node_config_of(flower_args: Sequence[str]) -> str:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--node-config", default="")
    known, _ = parser.parse_known_args(list(flower_args))
    if not known.node_config:
        raise SystemExit("the SuperNode needs --node-config with device-id='<name>'")
    return str(known.node_config)


def secret(value: str | None, path: str | None, what: str) -> str | None:
    """A token from its variable, else from its file (stripped); None when neither."""
    if value:
        return value.strip()
    if path:
        try:
            return Path(path).expanduser().read_text().strip() or None
        except OSError as exc:
            raise SystemExit(f"cannot read the {what} file {path}: {exc}") from None
    return None


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    args = list(argv)
    split = args.index("--") if "--" in args else len(args)
    parser = argparse.ArgumentParser(
        prog="venn-flower-supernode",
        description="Start a Flower SuperNode that checks in to Venn (tokens: "
        f"{ENROLL_ENV}[_FILE] or {DEVICE_TOKEN_ENV}[_FILE], never on the command line).",
    )
    env = os.environ
    parser.add_argument(
        "--gateway", default=env.get(GATEWAY_ENV) or None, help=f"Venn's gateway ({GATEWAY_ENV})"
    )
    parser.add_argument(
        "--enroll-token-file",
        default=env.get(f"{ENROLL_ENV}_FILE") or None,
        help=f"a file holding the enrol token (or {ENROLL_ENV}/{ENROLL_ENV}_FILE)",
    )
    parser.add_argument(
        "--device-token-file",
        default=env.get(f"{DEVICE_TOKEN_ENV}_FILE") or None,
        help=f"a file holding a fixed device token (or {DEVICE_TOKEN_ENV})",
    )
    parser.add_argument("--checkin-interval", type=float, default=1.0)
    parser.add_argument(
        "--assignment-hold",
        type=float,
        default=20.0,
        help="seconds an assignment keeps the node from checking in while its task arrives",
    )
    parser.add_argument("--log-level", default="INFO")
    options = parser.parse_args(args[:split])
    if not options.gateway:
        parser.error(f"--gateway (or {GATEWAY_ENV}) is required")
    options.enroll_token = secret(env.get(ENROLL_ENV), options.enroll_token_file, "enrol token")
    options.device_token = secret(
        env.get(DEVICE_TOKEN_ENV), options.device_token_file, "device token"
    )
    if not options.enroll_token and not options.device_token:
        parser.error(
            f"no token: set {ENROLL_ENV} or {ENROLL_ENV}_FILE (--enroll-token-file), or a "
            f"fixed device token in {DEVICE_TOKEN_ENV}[_FILE]"
        )
    flower = args[split + 1 :]
    if options.device_token and not options.enroll_token and "--insecure" in flower:
        parser.error(
            "a fixed device token checks in under the plain device-id, which only secure "
            "mode's node names map to a Flower node: use an enrol token with --insecure"
        )
    return options, flower


class NodeIdWatch:
    """Forwards the SuperNode's output to ours and catches its node id."""

    def __init__(self, stream: IO[bytes], sink: IO[bytes], found: Callable[[int], None]) -> None:
        self.stream = stream
        self.sink = sink
        self.found = found
        self.thread = threading.Thread(target=self._pump, name="supernode-output", daemon=True)

    def _pump(self) -> None:
        seen = False
        for line in iter(self.stream.readline, b""):
            with contextlib.suppress(OSError, ValueError):
                self.sink.write(line)
                self.sink.flush()
            if not seen and (match := NODE_ID_LINE.search(line)):
                seen = True
                self.found(int(match.group(1)))


async def run(options: argparse.Namespace, flower_args: list[str]) -> int:
    try:
        profile = NodeProfile.from_node_config(parse_node_config(node_config_of(flower_args)))
    except NodeConfigError as exc:
        raise SystemExit(str(exc)) from None
    agent = NodeAgent(
        profile,
        options.gateway,
        options.device_token,
        interval_s=options.checkin_interval,
        hold_s=options.assignment_hold,
    )
    desk = Desk(agent)
    await desk.start()
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENVS}
    env.update(desk.environment())
    # The SuperNode starts flower-superexec and flwr-clientapp from PATH: those of this
    # environment first, so a launcher run by its path needs no activated environment.
    here = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([here, env.get("PATH", "")])
    loop = asyncio.get_running_loop()
    node_id: asyncio.Future[int] = loop.create_future()
    child = subprocess.Popen(
        [*supernode_command(), *flower_args],
        env=env,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert child.stderr is not None

    def found(n: int) -> None:
        if not node_id.done():
            node_id.set_result(n)

    def found_soon(n: int) -> None:
        loop.call_soon_threadsafe(found, n)

    NodeIdWatch(child.stderr, sys.stderr.buffer, found_soon).thread.start()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    exited = asyncio.create_task(asyncio.to_thread(child.wait))
    exited.add_done_callback(lambda _: stop.set())
    code = 0
    try:
        code = await _serve(options, profile, agent, node_id, stop)
    finally:
        stop.set()
        await desk.stop()
        if child.poll() is None:
            child.terminate()
            try:
                await asyncio.wait_for(asyncio.shield(exited), 15)
            except TimeoutError:
                child.kill()
        with contextlib.suppress(Exception):
            await exited
    s = agent.stats
    log.info(
        "%s: %d check-ins, %d assignments, %d tasks (%d refused as stale), %d results sent",
        agent.device_id,
        s.checkins,
        s.assigned,
        s.tasks,
        s.stale_tasks,
        s.results_sent,
    )
    return code or int(child.returncode or 0)


async def _serve(
    options: argparse.Namespace,
    profile: NodeProfile,
    agent: NodeAgent,
    node_id: asyncio.Future[int],
    stop: asyncio.Event,
) -> int:
    stopped: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    either: set[asyncio.Future[Any]] = {node_id, stopped}
    done, _ = await asyncio.wait(either, timeout=NODE_ID_PATIENCE_S)
    if not done:
        log.warning(
            "%s: the SuperNode has not registered with its SuperLink after %.0f s; waiting",
            profile.device_id,
            NODE_ID_PATIENCE_S,
        )
        await asyncio.wait(either, return_when="FIRST_COMPLETED")
    stopped.cancel()
    if not node_id.done():
        return 0
    if options.enroll_token:
        agent.device_id = venn_device_id(profile.device_id, node_id.result())
        try:
            token = await enroll_until_done(
                options.gateway, options.enroll_token, agent.device_id, stop
            )
        except GatewayRefused as exc:
            log.error("%s", exc)
            return 2
        if token is None:
            return 0
        agent.token = token
    log.info(
        "%s: Flower node %d checks in to Venn as %s",
        profile.device_id,
        node_id.result(),
        agent.device_id,
    )
    await agent.run(stop)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    options, flower_args = parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=options.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return asyncio.run(run(options, flower_args))


if __name__ == "__main__":
    sys.exit(main())
