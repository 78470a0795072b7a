"""The report each example run writes when it ends, and the checks over a set of them:
which node served which run, and where a node served two runs at once.

Pure (reading and writing one JSON file aside).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import msgspec


@dataclass(frozen=True)
class Task:
    """One message a node worked on: when the ServerApp sent it, and when the node began
    and ended the work, as the node timed it (wall clock).

    A node holds a run from ``sent`` to ``end``. flwr 1.42's SuperNode handles one message
    at a time (`supernode/start_client_internal.py`, `_push_messages` waits for the reply
    before the next pull), so two runs never compute on a node at the same instant: a node
    shared by two runs shows as one run's message waiting while the node works for the
    other, which these intervals catch.
    """

    device: str
    server_round: int
    phase: str
    sent: float
    start: float
    end: float


@dataclass(frozen=True)
class VennRound:
    phase: str
    server_round: int
    round_index: int
    assigned: list[str]
    replied: list[str]
    outcome: str
    opened_at: float
    started_at: float
    closed_at: float | None
    source: str = "venn"
    """"venn" (Venn chose the nodes) or "flower" (sampled by the run, Venn unreachable)."""
    close_s: float = 0.0
    """How long telling Venn of the round's close took."""
    replacements: list[int] = field(default_factory=list)
    """Attempts that replaced nodes which left mid-round."""
    dispatched: dict[str, float] = field(default_factory=dict)
    """Node name -> when its message was sent (a node that joined the round later, later)."""


@dataclass
class RunReport:
    name: str
    scheduler: str
    """"venn" (Venn picks the nodes) or "flower" (Flower's random sampling)."""
    job_id: str
    started: float
    finished: float
    accuracy: list[float]
    """Centralized test accuracy after each round (index 0: the initial model)."""
    tasks: list[Task] = field(default_factory=list)
    failed_replies: int = 0
    venn_rounds: list[VennRound] = field(default_factory=list)

    @property
    def completion_s(self) -> float:
        return self.finished - self.started

    @property
    def final_accuracy(self) -> float:
        return self.accuracy[-1] if self.accuracy else 0.0

    def write(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> RunReport:
        return msgspec.json.decode(path.read_bytes(), type=cls)


@dataclass(frozen=True)
class Overlap:
    device: str
    runs: tuple[str, str]
    seconds: float


def overlaps(reports: list[RunReport]) -> list[Overlap]:
    """Every pair of tasks of two different runs that one node held at once (sent to
    ended)."""
    found = []
    tagged = [(r.name, t) for r in reports for t in r.tasks]
    for i, (run_a, a) in enumerate(tagged):
        for run_b, b in tagged[i + 1 :]:
            if run_a == run_b or a.device != b.device:
                continue
            both = min(a.end, b.end) - max(a.sent, b.sent)
            if both > 0:
                found.append(Overlap(a.device, (run_a, run_b), both))
    return found


def tasks_overlapping(reports: list[RunReport]) -> int:
    """How many tasks shared their node with a task of another run for some time (sent
    to ended)."""
    hit: set[int] = set()
    tagged = [(r.name, t) for r in reports for t in r.tasks]
    for i, (run_a, a) in enumerate(tagged):
        for j, (run_b, b) in enumerate(tagged):
            same_node = i < j and run_a != run_b and a.device == b.device
            if same_node and min(a.end, b.end) > max(a.sent, b.sent):
                hit.update((i, j))
    return len(hit)


def unassigned_work(report: RunReport) -> list[tuple[int, str]]:
    """(server round, device) of every task Venn had not assigned to the run's round."""
    assigned: dict[tuple[str, int], set[str]] = {}
    for r in report.venn_rounds:
        if r.outcome:
            assigned.setdefault((r.phase, r.server_round), set()).update(r.assigned)
    return [
        (t.server_round, t.device)
        for t in report.tasks
        if t.device not in assigned.get((t.phase, t.server_round), set())
    ]


def served(reports: list[RunReport]) -> dict[str, dict[str, int]]:
    """Run name -> device -> tasks it worked on."""
    table: dict[str, dict[str, int]] = {}
    for r in reports:
        counts = table.setdefault(r.name, {})
        for t in r.tasks:
            counts[t.device] = counts.get(t.device, 0) + 1
    return table
