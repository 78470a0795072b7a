"""Coordinators for many jobs on one VennClient: each job registers at its arrival, then
runs its rounds (request, collect, close at 80% of D or at the deadline) until done.

Times reported in RoundClosed/JobFinished are trace seconds of the shared TraceClock, so
JCTs are directly comparable with the simulator's.

A coordinator can be stopped (or killed) and started again: each job resumes where the log
says it stands (`services.coordinator.resume`): a finished job stays finished, a running
one continues at its next attempt index, an open attempt is waited for with the
assignments and results it already had.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from services.coordinator.ledger import RoundLedger
from services.coordinator.resume import Position, read_positions
from venn.auth.local import job_token, verifier
from venn.broker.stream import authorized
from venn.core.lifecycle import JobLife
from venn.core.model import JobSpec
from venn.core.round_tally import RoundTally
from venn.events import RoundClosed
from venn.sdk import TraceClock, VennClient
from venn.settings import Settings

log = logging.getLogger("venn.coordinator")

POLL_S = 0.25
"""How often a waiting job looks at the stop signal (wall seconds)."""


@dataclass
class JobProgress:
    """Live state of one job, handed to ``on_progress`` after every change."""

    job_id: str
    rounds: int
    demand: int
    state: str = "waiting"  # waiting | running | finished | cancelled | stopped
    rounds_done: int = 0
    attempt: int = 0
    assigned: int = 0
    results: int = 0
    assignments_total: int = 0
    jct_s: float | None = None


@dataclass
class JobOutcome:
    """What a job went through, for reports and the policy-fidelity comparison."""

    spec: JobSpec
    finished: bool = False
    arrival: float = 0.0
    finished_at: float | None = None
    jct_s: float | None = None
    closed: list[RoundClosed] = field(default_factory=list)
    extra_assignments: int = 0

    @property
    def attempts(self) -> int:
        return len(self.closed)


ProgressCallback = Callable[[JobProgress], None]


def compress_arrivals(jobs: Sequence[JobSpec], scale: float, first: float = 0.0) -> list[JobSpec]:
    """Jobs with arrivals moved so the first comes at ``first`` and gaps are ``scale`` x."""
    if not jobs:
        return []
    base = min(j.arrival for j in jobs)
    return [replace(j, arrival=first + (j.arrival - base) * scale) for j in jobs]


class JobCoordinator:
    """Runs one job's lifecycle through a shared client."""

    def __init__(
        self,
        client: VennClient,
        spec: JobSpec,
        clock: TraceClock,
        on_progress: ProgressCallback | None = None,
    ) -> None:
        self.client = client
        self.spec = spec
        self.clock = clock
        self.on_progress = on_progress
        self.progress = JobProgress(spec.job_id, spec.rounds, spec.demand)
        self.outcome = JobOutcome(spec)
        self.ledger: RoundLedger | None = None
        self._changed = asyncio.Event()

    def _report(self) -> None:
        if self.ledger is not None:
            self.progress.assigned = len(self.ledger.tally.assigned)
            self.progress.results = len(self.ledger.tally.ok)
        if self.on_progress is not None:
            self.on_progress(self.progress)

    async def _follow_assignments(self) -> None:
        async for a in self.client.assignments(self.spec.job_id):
            ledger = self.ledger
            if ledger is not None and ledger.tally.on_assignment(a, self.clock.now()):
                self.progress.assignments_total += 1
                self._report()
                if ledger.succeeded:  # a result that came before its assignment now counts
                    self._changed.set()

    async def _follow_results(self) -> None:
        async for r in self.client.results(self.spec.job_id):
            ledger = self.ledger
            if ledger is not None and ledger.tally.on_result(r):
                self._report()
                if ledger.succeeded:
                    self._changed.set()

    async def _wait_round(self, ledger: RoundLedger, stop: asyncio.Event) -> None:
        deadline = ledger.opened_at + self.spec.deadline
        while not ledger.succeeded and not stop.is_set():
            left = self.clock.wall_seconds(deadline - self.clock.now())
            if left <= 0:
                return
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, POLL_S))

    async def run(
        self, stop: asyncio.Event, position: Position | None = None, cancel_on_stop: bool = True
    ) -> JobOutcome:
        spec, client = self.spec, self.client
        life = position.life if position is not None else None
        if life is not None and life.ended:
            return self._ended(life)
        if life is not None and life.registered is not None:
            self.outcome.arrival = self.clock.trace_at(life.registered.time)
            client.subscribe(spec.job_id)
            client.keep_alive(spec.job_id)
        else:
            while not stop.is_set() and self.clock.now() < spec.arrival:
                left = self.clock.wall_seconds(spec.arrival - self.clock.now())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), min(left, POLL_S))
            if stop.is_set():
                return self.outcome
            self.outcome.arrival = self.clock.now()
            await client.register_job(
                spec.job_id,
                spec.requirement.as_dict(),
                spec.demand,
                spec.rounds,
                spec.deadline,
                spec.workload_s,
            )
        self.progress.state = "running"
        followers = [
            asyncio.create_task(self._follow_assignments()),
            asyncio.create_task(self._follow_results()),
        ]
        try:
            await self._rounds(stop, position, cancel_on_stop)
        finally:
            for task in followers:
                task.cancel()
            for task in followers:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return self.outcome

    def _ended(self, life: JobLife) -> JobOutcome:
        """A job the log says ended before this coordinator started."""
        self.outcome.closed = life.closes
        if life.finished is not None:
            self.outcome.finished = True
            self.outcome.arrival = life.finished.arrival
            self.outcome.finished_at = life.finished.finished_at
            self.outcome.jct_s = self.progress.jct_s = life.finished.jct_s
            self.progress.state = "finished"
        else:
            self.progress.state = "cancelled"
        self.progress.rounds_done = life.rounds_done
        self._report()
        return self.outcome

    def _resumed_ledger(self, position: Position | None) -> RoundLedger | None:
        """The open attempt's ledger rebuilt from the log, or None."""
        attempt = position.life.open_attempt if position is not None else None
        if position is None or attempt is None or attempt.requested_at is None:
            return None
        spec = self.spec
        opened_at = self.clock.trace_at(attempt.requested_at)
        tally = RoundTally(attempt.index, attempt.demand)
        for assignment in position.assignments:
            tally.on_assignment(assignment, self.clock.trace_at(assignment.time))
        for result in position.results:
            tally.on_result(result)
        return RoundLedger(spec.job_id, tally, spec.results_needed, opened_at)

    async def _rounds(
        self, stop: asyncio.Event, position: Position | None, cancel_on_stop: bool
    ) -> None:
        spec, client = self.spec, self.client
        resumed = self._resumed_ledger(position)
        if position is not None:
            self.outcome.closed = position.life.closes
            self.progress.rounds_done = position.life.rounds_done
        attempt = position.life.next_index if position is not None else 0
        if resumed is not None:
            attempt = resumed.round_index
        while self.progress.rounds_done < spec.rounds:
            ledger = resumed or RoundLedger(
                spec.job_id,
                RoundTally(attempt, spec.demand),
                spec.results_needed,
                self.clock.now(),
            )
            self.ledger = ledger
            self.progress.attempt = attempt
            self._report()
            if resumed is None:
                await client.request_round(spec.job_id, attempt, spec.demand)
            resumed = None
            await self._wait_round(ledger, stop)
            if stop.is_set() and not ledger.succeeded:
                if cancel_on_stop:
                    await client.cancel_job(spec.job_id, "coordinator stopped")
                    self.progress.state = "cancelled"
                else:
                    self.progress.state = "stopped"  # resumes when a coordinator restarts
                self._report()
                return
            closed = await client.close_round(
                spec.job_id, attempt, **ledger.closing(self.clock.now())
            )
            self.ledger = None
            self.outcome.closed.append(closed)
            self.outcome.extra_assignments += ledger.tally.extra_assignments
            if closed.outcome == "succeeded":
                self.progress.rounds_done += 1
            attempt += 1
        finished_at = self.clock.now()
        finished = await client.finish_job(
            spec.job_id,
            rounds_completed=self.progress.rounds_done,
            arrival=self.outcome.arrival,
            finished_at=finished_at,
        )
        self.outcome.finished = True
        self.outcome.finished_at = finished_at
        self.outcome.jct_s = finished.jct_s
        self.progress.state = "finished"
        self.progress.jct_s = finished.jct_s
        self._report()


async def run_coordinator(
    settings: Settings,
    jobs: Sequence[JobSpec],
    speedup: float,
    stop_event: asyncio.Event,
    on_progress: ProgressCallback | None = None,
    *,
    clock: TraceClock | None = None,
    cancel_on_stop: bool = True,
) -> dict[str, JobOutcome]:
    """Coordinate ``jobs`` (arrivals in trace seconds of ``clock``) until all are finished
    or ``stop_event`` is set (then unfinished jobs are cancelled, or, without
    ``cancel_on_stop``, left for the next coordinator to resume). Each job starts from
    where the log says it stands. Returns outcomes by job id.
    """
    clock = clock or TraceClock(speedup=speedup)
    token = job_token(settings, [spec.job_id for spec in jobs], owner="coordinator")
    options = settings.kafka_options
    async with VennClient(
        settings.broker,
        client_id="venn-coordinator",
        token=token,
        kafka_options=options,
        heartbeat_s=settings.job_heartbeat_s,
    ) as client:
        # After the client listens: whatever the log gets from now on reaches the client.
        check = authorized(verifier(settings, token))
        positions = await read_positions(
            settings.broker, [spec.job_id for spec in jobs], options, check
        )
        for job_id, position in positions.items():
            # The client hands on only results of assignments it saw: these it did not.
            client.adopt_assignments(job_id, position.assignments)
        coordinators = [JobCoordinator(client, spec, clock, on_progress) for spec in jobs]
        outcomes = await asyncio.gather(
            *(c.run(stop_event, positions.get(c.spec.job_id), cancel_on_stop) for c in coordinators)
        )
    return {o.spec.job_id: o for o in outcomes}
