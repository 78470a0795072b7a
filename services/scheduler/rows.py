"""The ``round`` table's rows: an open round's assignments and results, each written once.

Typed here and stored as plain JSON (``msgspec.to_builtins``): an assignment row holds a
batch's items as short arrays, ``[assignment id, device, tier, active]``, and a result row
a device's ``[tier, response time]`` (None for a failure).
"""

from __future__ import annotations

from typing import Any

import msgspec


class AssignedItem(msgspec.Struct, frozen=True, array_like=True):
    """One assignment read back: its device's tier, and whether the device still held it
    (False: released before it was read back; kept so that a replay is not counted)."""

    assignment_id: str
    device_id: str
    tier: int
    active: bool


class TierResult(msgspec.Struct, frozen=True, array_like=True):
    """A good result: the device's tier and its response time."""

    tier: int
    response_time_s: float


class AssignmentsRow(msgspec.Struct, kw_only=True, frozen=True):
    """``a:<batch>``: the assignments of one batch, read back on the job's partition."""

    partition: int
    job: str
    round: int
    items: list[AssignedItem]


class ResultRow(msgspec.Struct, kw_only=True, frozen=True):
    """``r:<job>:<round>:<device>``: a device's result (None: it failed)."""

    partition: int
    job: str
    round: int
    device: str
    result: TierResult | None


RoundRow = AssignmentsRow | ResultRow


def decode_round_row(key: str, raw: Any) -> RoundRow:
    """A stored row back as its type (by its key's prefix); ValueError if it is not one."""
    try:
        if key.startswith("a:"):
            return msgspec.convert(raw, AssignmentsRow)
        return msgspec.convert(raw, ResultRow)
    except msgspec.ValidationError as exc:
        raise ValueError(f"round row {key!r}: {exc}") from None
