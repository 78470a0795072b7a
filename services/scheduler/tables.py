"""The Faust implementation of the scheduler store (`services.scheduler.store`): the tables
``jobs``, ``round`` and ``decided``, each a `DecisionTable` (venn.broker.faust_adapter) with its
changelog ``<app_id>-<table>-changelog``. Faust restores them when this worker is given
their partitions, and keeps a standby's copies filled.

A row goes to the changelog partition of its key, so one key's writes stay in order
whatever the event that caused them; the decider owns every partition, so every row it
hands back is its own."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import faust

from services.scheduler.store import Rows
from venn.broker import topics
from venn.broker.faust_adapter import DecisionTable


class FaustStore:
    def __init__(self, jobs: DecisionTable, rounds: DecisionTable, decided: DecisionTable) -> None:
        self.jobs = jobs
        self.rounds = rounds
        self.decided = decided

    @classmethod
    def create(cls, app: faust.App, partitions: int) -> FaustStore:
        tables = [
            DecisionTable(app, name=name, partitions=partitions) for name in topics.SCHEDULER_TABLES
        ]
        for table in tables:
            app.tables.add(table)
        jobs, rounds, decided = tables
        return cls(jobs, rounds, decided)

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
        await asyncio.gather(self.jobs.durable(), self.rounds.durable(), self.decided.durable())
