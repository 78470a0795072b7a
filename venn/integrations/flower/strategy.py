"""`VennStrategy`: any Flower strategy, with Venn choosing the nodes of every round.

``configure_train``/``configure_evaluate`` request a Venn round and wait for its
assignments (demand met, or the wait over with enough nodes), map the assigned devices to
Flower node ids, and let the wrapped strategy build its messages over those nodes only
(`AssignedGrid`); each message is tagged with its Venn round, so the node's mod reports
its result to Venn. ``aggregate_train``/``aggregate_evaluate`` close the Venn round with
the replies that came back, then aggregate as the wrapped strategy does. ``start``
registers the run as a Venn job first and finishes (or, on an error, cancels) it after.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from venn.integrations.flower.directory import NodeDirectory
from venn.integrations.flower.grid import AssignedGrid
from venn.integrations.flower.protocol import RoundTag, tag
from venn.integrations.flower.session import OpenRound, VennJob, VennSession

log = logging.getLogger("venn.flower")

Phase = Literal["train", "evaluate"]


@dataclass
class RoundRecord:
    """What one Venn round of a run did: for reports and checks."""

    phase: Phase
    server_round: int
    round_index: int
    demand: int
    assigned: list[str]
    nodes: dict[str, int]
    """Assigned devices that got a message, and their node ids."""
    opened_at: float
    started_at: float
    closed_at: float | None = None
    replied: list[str] = field(default_factory=list)
    """Devices whose reply came back without an error."""
    outcome: str = ""


class TooFewNodes(RuntimeError):
    """A round got fewer than ``min_nodes`` usable nodes in every attempt allowed."""


def _minimums(strategy: Strategy, job: VennJob) -> int:
    """The fewest nodes the wrapped strategy insists on seeing in a round (FedAvg and its
    kin wait forever for ``min_available_nodes`` and ``min_train_nodes``, and for
    ``min_evaluate_nodes`` when there is federated evaluation)."""
    names = ["min_available_nodes", "min_train_nodes"]
    if job.evaluate_demand:
        names.append("min_evaluate_nodes")
    found = [getattr(strategy, n) for n in names if isinstance(getattr(strategy, n, None), int)]
    return max(found, default=0)


class VennStrategy(Strategy):
    """Wraps ``strategy``; ``session`` speaks to Venn for the job."""

    def __init__(
        self,
        strategy: Strategy,
        session: VennSession,
        *,
        directory: NodeDirectory | None = None,
        max_attempts: int = 10,
        on_round: Callable[[RoundRecord], None] | None = None,
    ) -> None:
        need = _minimums(strategy, session.job)
        if need > session.job.min_nodes:
            raise ValueError(
                f"the wrapped strategy waits for {need} nodes but a Venn round may start "
                f"with min_nodes={session.job.min_nodes}: lower its min_*_nodes or raise "
                "min_nodes"
            )
        self.strategy = strategy
        self.session = session
        self.job: VennJob = session.job
        self.directory = directory or NodeDirectory()
        self.max_attempts = max_attempts
        self.on_round = on_round
        self.records: list[RoundRecord] = []
        self._attempt = 0
        self._open: tuple[OpenRound, RoundRecord] | None = None

    # -- the run ---------------------------------------------------------------------
    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Flower's round loop between registering the job and finishing it."""
        # Learn the nodes before the first round holds any devices.
        self.directory.refresh(grid)
        self.session.start(self.job.rounds(num_rounds))
        try:
            result = super().start(
                grid,
                initial_arrays,
                num_rounds,
                timeout,
                train_config,
                evaluate_config,
                evaluate_fn,
            )
        except BaseException as exc:
            if self._open is not None:
                self._close([], f"run ended: {exc!r}"[:200])
            self.session.cancel(f"Flower run failed: {exc!r}"[:200])
            self.session.stop()
            raise
        succeeded = sum(1 for r in self.records if r.outcome == "succeeded")
        self.session.finish(succeeded)
        self.session.stop()
        return result

    def summary(self) -> None:
        log.info(
            "Venn job %s: requirement %s, demand %d (evaluate %d), at least %d nodes",
            self.job.job_id,
            dict(self.job.requirement),
            self.job.demand,
            self.job.evaluate_demand,
            self.job.min_nodes,
        )
        self.strategy.summary()

    # -- rounds ------------------------------------------------------------------------
    def _acquire(self, phase: Phase, server_round: int, demand: int, grid: Grid) -> RoundRecord:
        """Ask Venn for the round's devices until enough of them are usable nodes."""
        for _ in range(self.max_attempts):
            opened = self.session.acquire(self._attempt, demand)
            self._attempt += 1
            nodes = self.directory.nodes(grid, opened.devices)
            record = RoundRecord(
                phase,
                server_round,
                opened.tally.round_index,
                demand,
                list(opened.devices),
                nodes,
                opened.opened_at,
                opened.started_at or time.time(),
            )
            self._open = (opened, record)
            if len(nodes) >= self.job.min_nodes:
                return record
            self._close([], f"too few nodes: {len(nodes)} of at least {self.job.min_nodes}")
        raise TooFewNodes(
            f"{phase} round {server_round}: fewer than {self.job.min_nodes} nodes in "
            f"{self.max_attempts} attempts"
        )

    def _configure(
        self,
        phase: Phase,
        server_round: int,
        demand: int,
        grid: Grid,
        build: Callable[[Grid], Iterable[Message]],
    ) -> list[Message]:
        record = self._acquire(phase, server_round, demand, grid)
        allowed = set(record.nodes.values())
        messages = list(build(AssignedGrid(grid, record.nodes.values())))
        strays = {m.metadata.dst_node_id for m in messages} - allowed
        if strays:
            why = "the wrapped strategy addressed nodes Venn did not assign"
            self._close([], why)
            raise RuntimeError(f"{why}: {sorted(strays)}")
        round_tag = RoundTag(self.job.job_id, record.round_index)
        for message in messages:
            tag(message, round_tag)
        return messages

    def _close(self, replies: list[Message], reason: str = "") -> None:
        if self._open is None:
            return
        opened, record = self._open
        self._open = None
        device_of = {node: device for device, node in record.nodes.items()}
        record.replied = sorted(
            {
                device_of[r.metadata.src_node_id]
                for r in replies
                if not r.has_error() and r.metadata.src_node_id in device_of
            }
        )
        ok = len(record.replied) >= self.job.min_nodes and not reason
        if not ok and not reason:
            reason = f"{len(record.replied)} replies of at least {self.job.min_nodes}"
        outcome: Literal["succeeded", "failed"] = "succeeded" if ok else "failed"
        closed = self.session.close(opened, outcome, len(record.replied), reason)
        record.closed_at = closed.closed_at
        record.outcome = outcome
        self.records.append(record)
        if self.on_round is not None:
            self.on_round(record)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self._configure(
            "train",
            server_round,
            self.job.demand,
            grid,
            lambda view: self.strategy.configure_train(server_round, arrays, config, view),
        )

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        self._close(replies)
        return self.strategy.aggregate_train(server_round, replies)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if not self.job.evaluate_demand:
            return []
        return self._configure(
            "evaluate",
            server_round,
            self.job.evaluate_demand,
            grid,
            lambda view: self.strategy.configure_evaluate(server_round, arrays, config, view),
        )

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        replies = list(replies)
        self._close(replies)
        return self.strategy.aggregate_evaluate(server_round, replies)
