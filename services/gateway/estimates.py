"""Completion estimates for submissions with ``finish_by``, off the gateway's process.

An estimate (`venn.core.admission.estimate_submission`, the fluid model of the IRS plan
over 16 scenarios of later arrivals) costs a pass over every job the scheduler's snapshot
holds per job completion it models: 2.8 s of CPU for the 2,000 jobs of
tests/broker/test_gateway_hostile.py (7.3 s before the model read its jobs as columns).
Run on the event loop, it held every check-in of the gateway that long (issue 34, item 3).
Here it runs in one worker process of its own (started at the first estimate,
niced), one at a time, with at most `ESTIMATES_WAITING` submissions waiting for it (more:
429 ``busy``). A thread was not enough: it shares the interpreter lock with the event
loop, and on a loaded machine check-ins were shed 429 ``overloaded`` while it ran. The
snapshot is sent to the worker (immutable; a new one replaces it).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from venn.core.admission import Request, estimate_submission
from venn.core.estimate import Band
from venn.core.status import SchedulerStatus

ESTIMATES_WAITING = 2
"""Submissions waiting for an estimate (the one being made included) beyond which another
is answered 429 ``busy``."""
ESTIMATE_TIMEOUT_S = 60.0
"""Longest a submission waits for its estimate (then 429 ``busy``; the worker finishes it)."""
WORKER_NICE = 10
"""The worker yields the CPU to the gateway's own process on a busy machine."""


class EstimatesBusy(Exception):
    """No room for another estimate now, or it did not finish in time."""


def _lower_priority() -> None:
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICE)


class Estimates:
    def __init__(self) -> None:
        self.pool: ProcessPoolExecutor | None = None
        self.waiting = 0

    def _pool(self) -> ProcessPoolExecutor:
        if self.pool is None:
            # forkserver: the gateway has threads (Kafka clients, the spec readers), which
            # a plain fork would copy mid-flight.
            context = multiprocessing.get_context("forkserver")
            self.pool = ProcessPoolExecutor(1, mp_context=context, initializer=_lower_priority)
        return self.pool

    async def completion(self, status: SchedulerStatus, req: Request) -> Band | None:
        """``req``'s estimated completion (P50 / P90) if admitted at the snapshot's time (None: it
        cannot finish at that supply); EstimatesBusy when none can be made now."""
        if self.waiting >= ESTIMATES_WAITING:
            raise EstimatesBusy("too many completion estimates being made; retry")
        self.waiting += 1
        try:
            made = asyncio.get_running_loop().run_in_executor(
                self._pool(), estimate_submission, status, req
            )
        except BrokenProcessPool:
            self.waiting -= 1
            self.pool = None  # the worker died: a new one next time
            raise EstimatesBusy("the estimate worker stopped; retry") from None

        def done(_: object) -> None:
            self.waiting -= 1

        made.add_done_callback(done)
        try:
            async with asyncio.timeout(ESTIMATE_TIMEOUT_S):
                return await asyncio.shield(made)  # the worker runs on; `done` counts it
        except TimeoutError:
            raise EstimatesBusy("the completion estimate did not finish in time; retry") from None
        except BrokenProcessPool:
            self.pool = None
            raise EstimatesBusy("the estimate worker stopped; retry") from None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None
