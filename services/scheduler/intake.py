"""One input topic's records, as the stream port (`venn.broker.stream`) gives them: each
decoded strictly (or by a fast path that can vouch for it), checked, deduplicated, handed
to the topic's handler, and what the handler returns published. Every record ends with an
`Outcome` for the offset ledger; one that cannot be used is dead-lettered or skipped as
`venn.broker.stream.judge` says, and the records after it are handled all the same.

No Faust here: the worker's agents feed `Intake` through `venn.broker.faust_adapter.serve`.
"""

from __future__ import annotations

import dataclasses
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

Handler = Callable[[Any, int, float], Any]
"""(event, partition, now) -> None, an event to publish, or a list of them."""

Decoded = ev.Event | CheckinColumns
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
    ) -> None:
        self.topic = topic
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
        # (venn.checkin_columns); our own assignment batches read back as the events we
        # sent when the bytes are the same; anything else strictly, as one event.
        self.quick: Callable[[Any], Decoded | None] | None = None
        if topic == topics.CHECKINS:
            self.quick = partial(checkin_columns, cache=attrs_cache, max_bytes=max_bytes)
        elif topic == topics.ASSIGNMENTS:
            self.quick = state.sent.take

    def __call__(self, record: Record) -> Outcome:
        now = time.time()
        decoded: Decoded | None = None
        state = self.state
        try:
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
            stale = state.stale_checkins
            out = self.handle(decoded, record.partition, now)
            outcome: Outcome = "handled"
            if state.stale_checkins - stale >= checkins_of(decoded) > 0:
                outcome = "dropped_stale"
            state.recent.add(decoded.event_id)
            self.processed.inc()
            for item in out if isinstance(out, list) else [out] if out is not None else []:
                self.publisher.publish(item)
            return outcome
        except Exception as exc:  # an agent that dies stops the whole pipeline
            self._reject(exc, record, decoded, now)
            return "dead_lettered"

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
