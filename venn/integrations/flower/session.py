"""A Venn job driven from synchronous code: Flower's Strategy API is synchronous and the
SDK (`venn.sdk.VennClient`) is asyncio, so the client lives on its own event-loop thread
and every call here waits for its coroutine there.

One session serves one job: register it, then per round attempt request devices and take
the assignments until the demand is met or the wait ends, close the attempt with what came
back, and finish (or cancel) the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from venn.core.round_tally import RoundTally
from venn.events import RoundClosed
from venn.sdk import VennClient

log = logging.getLogger("venn.flower")

T = TypeVar("T")


@dataclass(frozen=True)
class VennJob:
    """A Flower run as a Venn job.

    ``demand`` nodes are asked for per training round (``evaluate_demand`` per federated
    evaluation round; 0: no federated evaluation); a round starts once its demand is met,
    or after ``wait_s`` with at least ``min_nodes`` nodes; fewer after ``wait_s`` fail the
    attempt and it is asked for again. ``deadline_s`` is the round deadline Venn is told.
    """

    job_id: str
    requirement: Mapping[str, float]
    demand: int
    min_nodes: int = 1
    evaluate_demand: int = 0
    wait_s: float = 60.0
    deadline_s: float = 300.0
    workload_s: float = 30.0

    def __post_init__(self) -> None:
        if not 1 <= self.min_nodes <= self.demand:
            raise ValueError(f"min_nodes must be in 1..demand ({self.demand}): {self.min_nodes}")
        if self.evaluate_demand < 0:
            raise ValueError("evaluate_demand must be >= 0")
        if self.evaluate_demand and self.min_nodes > self.evaluate_demand:
            raise ValueError("min_nodes must not exceed evaluate_demand")

    def rounds(self, num_rounds: int) -> int:
        """Venn rounds of a run of ``num_rounds`` Flower rounds: one per phase that asks
        for nodes (training, and federated evaluation when ``evaluate_demand``)."""
        return num_rounds * (2 if self.evaluate_demand else 1)


@dataclass
class OpenRound:
    """A round attempt the session asked devices for and has not closed."""

    tally: RoundTally
    opened_at: float
    started_at: float | None = None
    devices: list[str] = field(default_factory=list)
    """The devices handed to the round (its first ``demand`` assignments)."""


class VennSession:
    """One job's conversation with Venn, callable from any thread."""

    def __init__(self, client: VennClient, job: VennJob) -> None:
        self.client = client
        self.job = job
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"venn-{job.job_id}", daemon=True
        )
        self._open: OpenRound | None = None
        self._changed: asyncio.Event | None = None
        self._follower: asyncio.Task[None] | None = None
        self.arrival = 0.0
        self.closed: list[RoundClosed] = []
        self.assignments_seen = 0

    # -- lifecycle ---------------------------------------------------------------------
    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self, rounds: int) -> None:
        """Start the client and register the job with ``rounds`` rounds."""
        self._thread.start()
        self._call(self._start(rounds))

    async def _start(self, rounds: int) -> None:
        self._changed = asyncio.Event()
        await self.client.start()
        self.arrival = time.time()
        job = self.job
        await self.client.register_job(
            job.job_id,
            dict(job.requirement),
            job.demand,
            rounds,
            job.deadline_s,
            job.workload_s,
        )
        self._follower = asyncio.create_task(self._follow(), name="venn-flower-assignments")

    async def _follow(self) -> None:
        assert self._changed is not None
        async for assignment in self.client.assignments(self.job.job_id):
            self.assignments_seen += 1
            current = self._open
            if current is not None and current.tally.on_assignment(assignment, time.time()):
                self._changed.set()

    def stop(self) -> None:
        """Close the client and end the loop thread."""
        if not self._thread.is_alive():
            return
        try:
            self._call(self._stop(), timeout=30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    async def _stop(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower
        await self.client.close()

    # -- rounds ------------------------------------------------------------------------
    def acquire(self, round_index: int, demand: int) -> OpenRound:
        """Request round attempt ``round_index`` and wait for its devices: until ``demand``
        are assigned, or ``job.wait_s`` passed (the round may then have fewer)."""
        return self._call(self._acquire(round_index, demand))

    async def _acquire(self, round_index: int, demand: int) -> OpenRound:
        assert self._changed is not None
        opened = OpenRound(RoundTally(round_index, demand), time.time())
        self._open = opened
        await self.client.request_round(self.job.job_id, round_index, demand)
        until = asyncio.get_running_loop().time() + self.job.wait_s
        while opened.tally.remaining > 0:
            left = until - asyncio.get_running_loop().time()
            if left <= 0:
                break
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        opened.started_at = time.time()
        # In the order Venn assigned them; any beyond the demand (never expected) stay
        # out of the round and are released with its close.
        opened.devices = list(opened.tally.assigned)[:demand]
        return opened

    def close(
        self,
        opened: OpenRound,
        outcome: Literal["succeeded", "failed"],
        results: int,
        reason: str = "",
    ) -> RoundClosed:
        """Close a round attempt: Venn releases its devices and counts the round."""
        return self._call(self._close(opened, outcome, results, reason))

    async def _close(
        self,
        opened: OpenRound,
        outcome: Literal["succeeded", "failed"],
        results: int,
        reason: str,
    ) -> RoundClosed:
        now = time.time()
        started = opened.started_at or now
        t = opened.tally
        closed = await self.client.close_round(
            self.job.job_id,
            t.round_index,
            outcome,
            demand=t.demand,
            assigned=len(t.assigned),
            results=results,
            opened_at=opened.opened_at,
            closed_at=now,
            reason=reason,
            sched_delay_s=max(0.0, started - opened.opened_at),
            response_time_s=max(0.0, now - started),
        )
        if self._open is opened:
            self._open = None
        self.closed.append(closed)
        return closed

    def finish(self, rounds_completed: int) -> None:
        self._call(
            self.client.finish_job(
                self.job.job_id,
                rounds_completed=rounds_completed,
                arrival=self.arrival,
                finished_at=time.time(),
            )
        )

    def cancel(self, reason: str) -> None:
        self._call(self.client.cancel_job(self.job.job_id, reason))
