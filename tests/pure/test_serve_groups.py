"""`serve` (venn/broker/faust_adapter.py) on a stand-in stream: a group waiting for a
record that `fetched_behind` promised is handled even when that record never comes (Faust
skips a queued record of an older generation or of a suspended flow)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from venn.broker import faust_adapter
from venn.broker.faust_adapter import serve
from venn.broker.ledger import OffsetLedger
from venn.broker.stream import Record


@dataclass
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None = None
    timestamp: float = 0.0
    timestamp_type: int = 0


@dataclass
class Event:
    message: Message
    value: bytes


class OneThenSilence:
    """Yields one record, then waits forever (the next was skipped)."""

    def __init__(self) -> None:
        self.first = Event(Message("venn.checkins", 0, 7), b"{}")

    async def events(self) -> AsyncIterator[Event]:
        yield self.first
        await asyncio.Event().wait()


async def test_a_group_whose_next_record_never_comes_is_handled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def always_behind(stream: Any, topic: str) -> bool:
        return True

    monkeypatch.setattr(faust_adapter, "fetched_behind", always_behind)
    ledger = OffsetLedger()
    ledger.begin("venn.checkins", 0, 7)
    handled: list[list[Record]] = []

    def handle(group: list[Record]) -> list[Any]:
        handled.append(group)
        return ["handled"] * len(group)

    task = asyncio.create_task(serve(OneThenSilence(), ledger, handle))  # type: ignore[arg-type]
    try:
        for _ in range(100):
            if handled:
                break
            await asyncio.sleep(0.02)
        assert [[r.offset for r in g] for g in handled] == [[7]]
        assert ledger.next_offset("venn.checkins", 0) == 8
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
