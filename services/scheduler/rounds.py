"""The ``round`` table as the scheduler keeps it: each job's open round, as the rows that
hold its decisions and results (`services.scheduler.rows`), written when they happen and
deleted when the round ends. On a rebuild each job's snapshot is restored first, then the
rows of its open round are applied again: assignments adopted, then released where a
result came, which restores the remaining demand and the devices still busy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from services.scheduler.rows import (
    AssignedItem,
    AssignmentsRow,
    ResultRow,
    RoundRow,
    TierResult,
    Unreadable,
    assignments_key,
    decode_round_row,
    encode_row,
    key_bytes,
    key_of,
    result_key,
)
from services.scheduler.store import SchedulerStore
from venn.core.scheduler import Scheduler

Skip = Callable[[str, object], None]


@dataclass
class OpenRound:
    """What the ``round`` table holds of one job's open round."""

    round_index: int
    keys: list[bytes] = field(default_factory=list)
    """Rows to delete when the round ends."""
    tiers: dict[str, int | None] = field(default_factory=dict)
    """Device -> its capacity tier while it holds an assignment (None: released)."""
    items: dict[str, AssignedItem] = field(default_factory=dict)
    """Device -> the assignment it was given (`held` announces them again)."""
    results: dict[str, TierResult | None] = field(default_factory=dict)
    """Device -> its good result, None for a failure."""


class OpenRounds:
    def __init__(self, store: SchedulerStore) -> None:
        self.store = store
        self.rounds: dict[str, OpenRound] = {}

    def load(self, core: Scheduler, now: float, skip: Skip) -> int:
        """Apply the rows of every live job's open round to ``core`` (restored from the
        job rows first); how many rows applied."""
        self.rounds.clear()
        rows: list[tuple[bytes, RoundRow]] = []
        for raw_key, raw in self.store.round_rows():
            try:
                rows.append((raw_key, decode_round_row(key_of(raw_key), raw)))  # type: ignore[arg-type]
            except Unreadable:
                skip("round", raw_key)
        # Assignments before results: a result releases a device its assignment made busy.
        rows.sort(key=lambda kv: isinstance(kv[1], ResultRow))
        return sum(self._reapply(core, key, row, now) for key, row in rows)

    def _reapply(self, core: Scheduler, key: bytes, row: RoundRow, now: float) -> int:
        view = core.round_view(row.job)
        if view is None or not view.round_open or view.round_index != row.round:
            return 0  # a row of an ended round whose delete did not land: ignore it
        open_round = self.of(row.job, row.round)
        open_round.keys.append(key)
        if isinstance(row, AssignmentsRow):
            for item in row.items:
                open_round.tiers[item.device_id] = item.tier if item.active else None
                open_round.items[item.device_id] = item
                if core.adopt(row.job, row.round, item.device_id, now) and not item.active:
                    core.release_device(item.device_id)
        else:
            open_round.results[row.device] = row.result
            core.release_device(row.device)
        return 1

    def of(self, job_id: str, round_index: int) -> OpenRound:
        """The job's open round ``round_index`` (a newer index starts it afresh)."""
        found = self.rounds.get(job_id)
        if found is None or found.round_index != round_index:
            found = self.rounds[job_id] = OpenRound(round_index)
        return found

    def assigned(
        self, job_id: str, round_index: int, batch_id: str, items: list[AssignedItem]
    ) -> None:
        """One decision's assignments to the job's round: one row."""
        open_round = self.of(job_id, round_index)
        for item in items:
            open_round.tiers[item.device_id] = item.tier if item.active else None
            open_round.items[item.device_id] = item
        key = key_bytes(assignments_key(batch_id))
        open_round.keys.append(key)
        row = AssignmentsRow(job=job_id, round=round_index, items=items)
        self.store.put_round(key, encode_row(row))

    def result(
        self, job_id: str, round_index: int, device_id: str, ok: bool, response_time_s: float
    ) -> None:
        """A result of a device that held an assignment of the job's open round."""
        open_round = self.rounds.get(job_id)
        if open_round is None or open_round.round_index != round_index:
            return  # no row of this round: nothing to record
        tier = open_round.tiers.get(device_id)
        result = TierResult(tier, response_time_s) if ok and tier is not None else None
        open_round.results[device_id] = result
        key = key_bytes(result_key(job_id, round_index, device_id))
        open_round.keys.append(key)
        row = ResultRow(job=job_id, round=round_index, device=device_id, result=result)
        self.store.put_round(key, encode_row(row))

    def held(self, core: Scheduler) -> list[tuple[str, int, AssignedItem]]:
        """(job, round, assignment) of every device that still holds what its open round
        gave it."""
        return [
            (job_id, open_round.round_index, item)
            for job_id, open_round in self.rounds.items()
            for device, item in open_round.items.items()
            if core.holder(device) == (job_id, open_round.round_index)
        ]

    def good_results(self, job_id: str, round_index: int) -> list[TierResult]:
        open_round = self.rounds.get(job_id)
        if open_round is None or open_round.round_index != round_index:
            return []
        return [r for r in open_round.results.values() if r is not None]

    def end(self, job_id: str) -> list[str]:
        """Delete the rows of the job's round, which ended; the devices it had assigned."""
        open_round = self.rounds.pop(job_id, None)
        if open_round is None:
            return []
        self.store.delete_rounds(open_round.keys)
        return list(open_round.tiers)
