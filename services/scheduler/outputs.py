"""The scheduler's assignments, their ids and the draws behind them, in both modes.

An assignment's id is fixed by the check-in and the round it went to, so a replay that
decides the same publishes the same id (read back once), and one that decides otherwise
a distinct one."""

from __future__ import annotations

import hashlib

from venn import events as ev
from venn.fields import BATCH_MAX


def uniform_of(event_id: str) -> float:
    """A deterministic U(0,1) draw per event, so a replayed check-in decides the same."""
    digest = hashlib.blake2b(event_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def assignment(
    checkin_id: str,
    device_id: str,
    job_id: str,
    round_index: int,
    task_url: str,
    speed_ms_per_sample: float,
    bandwidth_kbps: float,
    now: float,
) -> ev.Assignment:
    return ev.Assignment(
        event_id=f"asg:{checkin_id}:{job_id}:{round_index}",
        time=now,
        job_id=job_id,
        round_index=round_index,
        device_id=device_id,
        task_url=task_url,
        speed_ms_per_sample=speed_ms_per_sample,
        bandwidth_kbps=bandwidth_kbps,
        checkin_id=checkin_id,
    )


def assignment_batch(
    source_id: str, job_id: str, items: list[ev.Assignment], now: float
) -> ev.AssignmentBatch:
    """The assignments a check-in batch ``source_id`` gave one job."""
    return ev.AssignmentBatch(
        event_id=f"asgb:{source_id}:{job_id}", time=now, job_id=job_id, assignments=items
    )


BATCH_ENVELOPE_BYTES = 1024
"""More than an AssignmentBatch's bytes besides its items (type, ids, time, brackets)."""


def assignment_batches(
    source_id: str, job_id: str, items: list[ev.Assignment], now: float, max_bytes: int
) -> list[ev.AssignmentBatch]:
    """The assignments check-ins ``source_id`` gave one job, in as many AssignmentBatches
    as keep each within ``max_bytes`` encoded (the limit every reader decodes with) and
    BATCH_MAX items: the first with `assignment_batch`'s id, the next ones with ``:<k>``
    after it (the same assignments, the same ids)."""
    room = max(max_bytes - BATCH_ENVELOPE_BYTES, 1)
    chunks: list[list[ev.Assignment]] = [[]]
    used = 0
    for item in items:
        size = len(ev.encode(item)) + 1  # and its comma
        if chunks[-1] and (used + size > room or len(chunks[-1]) >= BATCH_MAX):
            chunks.append([])
            used = 0
        chunks[-1].append(item)
        used += size
    first = assignment_batch(source_id, job_id, chunks[0], now)
    return [first] + [
        ev.AssignmentBatch(
            event_id=f"{first.event_id}:{k}", time=now, job_id=job_id, assignments=chunk
        )
        for k, chunk in enumerate(chunks[1:], start=1)
    ]
