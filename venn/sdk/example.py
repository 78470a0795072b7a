"""Smallest useful job owner: one job, one round, first results, then finish.

python -m venn.sdk.example [BOOTSTRAP]   (default: the stack of VENN_RUN_DIR, else VENN_BROKER)
"""

from __future__ import annotations

import asyncio
import math
import sys
import time

from venn.auth.local import job_token
from venn.sdk import VennClient
from venn.settings import Settings


async def main(bootstrap: str) -> None:
    demand, rounds = 5, 1
    # VENN_JOB_TOKEN, or one minted with the stack's secret when run beside `venn up`.
    token = job_token(Settings.from_env(), ["example-job"], owner="example")
    async with VennClient(bootstrap, token=token) as venn:
        arrival = time.time()
        await venn.register_job("example-job", {"cpu_f": 1}, demand, rounds, deadline_s=300)
        await venn.request_round("example-job", 0, demand)
        needed = math.ceil(0.8 * demand)
        ok = 0
        async for result in venn.results("example-job"):
            ok += result.ok
            print(f"{result.device_id}: ok={result.ok} in {result.response_time_s:.0f}s")
            if ok >= needed:
                break
        now = time.time()
        await venn.close_round(
            "example-job", 0, "succeeded", demand=demand, assigned=demand, results=ok,
            opened_at=arrival, closed_at=now,
        )  # fmt: skip
        await venn.finish_job(
            "example-job", rounds_completed=rounds, arrival=arrival, finished_at=now
        )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else Settings.from_env().broker))
