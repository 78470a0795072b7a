"""The scheduler store: the port through which the scheduler keeps what must survive its
worker, and the in-memory implementation. The Faust one (tables with changelogs, as the
workers run) is `services.scheduler.tables.FaustStore`; one conformance suite runs against
both (tests/broker/test_store_conformance.py).

Three tables of bytes: ``jobs`` and ``round`` (`services.scheduler.rows` says what their
keys and values are), and ``decided``: per check-in partition, the offset after the last
check-in whose decision the other two hold (`services.scheduler.inputs`).

Writes take effect in the store at once; `durable` returns once every write made so far
would survive the worker (the Faust store: the broker has acknowledged its changelog
records). The decider calls it before it publishes what the
writes decided (`services.scheduler.inputs`).
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Protocol

Rows = list[tuple[object, object]]
"""(key, value) as stored: bytes, unless the store holds something else under a key."""


class SchedulerStore(Protocol):
    def job_rows(self) -> Rows: ...

    def put_job(self, key: bytes, row: bytes) -> None: ...

    def round_rows(self) -> Rows: ...

    def put_round(self, key: bytes, row: bytes) -> None: ...

    def delete_rounds(self, keys: Iterable[bytes]) -> None:
        """Delete these round rows; a key not stored is ignored."""
        ...

    def decided_rows(self) -> Rows: ...

    def put_decided(self, key: bytes, row: bytes) -> None: ...

    async def durable(self) -> None:
        """Return once every write so far would survive this worker's death."""
        ...


@dataclass
class MemoryStore:
    """Rows in mappings of this process (the pure tests, the benchmarks): nothing
    outlives the process, so every write is as durable as it gets at once."""

    jobs: MutableMapping[bytes, object] = field(default_factory=dict)
    rounds: MutableMapping[bytes, object] = field(default_factory=dict)
    decided: MutableMapping[bytes, object] = field(default_factory=dict)

    def job_rows(self) -> Rows:
        return list(self.jobs.items())

    def put_job(self, key: bytes, row: bytes) -> None:
        self.jobs[key] = row

    def round_rows(self) -> Rows:
        return list(self.rounds.items())

    def put_round(self, key: bytes, row: bytes) -> None:
        self.rounds[key] = row

    def delete_rounds(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            self.rounds.pop(key, None)

    def decided_rows(self) -> Rows:
        return list(self.decided.items())

    def put_decided(self, key: bytes, row: bytes) -> None:
        self.decided[key] = row

    async def durable(self) -> None:
        return None
