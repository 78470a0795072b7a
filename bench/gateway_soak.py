"""Does the gateway's memory grow with every flood of check-ins (a leak), or stop at a
high-water mark? (issue 26, item 10: RSS 69 -> 124 MB over three floods, and it stayed.)

    .venv/bin/python -m bench.gateway_soak                # 6 floods of 20 s, about 3 minutes
    .venv/bin/python -m bench.gateway_soak --floods 10 --flood-s 30

A stack of its own (`devtools.stack.Stack`: one Apache Kafka broker, a scheduler worker
and one gateway process, `python -m services.gateway`), with no job: every check-in is
answered "no_open_round" at once and counted as supply, the path of a flood. Each flood
sends check-ins from `--concurrency` connections for `--flood-s` seconds, each from a
device id not seen before (the gateway remembers the ids of check-ins it answered:
`LATE_MEMORY`); then the gateway idles `--idle-s`. The gateway's RSS (VmRSS of /proc) is
sampled after each flood and each idle.
Prints one JSON line per flood and writes docs/results/bench/gateway_soak.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import preamble
from devtools.stack.local import Stack
from venn.net import free_port
from venn.settings import GatewaySettings, Settings

ROOT = Path(__file__).resolve().parents[1]

JSON_OUT = ROOT / "docs" / "results" / "bench" / "gateway_soak.json"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


async def wait_ready(http: aiohttp.ClientSession, url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            async with http.get(f"{url}/healthz") as r:
                body = await r.json()
                if r.status == 200 and body["demand_view_ready"]:
                    return
        except (aiohttp.ClientError, OSError):
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError("the gateway never became ready")


async def flood(
    http: aiohttp.ClientSession, url: str, seconds: float, concurrency: int, first: int
) -> tuple[dict[str, int], int]:
    """Check-ins from new device ids for ``seconds``; answers by status and reason."""
    counts: dict[str, int] = {}
    end = time.monotonic() + seconds
    next_id = first

    async def one_connection() -> None:
        nonlocal next_id
        while time.monotonic() < end:
            next_id += 1
            body = {"device_id": f"soak-{next_id}", "attrs": {"ram": 4},
                    "speed_ms_per_sample": 1, "bandwidth_kbps": 2}  # fmt: skip
            try:
                async with http.post(f"{url}/v1/checkin", json=body) as r:
                    payload = await r.json()
                    key = f"{r.status} {payload.get('reason', payload.get('error'))}"
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                key = type(exc).__name__
            counts[key] = counts.get(key, 0) + 1

    await asyncio.gather(*(one_connection() for _ in range(concurrency)))
    return counts, next_id


async def soak(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    # A stack of its own (Apache Kafka, no jobs: every check-in is answered at once), no
    # authentication: the gateway's memory, not its tokens, is what is measured.
    settings = Settings(
        broker_kind="kafka", run_dir=str(workdir), gateway=GatewaySettings(port=free_port())
    )
    stack = Stack(settings, recorder=False, secure=False)
    await asyncio.to_thread(stack.up)
    gateway = stack.processes["gateway"]
    url = stack.url
    rows: list[dict[str, Any]] = []
    try:
        connector = aiohttp.TCPConnector(limit=args.concurrency)
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
            await wait_ready(http, url)
            idle_rss = rss_mb(gateway.pid)
            print(json.dumps({"started_rss_mb": round(idle_rss, 1)}), flush=True)
            sent = 0
            for i in range(args.floods):
                start = time.monotonic()
                counts, sent = await flood(http, url, args.flood_s, args.concurrency, sent)
                took = time.monotonic() - start
                after_flood = rss_mb(gateway.pid)
                await asyncio.sleep(args.idle_s)
                row = {
                    "flood": i + 1,
                    "checkins": sum(counts.values()),
                    "rate_per_s": round(sum(counts.values()) / took),
                    "answers": counts,
                    "devices_so_far": sent,
                    "rss_after_flood_mb": round(after_flood, 1),
                    "rss_after_idle_mb": round(rss_mb(gateway.pid), 1),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        await asyncio.to_thread(stack.down)
    return {"started_rss_mb": round(idle_rss, 1), "floods": rows, "options": vars(args)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--floods", type=int, default=6)
    parser.add_argument("--flood-s", type=float, default=20.0)
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    preamble("gateway_soak")
    with tempfile.TemporaryDirectory(prefix="venn-soak-") as tmp:
        result = asyncio.run(soak(args, Path(tmp)))
    if not args.no_write:
        JSON_OUT.parent.mkdir(parents=True, exist_ok=True)
        JSON_OUT.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
