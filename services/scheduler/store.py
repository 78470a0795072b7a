"""The scheduler store: the port through which `SchedulerState` keeps what must survive its
worker, and the in-memory implementation. The Faust one (tables with changelogs, as the
workers run) is `services.scheduler.tables.FaustStore`; one conformance suite runs against
both (tests/broker/test_store_conformance.py).

Two kinds of rows, both plain JSON values (dicts of str, numbers, bools, None and lists),
each holding the ``partition`` of the job it belongs to:
- job rows: job_id -> the job's snapshot and flags (`SchedulerState._save`);
- round rows: key -> one assignment batch or one result of a job's open round, written
  once and deleted when the round ends (`services.scheduler.rows`).

A store hands back every row it holds for the partitions this worker owns, as stored; a
row it could not read back comes as a value that is not a dict (`tables.UNREADABLE`), for
the state to skip and count. Writes of one job's rows are made while handling an event of
that job's partition (the Faust store writes its changelog there).
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Protocol

Row = dict[str, Any]


class SchedulerStore(Protocol):
    def job_rows(self) -> list[tuple[object, object]]:
        """(job id, row) of every job row of the owned partitions."""
        ...

    def put_job(self, job_id: str, row: Row) -> None: ...

    def round_rows(self) -> list[tuple[object, object]]:
        """(key, row) of every round row of the owned partitions."""
        ...

    def put_round(self, key: str, row: Row) -> None: ...

    def delete_rounds(self, keys: Iterable[str]) -> None:
        """Delete these round rows; a key not stored is ignored."""
        ...


@dataclass
class MemoryStore:
    """Rows in two mappings of this process (for the pure tests, the benchmarks and the
    simulator-side checks): nothing outlives the process, and every row is owned."""

    jobs: MutableMapping[str, Any] = field(default_factory=dict)
    rounds: MutableMapping[str, Any] = field(default_factory=dict)

    def job_rows(self) -> list[tuple[object, object]]:
        return list(self.jobs.items())

    def put_job(self, job_id: str, row: Row) -> None:
        self.jobs[job_id] = row

    def round_rows(self) -> list[tuple[object, object]]:
        return list(self.rounds.items())

    def put_round(self, key: str, row: Row) -> None:
        self.rounds[key] = row

    def delete_rounds(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.rounds.pop(key, None)
