"""Assignment batches a worker published and has not read back yet: the read-back on the
job's partition (`SchedulerState.on_assignment`) of exactly the bytes it sent needs no
decode. Bounded by bytes; past the bound the oldest go first, and their read-back is then
decoded strictly."""

from __future__ import annotations

from venn import events as ev

SENT_MAX_BYTES = 32 << 20
"""About 800 batches of 128 assignments."""
SENT_PREFIX = b'{"type":"assignment_batch",'
SENT_ID = b'"event_id":"'


class SentBatches:
    def __init__(self, max_bytes: int = SENT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.batches: dict[str, tuple[bytes, ev.AssignmentBatch]] = {}
        """id -> (bytes, event), oldest first."""
        self.bytes = 0

    def clear(self) -> None:
        self.batches.clear()
        self.bytes = 0

    def add(self, event: ev.AssignmentBatch, value: bytes) -> None:
        """``event`` was published as ``value``."""
        batches = self.batches
        while batches and self.bytes + len(value) > self.max_bytes:
            # Not read back (partitions moved, or far behind).
            old, _ = batches.pop(next(iter(batches)))
            self.bytes -= len(old)
        previous = batches.pop(event.event_id, None)
        if previous is not None:
            self.bytes -= len(previous[0])
        batches[event.event_id] = (value, event)
        self.bytes += len(value)

    def take(self, raw: bytes | None) -> ev.AssignmentBatch | None:
        """The batch published as exactly ``raw``, once; None: decode ``raw`` strictly."""
        if not raw or not raw.startswith(SENT_PREFIX):
            return None
        # The batch's own id follows its assignments: the last "event_id" in the bytes.
        start = raw.rfind(SENT_ID)
        end = raw.find(b'"', start + len(SENT_ID)) if start >= 0 else -1
        if end < 0:
            return None
        try:
            event_id = raw[start + len(SENT_ID) : end].decode()
        except UnicodeDecodeError:
            return None
        found = self.batches.get(event_id)
        if found is None or found[0] != raw:
            return None
        del self.batches[event_id]
        self.bytes -= len(raw)
        return found[1]
