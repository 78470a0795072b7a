"""The gateway's copy of the scheduler's latest status snapshot: follows venn.status (a
compacted topic, read from its beginning with a group-less consumer) and keeps the newest
`SchedulerStatus` it decodes. A record that is not a snapshot is skipped and counted, never
the end of the feed."""

from __future__ import annotations

import time
from collections.abc import Callable

from venn.broker import topics
from venn.broker.follow import TopicFollower
from venn.core.status import SchedulerStatus, decode_status
from venn.events import InvalidEvent
from venn.settings import Settings

MAX_SKEW_S = 30.0
"""A snapshot dated further ahead of this gateway's clock is refused: kept as the newest,
it would hide every real one for as long as the topic keeps it."""


class StatusFeed(TopicFollower):
    topic = topics.STATUS
    max_records = 100

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.latest: SchedulerStatus | None = None
        self.bad_records = 0
        self.on_update: Callable[[SchedulerStatus], None] | None = None
        """Called with each snapshot that becomes the newest."""

    def offer(self, raw: bytes | None, now: float | None = None) -> None:
        """Keep the snapshot in ``raw`` if it is newer than the one held (and not dated in
        the future)."""
        if raw is None:
            return
        try:
            status = decode_status(raw)
        except InvalidEvent:
            # Skipped and counted; the scheduler, which writes venn.status, dead-letters it
            # (topics.DEAD_LETTER_OWNER): it reads it in a consumer group, so one letter
            # however many gateways read the record and however often they restart.
            self.bad_records += 1
            return
        if status.time > (time.time() if now is None else now) + MAX_SKEW_S:
            self.bad_records += 1
            return
        if self.latest is None or status.time >= self.latest.time:
            self.latest = status
            if self.on_update is not None:
                self.on_update(status)
