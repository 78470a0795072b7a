"""One input topic's records, as the stream port (`venn.broker.stream`) gives them: each
decoded strictly (or by a fast path that can vouch for it), checked, deduplicated, handed
to the topic's handler, and what the handler returns published. Every record ends with an
`Outcome` for the offset ledger; one that cannot be used is dead-lettered or skipped as
`venn.broker.stream.judge` says, and the records after it are handled all the same.

No Kafka here: the decider's loop (`services.scheduler.inputs`) feeds `Intake` the records
of one fetch, topic by topic.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from services.scheduler import metrics
from services.scheduler.publisher import Publisher
from services.scheduler.state import SchedulerState
from venn import events as ev
from venn.broker import topics
from venn.broker.ledger import Outcome
from venn.broker.stream import Check, Record, Refused, StreamStats, Unusable, judge, owned_by
from venn.checkin_columns import AttrsCache, CheckinColumns, checkin_columns
from venn.core.status import decode_status
from venn.fields import BATCH_MAX

log = logging.getLogger(__name__)

Handler = Callable[[Any, float], Any]
"""(event, now) -> None, an event to publish, or a list of them."""

Decoded = ev.Event | CheckinColumns
Together = Callable[[list[ev.CheckinBatch | CheckinColumns], float], list[ev.Event]]
"""(check-in batches read together, now) -> what deciding them as one publishes."""
OWNS = owned_by("scheduler")
CHECKED_TOPICS = (topics.JOBS, topics.ROUNDS)
"""Topics whose events need a token that allowed them (`venn.broker.stream.authorized`):
a forged event could register, cancel or close any job (issue 12, defect 4)."""


def checkins_of(event: Decoded) -> int:
    if isinstance(event, CheckinColumns):
        return len(event)
    if isinstance(event, ev.CheckinBatch):
        return len(event.checkins)
    return 1 if isinstance(event, ev.DeviceCheckin) else 0


class Intake:
    def __init__(
        self,
        topic: str,
        handle: Handler,
        state: SchedulerState,
        publisher: Publisher,
        authorize: Check,
        stats: StreamStats,
        max_bytes: int,
        attrs_cache: AttrsCache,
        together: Together | None = None,
    ) -> None:
        self.topic = topic
        self.together = together
        self.handle = handle
        self.state = state
        self.publisher = publisher
        self.authorize = authorize
        self.stats = stats
        self.max_bytes = max_bytes
        self.allowed = ev.ALLOWED_ON[topic]
        self.processed = metrics.EVENTS.labels(topic)
        self.duplicates = metrics.DUPLICATES.labels(topic)
        # Check-in batches as columns when the fast decoder can vouch for them
        # (venn.checkin_columns); anything else strictly, as one event.
        self.quick: Callable[[Any], Decoded | None] | None = None
        if topic == topics.CHECKINS:
            self.quick = partial(checkin_columns, cache=attrs_cache, max_bytes=max_bytes)

    def __call__(self, record: Record) -> Outcome:
        now = time.time()
        decoded: Decoded | None = None
        try:
            admitted = self._admit(record, now)
            if isinstance(admitted, str):
                return admitted
            decoded = admitted
            return self._apply(decoded, record, now)
        except Exception as exc:  # an agent that dies stops the whole pipeline
            self._reject(exc, record, decoded, now)
            return "dead_lettered"

    def many(self, records: list[Record]) -> list[Outcome]:
        """Records read together, each with its outcome. With ``together`` (venn.checkins),
        consecutive check-in batches are decided as one (``together``: one decision and
        one AssignmentBatch per job for all of them); anything else one by one."""
        if self.together is None or len(records) < 2:
            return [self(record) for record in records]
        now = time.time()
        outcomes: list[Outcome] = []
        group: list[tuple[int, Record, CheckinColumns]] = []
        for i, record in enumerate(records):
            outcomes.append("handled")  # set below, or when its group is decided
            decoded: Decoded | None = None
            try:
                admitted = self._admit(record, now)
                if isinstance(admitted, str):
                    outcomes[i] = admitted
                    continue
                decoded = admitted
                if any(decoded.event_id == cols.event_id for _, _, cols in group):
                    self.duplicates.inc()
                    outcomes[i] = "deduplicated"
                    continue
                if isinstance(decoded, ev.CheckinBatch | CheckinColumns):
                    cols = (
                        decoded
                        if isinstance(decoded, CheckinColumns)
                        else CheckinColumns.of(decoded)
                    )
                    if sum(len(c) for _, _, c in group) + len(cols) > BATCH_MAX:
                        self._decide_group(group, outcomes, now)
                    group.append((i, record, cols))
                    continue
                self._decide_group(group, outcomes, now)
                outcomes[i] = self._apply(decoded, record, now)
            except Exception as exc:
                self._reject(exc, record, decoded, now)
                outcomes[i] = "dead_lettered"
        self._decide_group(group, outcomes, now)
        return outcomes

    def _decide_group(
        self, group: list[tuple[int, Record, CheckinColumns]], outcomes: list[Outcome], now: float
    ) -> None:
        """Decide ``group``'s batches as one, set their outcomes, and empty it."""
        members = list(group)
        group.clear()
        if not members:
            return
        assert self.together is not None
        state = self.state
        out: list[ev.Event] | None = None
        if len(members) > 1:
            try:
                out = self.together([cols for _, _, cols in members], now)
            except Exception:
                log.exception("check-in batches decided together failed; deciding each alone")
        if out is None:  # one batch, or the group failed: each on its own
            for i, record, cols in members:
                try:
                    outcomes[i] = self._apply(cols, record, now)
                except Exception as exc:
                    self._reject(exc, record, cols, now)
                    outcomes[i] = "dead_lettered"
            return
        max_age = state.config.checkin_max_age_s
        for i, _, cols in members:
            state.recent.add(cols.event_id)
            self.processed.inc()
            stale = int(((now - cols.times) > max_age).sum())
            outcomes[i] = "dropped_stale" if stale >= len(cols) > 0 else "handled"
        for item in out:
            self.publisher.publish(item)

    def _admit(self, record: Record, now: float) -> Decoded | Outcome:
        """The record's event, checked, or its outcome if it needs no handling (a status
        snapshot, a replay)."""
        state = self.state
        state.ensure_loaded(now)
        if self.topic == topics.STATUS:  # read only to dead-letter a bad record
            decode_status(record.value)
            return "handled"
        decoded = self._decode(record, now)
        if self.topic in CHECKED_TOPICS:
            assert isinstance(decoded, ev.Event)
            self.authorize(decoded, record)
        if decoded.event_id in state.recent:
            self.duplicates.inc()
            return "deduplicated"
        return decoded

    def _apply(self, decoded: Decoded, record: Record, now: float) -> Outcome:
        """Hand one event to the topic's handler and publish what it returns."""
        state = self.state
        stale = state.stale_checkins
        out = self.handle(decoded, now)
        outcome: Outcome = "handled"
        if state.stale_checkins - stale >= checkins_of(decoded) > 0:
            outcome = "dropped_stale"
        state.recent.add(decoded.event_id)
        self.processed.inc()
        for item in out if isinstance(out, list) else [out] if out is not None else []:
            self.publisher.publish(item)
        return outcome

    def _decode(self, record: Record, now: float) -> Decoded:
        decoded: Decoded | None = None
        try:
            if self.quick is not None:
                decoded = self.quick(record.value)
            if decoded is None:
                decoded = ev.decode(record.value, self.allowed, self.max_bytes)
        except ev.InvalidEvent:
            decoded = self._salvage(record, now)
            if decoded is None:
                raise
        return decoded

    def _salvage(self, record: Record, now: float) -> ev.Event | None:
        """A check-in batch with bad items: dead-letter each of them, keep the rest."""
        if self.topic != topics.CHECKINS or record.value is None:
            return None
        salvaged = ev.salvage_checkins(record.value, self.max_bytes)
        if salvaged is None:
            return None
        batch, bad = salvaged
        for i, (item, exc) in enumerate(bad):
            one = dataclasses.replace(record, value=item)
            verdict = judge(one, exc, OWNS, self.stats)
            if verdict.send:
                reason = f"{verdict.reason} in a checkin_batch"
                self.publisher.dead_letter(one, reason, verdict.kind, now, i)
        return batch

    def _reject(self, exc: Exception, record: Record, decoded: Decoded | None, now: float) -> None:
        """A record the agent could not use: dead-lettered or skipped, as `judge` says."""
        verdict = judge(record, exc, OWNS, self.stats)
        if not verdict.send:
            return
        reason = verdict.reason
        if isinstance(exc, Refused | Unusable):  # a valid event: say which
            what = f"{decoded.type_name()} {decoded.event_id}" if decoded is not None else "event"
            reason = f"{reason} in {what}"
        self.publisher.dead_letter(record, reason, verdict.kind, now)
