"""The scheduler's state machine: decoded events in, core calls, table rows and events out.
No Kafka here; the decider's loop (`services.scheduler.inputs`) feeds it and publishes what
it returns once the rows are durable.

Its parts, each over its own data: the ``jobs`` table (`jobs.JobRows`), the open rounds'
rows (`rounds.OpenRounds`), the supply it plans with (`supply.SupplyBook`), the clocks of
silent jobs and overdue devices (`liveness.Liveness`) and the check-in decisions
(`checkins.Checkins`). Every effect of an event or a decision (an assignment, a removal, a
result, an expiry) is in the core and in the tables when its handler returns, before the
next event: nothing waits to be read back."""

from __future__ import annotations

import logging

from services.scheduler import metrics
from services.scheduler.admission import RegistrationJudge
from services.scheduler.checkins import Checkins
from services.scheduler.dedupe import RecentIds
from services.scheduler.estimates import Estimates
from services.scheduler.jobs import JobRows
from services.scheduler.liveness import Liveness
from services.scheduler.outputs import assignment, assignment_batches
from services.scheduler.rounds import OpenRounds
from services.scheduler.store import SchedulerStore
from services.scheduler.supply import SupplyBook
from venn import events as ev
from venn.auth import Tokens
from venn.auth.checks import tenant_of
from venn.broker.stream import Refused
from venn.checkin_columns import CheckinColumns
from venn.core import make_scheduler
from venn.core.admission import Limits
from venn.core.model import JobSpec, Requirement
from venn.core.scheduler import Scheduler
from venn.core.tenants import TenantConfig
from venn.settings import SchedulerSettings

log = logging.getLogger(__name__)


class SchedulerState:
    def __init__(
        self,
        config: SchedulerSettings,
        store: SchedulerStore,
        tenants: TenantConfig | None = None,
        max_bytes: int = ev.DEFAULT_MAX_BYTES,
        now: float = 0.0,
        answer_wait_s: float | None = None,
        limits: Limits | None = None,
        tokens: Tokens | None = None,
    ) -> None:
        self.config = config
        self.tenants = tenants
        self.store = store
        self.recent = RecentIds(config.dedupe_window)
        self.jobs = JobRows(store)
        self.rounds = OpenRounds(store)
        self.judge = RegistrationJudge(limits or Limits(), tenants, tokens)
        """The operator's limits, judged as each registration is applied."""
        self.supply = SupplyBook(now, tokens, config.supply_max_rate)
        self.liveness = Liveness(config.job_timeout_s)
        self.checkins = Checkins(
            config, self.liveness, self.supply, self.rounds, max_bytes, answer_wait_s
        )
        self.core = self._new_core()
        self.estimates = Estimates()
        """The completion estimates of its snapshots (`services.scheduler.status`)."""
        self.unreadable_rows = 0
        """Table rows skipped at a rebuild: not rows, or not restorable."""
        self.loaded = False

    def _new_core(self) -> Scheduler:
        # Supply comes as counts: gateways report what they receive (most of which they
        # answer themselves); check-ins no gateway counted are counted here (``direct``).
        return make_scheduler(
            self.config.policy, seed=self.config.seed, supply_reports=True, tenants=self.tenants
        )

    # -- rebuild -----------------------------------------------------------------------
    def rebuild(self, now: float) -> None:
        """A new core from the tables (this worker just became the decider)."""
        self.core = self._new_core()
        self.supply.restart(now)
        live = self.jobs.load(self.core, now, self._unreadable)
        applied = self.rounds.load(self.core, now, self._unreadable)
        self.liveness.clear(live, now)
        self.loaded = True
        metrics.REBUILDS.inc()
        log.info(
            "scheduler core rebuilt: %d jobs, %d removed, %d rows of open rounds",
            len(live),
            len(self.jobs.removed),
            applied,
        )

    def held_assignments(self, now: float) -> list[ev.AssignmentBatch]:
        """What the restored rows say devices hold, for a new decider to publish again: its
        predecessor may have died after the rows were durable and before the assignments
        went out. Each keeps its id, so a reader that had it takes it once."""
        by_round: dict[tuple[str, int], list[ev.Assignment]] = {}
        for job_id, rnd, item in self.rounds.held(self.core):
            checkin_id = item.assignment_id.removeprefix("asg:").removesuffix(f":{job_id}:{rnd}")
            by_round.setdefault((job_id, rnd), []).append(
                assignment(
                    checkin_id,
                    item.device_id,
                    job_id,
                    rnd,
                    self.config.task_url(job_id, rnd),
                    item.speed_ms_per_sample,
                    item.bandwidth_kbps,
                    item.time or now,
                )
            )
        max_bytes = self.checkins.max_bytes
        return [
            batch
            for (job_id, rnd), items in by_round.items()
            for batch in assignment_batches(f"held:{rnd}:{now:.3f}", job_id, items, now, max_bytes)
        ]

    def ensure_loaded(self, now: float) -> None:
        if not self.loaded:
            self.rebuild(now)

    def invalidate(self) -> None:
        """The tables may have changed under this worker: rebuild before the next event."""
        self.loaded = False

    def _unreadable(self, table: str, key: object) -> None:
        self.unreadable_rows += 1
        metrics.UNREADABLE_ROWS.labels(table).inc()
        log.error("cannot restore %s row %r; skipped", table, key)

    # -- venn.jobs ---------------------------------------------------------------------
    def on_job_event(self, event: ev.Event, now: float) -> ev.JobAdmission | None:
        """A job event the intake admitted (its token checked); a registration's verdict
        to publish."""
        if isinstance(event, ev.JobAdmission):
            return None  # a decision (the job API's, or this one's verdict read back)
        core = self.core
        job_id = getattr(event, "job_id", "")
        if not isinstance(event, ev.JobExpired):
            self.liveness.heard_of(job_id, now)
        if isinstance(event, ev.JobHeartbeat):
            self.jobs.known(core, job_id)
        elif isinstance(event, ev.JobExpired):
            if self.jobs.known(core, job_id):
                self._remove(job_id)
        elif isinstance(event, ev.JobRegistered):
            return self._register(event, now)
        elif isinstance(event, ev.RoundRequested):
            # A round asks at most the demand its job was admitted with: the limits count
            # that (a round of 1,000 on a job registered with 1 passed every cap).
            view = core.round_view(job_id)
            if self.jobs.known(core, job_id) and core.request_round(
                job_id, event.round_index, now, min(event.demand, view.demand if view else 0)
            ):
                self._end_round_rows(job_id)
                self.jobs.save(core, job_id)
        elif isinstance(event, ev.JobCancelled) and (
            core.round_view(job_id) is not None or job_id not in self.jobs.removed
        ):
            # A job cancelled while the job API still queued it was never registered here:
            # its tombstone keeps a registration that crossed the cancel from running it.
            self._remove(job_id)
        return None

    def _register(self, event: ev.JobRegistered, now: float) -> ev.JobAdmission | None:
        """Apply a registration if it keeps every limit (`services.scheduler.admission`);
        its verdict either way (a retry's is the first one's)."""
        job_id = event.job_id
        if self.jobs.registered(job_id):
            first = self.jobs.submit_token(job_id)
            if event.submit_token and first and event.submit_token != first:
                # A second submission under a taken id, not a retry of the first.
                raise Refused(f"job id {job_id!r} is already registered")
            return self.judge.verdict(event, self.jobs, now)
        spec = JobSpec(
            job_id,
            Requirement.of(event.requirement),
            event.demand,
            event.rounds,
            event.deadline_s,
            arrival=event.time,
            workload_s=event.workload_s,
            tenant=tenant_of(event),
            priority=event.priority or 0,
        )
        problem = self.judge.problem(self.core, spec)
        if problem is not None:
            self.jobs.refuse(job_id, event, f"{problem.reason}: {problem.detail}")
            metrics.REFUSED.labels(problem.reason).inc()
        elif self.core.add_job(spec, now):
            self.jobs.save(
                self.core, job_id, submit_token=event.submit_token, registration=event.event_id
            )
        return self.judge.verdict(event, self.jobs, now)

    def _remove(self, job_id: str) -> None:
        self.liveness.gone(job_id)
        self.core.remove_job(job_id)
        self._end_round_rows(job_id)
        self.jobs.remove(self.core, job_id)

    def _end_round_rows(self, job_id: str) -> None:
        self.liveness.round_ended(self.core, self.rounds.end(job_id))

    def expire_silent_jobs(self, now: float) -> list[tuple[str, float]]:
        """Remove every live job silent past the timeout, now: (job id, last seen) of each,
        for the caller to announce (`services.scheduler.expiry`). Its demand is released
        before the next decision."""
        found = self.liveness.silent(self.core, now)
        for job_id, _ in found:
            self._remove(job_id)
        return found

    # -- venn.rounds -------------------------------------------------------------------
    def on_round_event(self, event: ev.Event, now: float) -> bool:
        """Apply a round close or a job's end; True when the close counted: the first of
        its attempt, whether it ends the open round or overtook its own request (then no
        round opens for it) or came after a newer request had ended its round."""
        core = self.core
        job_id = getattr(event, "job_id", "")
        self.liveness.heard_of(job_id, now)
        if isinstance(event, ev.RoundClosed):
            if not self.jobs.known(core, job_id):
                return False
            view = core.round_view(job_id)
            was_open = (
                view is not None and view.round_open and view.round_index == event.round_index
            )
            results = self.rounds.good_results(job_id, event.round_index) if was_open else []
            closed = core.close_round(
                job_id,
                event.round_index,
                now,
                event.outcome == "succeeded",
                tiers=[r.tier for r in results],
                response_times=[r.response_time_s for r in results],
            )
            if closed:
                if was_open:
                    self._end_round_rows(job_id)
                self.jobs.save(core, job_id)
            return bool(closed)
        if isinstance(event, ev.JobFinished) and self.jobs.known(core, job_id):
            self._remove(job_id)
        return False

    # -- venn.results ------------------------------------------------------------------
    def on_result(self, event: ev.Event, now: float) -> None:
        assert isinstance(event, ev.DeviceResult)
        core = self.core
        if not self.jobs.known(core, event.job_id):
            return
        if core.holder(event.device_id) != (event.job_id, event.round_index):
            return  # late or duplicate: the device no longer holds this assignment
        core.release_device(event.device_id)
        self.liveness.released(event.device_id)
        self.rounds.result(
            event.job_id, event.round_index, event.device_id, event.ok, event.response_time_s
        )

    # -- venn.checkins -----------------------------------------------------------------
    def on_supply_report(self, event: ev.SupplyReport, now: float) -> None:
        if not self.supply.report(self.core, event, now):
            metrics.UNVOUCHED_REPORTS.inc()

    def on_checkin(self, event: ev.DeviceCheckin, now: float) -> ev.Assignment | None:
        return self.checkins.one(self.core, event, now)

    def on_checkin_batches(
        self, batches: list[ev.CheckinBatch | CheckinColumns], now: float
    ) -> list[ev.Event]:
        return self.checkins.batches(self.core, batches, now)

    def on_checkin_batch(
        self, batch: ev.CheckinBatch | CheckinColumns, now: float
    ) -> list[ev.Event]:
        return self.on_checkin_batches([batch], now)

    @property
    def stale_checkins(self) -> int:
        return self.checkins.stale

    # -- after a cycle -----------------------------------------------------------------
    def settle(self) -> None:
        """The end of a cycle of events: persist the tier restrictions the core changed
        on other jobs' events."""
        if self.loaded:
            self.jobs.save_changed_tiers(self.core)
