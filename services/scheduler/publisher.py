"""What a scheduler worker sends besides its status: the decisions its handlers return and
the dead letters of the records it cannot use, through one `Send` (in a worker, the
decider's outbox, sent once the cycle's table rows are durable:
`services.scheduler.inputs`)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from services.scheduler import metrics
from services.scheduler.letters import WrittenLetters
from venn import events as ev
from venn.broker import topics
from venn.broker.publish import dead_letter as dead_letter_of
from venn.broker.publish import message
from venn.broker.stream import Record

Send = Callable[[str, bytes, bytes], None]
"""(topic, key, value): queue one message."""


class Publisher:
    def __init__(self, send: Send, letters: WrittenLetters) -> None:
        self.send = send
        self.letters = letters

    def publish(self, out: ev.Event) -> None:
        """A decision: an Assignment or AssignmentBatch (venn.assignments), the
        CheckinsDeclined of a batch (venn.replies, to its gateway), or a registration's
        verdict (venn.jobs)."""
        if isinstance(out, ev.CheckinsDeclined):
            self.send(topics.REPLIES, out.reply_to.encode(), ev.encode(out))
            return
        if isinstance(out, ev.JobAdmission):  # a registration's verdict
            self.send(topics.JOBS, *message(topics.JOBS, out))
            return
        key, value = message(topics.ASSIGNMENTS, out)
        self.send(topics.ASSIGNMENTS, key, value)
        if isinstance(out, ev.AssignmentBatch):
            metrics.ASSIGNMENTS.inc(len(out.assignments))
        else:
            metrics.ASSIGNMENTS.inc()

    def dead_letter(
        self, record: Record, reason: str, kind: str, now: float, item: int = -1
    ) -> None:
        """One letter for ``record`` (``item`` >= 0: for that check-in of its batch), unless
        one of the same id was written already (a record replayed after a restart)."""
        topic = record.topic
        letter = dead_letter_of(
            record.value,
            f"{reason} (source topic {topic})",
            topic,
            record.partition,
            record.offset,
            now,
        )
        if item >= 0:  # one bad check-in of a batch: its own id, stable across replays
            letter = msgspec.structs.replace(letter, event_id=f"{letter.event_id}:{item}")
        if not self.letters.first_time(letter.event_id):
            metrics.DUPLICATES.labels(topics.DEAD_LETTERS).inc()
            return
        self.send(topics.DEAD_LETTERS, *message(topics.DEAD_LETTERS, letter))
        metrics.DEAD_LETTERS.labels(topic).inc()
        metrics.DEAD_LETTER_REASONS.labels(topic, kind).inc()
