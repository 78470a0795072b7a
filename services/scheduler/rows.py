"""The scheduler's table rows, typed, and their bytes.

Two tables (`services.scheduler.store`):
- ``jobs``: job_id -> `JobRow`, the job's core snapshot (taken when its round starts or
  ends, or its tier restriction changes) and its tombstone once removed, so that a replay
  cannot bring it back.
- ``round``: the open rounds, in rows written once and deleted when the round ends:
  ``a:<AssignmentBatch id>`` -> `AssignmentsRow` (what one decision gave one job) and
  ``r:<job>:<round>:<device>`` -> `ResultRow` (one device's result). A round so costs one
  write per decision and per result, not a job row rewritten on each (O(demand^2)).

Keys and values are JSON (keys as JSON strings), the format the tables have had since
they were Faust's JSON tables, so that a worker reads the rows an older one wrote; the
field ``partition`` those carried is ignored. A value that is not a row of its kind is
`Unreadable`: a rebuild skips and counts it, never stops on it.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from venn import fields
from venn.core.snapshot import SNAPSHOT_VERSION, JobSnapshot


class Unreadable(ValueError):
    """A stored key or value that is not a row of its table."""


class JobRow(msgspec.Struct, kw_only=True, frozen=True):
    core: JobSnapshot | None = None
    """None only on a tombstone of a job removed before it was known here."""
    removed: bool = False
    submit_token: str | None = None
    """The token of the submission that registered it: a retry carries the same one."""
    registration: str | None = None
    """The event id of the registration judged (its verdict names it)."""
    refused: str | None = None
    """Why the scheduler refused the registration (a limit it would pass); the row is then
    a tombstone: a replay or a retry is refused the same way."""


class AssignedItem(msgspec.Struct, frozen=True, array_like=True):
    """One assignment of a decision, with its device's tier."""

    assignment_id: str
    device_id: str
    tier: int
    active: bool
    """False when the device was released before the row was written; kept so that a
    rebuild does not count it busy."""
    speed_ms_per_sample: float = 0.0
    bandwidth_kbps: float = 0.0
    time: float = 0.0
    """The device's speed and bandwidth as it checked in, and when it was assigned: a
    successor publishes the same assignment again (rows written before these fields say
    0; the time is then the successor's)."""


class TierResult(msgspec.Struct, frozen=True, array_like=True):
    """A good result: the device's tier and its response time."""

    tier: int
    response_time_s: float


class AssignmentsRow(msgspec.Struct, kw_only=True, frozen=True):
    """``a:<batch>``: the assignments one decision gave one job's round."""

    job: str
    round: int
    items: Annotated[list[AssignedItem], msgspec.Meta(max_length=fields.BATCH_MAX)]


class ResultRow(msgspec.Struct, kw_only=True, frozen=True):
    """``r:<job>:<round>:<device>``: a device's result (None: it failed)."""

    job: str
    round: int
    device: str
    result: TierResult | None


RoundRow = AssignmentsRow | ResultRow

_encode = msgspec.json.Encoder().encode
_job_row = msgspec.json.Decoder(JobRow)
_assignments_row = msgspec.json.Decoder(AssignmentsRow)
_result_row = msgspec.json.Decoder(ResultRow)
_key = msgspec.json.Decoder(str)


def key_bytes(key: str) -> bytes:
    return _encode(key)


def key_of(raw: object) -> str:
    """A stored key back as a str."""
    if not isinstance(raw, bytes):
        raise Unreadable(f"a key of type {type(raw).__name__}")
    try:
        return _key.decode(raw)
    except msgspec.DecodeError as exc:
        raise Unreadable(f"key {raw[:40]!r}: {exc}") from None


def encode_row(row: JobRow | RoundRow) -> bytes:
    return _encode(row)


def assignments_key(batch_id: str) -> str:
    return f"a:{batch_id}"


def result_key(job_id: str, round_index: int, device_id: str) -> str:
    return f"r:{job_id}:{round_index}:{device_id}"


def decode_job_row(raw: object) -> JobRow:
    """A stored job row; `Unreadable` if it is not one of this snapshot version."""
    if not isinstance(raw, bytes):
        raise Unreadable(f"a job row of type {type(raw).__name__}")
    try:
        row = _job_row.decode(raw)
    except msgspec.DecodeError as exc:
        raise Unreadable(f"job row: {exc}") from None
    if row.core is not None and row.core.version != SNAPSHOT_VERSION:
        raise Unreadable(f"a job snapshot of version {row.core.version}")
    return row


def decode_round_row(key: str, raw: object) -> RoundRow:
    """A stored round row, by its key's prefix; `Unreadable` if it is not one."""
    if not isinstance(raw, bytes):
        raise Unreadable(f"round row {key!r} of type {type(raw).__name__}")
    try:
        if key.startswith("a:"):
            return _assignments_row.decode(raw)
        if key.startswith("r:"):
            return _result_row.decode(raw)
    except msgspec.DecodeError as exc:
        raise Unreadable(f"round row {key!r}: {exc}") from None
    raise Unreadable(f"round row {key!r}: not an a: or r: key")
