"""The Faust implementation of the scheduler store (`services.scheduler.store`): two tables
with changelogs, ``jobs`` and ``round``, one changelog partition per input partition.

The scheduler's Faust tables store their rows as JSON and read them back with
`RowCodec`, which never raises: a changelog record that is not a row (not UTF-8, not JSON,
nested past the parser's limit, or one that Faust would rebuild as one of its models)
comes back as `UNREADABLE`, and the state skips and counts it (`SchedulerState`).

Faust decodes a changelog record before any Venn code sees it; one that failed to decode
stopped table recovery for good, so a worker never became ready again (issue 26)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any

import faust
from faust.serializers import codecs

from services.scheduler.store import Row

CODEC = "venn_row"
UNREADABLE = "\x00unreadable"
"""What a key or value that is not a row reads back as."""


class RowCodec(codecs.json):  # type: ignore[misc]
    def _loads(self, s: bytes) -> Any:
        try:
            value = super()._loads(s)
        except (UnicodeDecodeError, ValueError, RecursionError):
            return UNREADABLE
        if isinstance(value, dict) and "__faust" in value:
            return UNREADABLE  # Faust would look it up as a model of its registry
        return value


codecs.register(CODEC, RowCodec())


class RowTable(faust.Table):  # type: ignore[misc]
    """A table whose keys and values go through `RowCodec`."""

    def _serializer_from_type(self, typ: Any) -> str:
        return CODEC


def readable(key: object, row: object) -> bool:
    """False for a row that did not decode (its key or its value)."""
    return isinstance(key, str) and key != UNREADABLE and isinstance(row, dict)


Owned = Callable[[], Collection[int] | None]
"""The partitions this worker holds now (None: all)."""


class FaustStore:
    """The scheduler store in two `RowTable`s. Faust's memory store keeps the rows of
    partitions taken away from this worker: only rows of ``owned`` partitions are read
    (a row that did not decode is handed back whatever its partition, to be counted).
    Writes go to the changelog partition of the event being handled (Faust's rule)."""

    def __init__(self, jobs: faust.Table, rounds: faust.Table, owned: Owned) -> None:
        self.jobs = jobs
        self.rounds = rounds
        self.owned = owned

    @classmethod
    def create(cls, app: faust.App, partitions: int, owned: Owned) -> FaustStore:
        """The tables ``jobs`` and ``round`` of ``app`` (changelogs
        ``<app_id>-jobs-changelog`` and ``<app_id>-round-changelog``)."""
        jobs, rounds = (
            RowTable(app, name=name, key_type=str, partitions=partitions, beacon=app.tables.beacon)
            for name in ("jobs", "round")
        )
        app.tables.add(jobs)
        app.tables.add(rounds)
        return cls(jobs, rounds, owned)

    def _owned_rows(self, table: faust.Table) -> list[tuple[object, object]]:
        owned = self.owned()
        return [
            (key, row)
            for key, row in list(table.items())
            if owned is None or not readable(key, row) or row.get("partition") in owned
        ]

    def job_rows(self) -> list[tuple[object, object]]:
        return self._owned_rows(self.jobs)

    def put_job(self, job_id: str, row: Row) -> None:
        self.jobs[job_id] = row

    def round_rows(self) -> list[tuple[object, object]]:
        return self._owned_rows(self.rounds)

    def put_round(self, key: str, row: Row) -> None:
        self.rounds[key] = row

    def delete_rounds(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.rounds.pop(key, None)
