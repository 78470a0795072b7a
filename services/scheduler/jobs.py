"""The ``jobs`` table as the scheduler keeps it: each job's row (its core snapshot) and the
tombstones of removed jobs (`services.scheduler.rows.JobRow`).

A job's snapshot is written when its round starts or ends, when it is registered or
removed, and when its round's tier restriction changed (the core lifts one when a
competitor opens a round, on another job's event): what a rebuild needs besides the open
round's rows (`services.scheduler.rounds`)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from services.scheduler.rows import (
    JobRow,
    Unreadable,
    decode_job_row,
    encode_row,
    key_bytes,
    key_of,
)
from services.scheduler.store import SchedulerStore
from venn import events as ev
from venn.broker.stream import Refused
from venn.core.scheduler import Scheduler
from venn.core.snapshot import restore_job, snapshot_of

Skip = Callable[[str, object], None]
"""(table, key) of a row that cannot be restored: skipped and counted."""


class JobRows:
    def __init__(self, store: SchedulerStore) -> None:
        self.store = store
        self.rows: dict[str, JobRow] = {}
        self.removed: set[str] = set()
        self.live: set[str] = set()

    def load(self, core: Scheduler, now: float, skip: Skip) -> list[str]:
        """Restore every job of the table into ``core``; the live jobs' ids."""
        self.rows.clear()
        self.removed.clear()
        self.live.clear()
        for raw_key, raw in self.store.job_rows():
            try:
                job_id = key_of(raw_key)
                row = decode_job_row(raw)
            except Unreadable:
                skip("jobs", raw_key)
                continue
            if row.removed:
                self.removed.add(job_id)
            elif row.core is None or row.core.spec.job_id != job_id:
                skip("jobs", job_id)
                continue
            else:
                try:
                    restore_job(core, row.core, now)
                except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
                    skip("jobs", job_id)  # one bad row must not block every later event
                    continue
                self.live.add(job_id)
            self.rows[job_id] = row
        return sorted(self.live)

    def known(self, core: Scheduler, job_id: str) -> bool:
        """True for a live job, False for a removed one; `Refused` for a never-seen one."""
        if core.round_view(job_id) is not None:
            return True
        if job_id in self.removed:
            return False
        raise Refused(f"unknown job {job_id!r}")

    def submit_token(self, job_id: str) -> str | None:
        row = self.rows.get(job_id)
        return row.submit_token if row is not None else None

    def registered(self, job_id: str) -> bool:
        return job_id in self.rows

    def save(self, core: Scheduler, job_id: str, **changes: object) -> None:
        """Write the job's row: its snapshot now (the last one it had if it is not live),
        with ``changes`` (``removed``, ``submit_token``)."""
        old = self.rows.get(job_id, JobRow())
        snapshot = snapshot_of(core, job_id)
        row = msgspec.structs.replace(old, core=snapshot or old.core, **changes)
        self.rows[job_id] = row
        if row.removed:
            self.live.discard(job_id)
        else:
            self.live.add(job_id)
        self.store.put_job(key_bytes(job_id), encode_row(row))

    def refuse(self, job_id: str, event: ev.JobRegistered, reason: str) -> None:
        """Tombstone a registration refused for a limit: a replay or a retry of it is
        refused again, never admitted later."""
        self.removed.add(job_id)
        row = JobRow(
            removed=True,
            submit_token=event.submit_token,
            registration=event.event_id,
            refused=reason,
        )
        self.rows[job_id] = row
        self.store.put_job(key_bytes(job_id), encode_row(row))

    def remove(self, core: Scheduler, job_id: str) -> None:
        """Tombstone a job ``core`` has just removed."""
        self.removed.add(job_id)
        self.save(core, job_id, removed=True)

    def save_changed_tiers(self, core: Scheduler) -> int:
        """Write the rows of live jobs whose round's tier restriction differs from their
        stored snapshot's; how many."""
        changed = []
        for job_id in self.live:
            view = core.round_view(job_id)
            stored = self.rows[job_id].core
            if view is not None and stored is not None and stored.tier != view.tier:
                changed.append(job_id)
        for job_id in changed:
            self.save(core, job_id)
        return len(changed)
