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
    # Beside `venn up`: the stack's coordinator credentials and a token minted with its
    # secret; elsewhere VENN_KAFKA_USER/VENN_KAFKA_PASSWORD and VENN_JOB_TOKEN.
    settings = Settings.from_env().for_role("coordinator")
    token = job_token(settings, ["example-job"], owner="example")
    options = settings.kafka_options
    async with VennClient(bootstrap, token=token, kafka_options=options) as venn:
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
