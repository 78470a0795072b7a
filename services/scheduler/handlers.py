"""The handler of each input topic: what a decoded event does to the state, with the
decision metrics. (event, now) -> None, an event to publish, or a list of them
(`services.scheduler.intake.Handler`)."""

from __future__ import annotations

from services.scheduler import metrics
from services.scheduler.intake import Handler
from services.scheduler.state import SchedulerState
from venn import events as ev
from venn.broker import topics
from venn.checkin_columns import CheckinColumns

IGNORED = (topics.ASSIGNMENTS, topics.REVOCATIONS, topics.REPLIES, topics.STATUS)
"""Read here only to dead-letter a bad record once (topics.DEAD_LETTER_OWNER): the
scheduler's own outputs, which it never reads back, and revocations, which every worker
applies from its own reader (follow_revocations)."""


class TopicHandlers:
    def __init__(self, state: SchedulerState) -> None:
        self.state = state

    def by_topic(self) -> dict[str, Handler]:
        """The handler of every topic the worker reads."""
        return {
            topics.JOBS: self.state.on_job_event,
            topics.ROUNDS: self.on_round,
            topics.RESULTS: self.state.on_result,
            topics.CHECKINS: self.decide,
            **dict.fromkeys(IGNORED, ignore),
        }

    def decide(
        self, event: ev.Event | CheckinColumns, now: float
    ) -> list[ev.Event] | ev.Assignment | None:
        """venn.checkins: a supply report, a check-in or a batch of them."""
        state = self.state
        if isinstance(event, ev.SupplyReport):
            state.on_supply_report(event, now)
            return None
        if isinstance(event, ev.CheckinBatch | CheckinColumns):
            return self.decide_batches([event], now)
        stale = state.stale_checkins
        metrics.CHECKINS.inc()
        assert isinstance(event, ev.DeviceCheckin)
        out = state.on_checkin(event, now)
        metrics.STALE_CHECKINS.inc(state.stale_checkins - stale)
        if out is None:
            metrics.DECLINED.inc()
        return out

    def decide_batches(
        self, batches: list[ev.CheckinBatch | CheckinColumns], now: float
    ) -> list[ev.Event]:
        """venn.checkins: check-in batches read together, decided as one."""
        state = self.state
        stale = state.stale_checkins
        checkins = sum(
            len(b.checkins) if isinstance(b, ev.CheckinBatch) else len(b) for b in batches
        )
        metrics.CHECKINS.inc(checkins)
        metrics.BATCHES_PER_DECISION.observe(len(batches))
        out = state.on_checkin_batches(batches, now)
        metrics.STALE_CHECKINS.inc(state.stale_checkins - stale)
        decided = sum(len(o.assignments) for o in out if isinstance(o, ev.AssignmentBatch))
        metrics.DECLINED.inc(checkins - decided)
        return out

    def on_round(self, event: ev.Event, now: float) -> None:
        """venn.rounds: a round closed or a job finished."""
        closed = self.state.on_round_event(event, now)
        if closed and isinstance(event, ev.RoundClosed):  # a second close is not counted
            metrics.ROUND_OUTCOMES.labels(event.outcome).inc()
            metrics.ROUND_FILL.observe(event.sched_delay_s)


def ignore(event: ev.Event, now: float) -> None:
    return None
