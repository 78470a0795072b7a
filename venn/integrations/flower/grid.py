"""A Grid that shows a strategy only the nodes Venn assigned to the round.

Flower's strategies pick nodes from ``grid.get_node_ids()`` (`sample_nodes` in
`flwr/serverapp/strategy/strategy_utils.py`); handing them this view instead of the real
grid makes any of them choose among the round's nodes, with no change to the strategy.
Everything else goes to the real grid.
"""

from __future__ import annotations

from collections.abc import Iterable

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.run import Run


class AssignedGrid(Grid):
    def __init__(self, grid: Grid, node_ids: Iterable[int]) -> None:
        self.grid = grid
        self.node_ids = list(node_ids)

    def set_run(self, run: Run) -> None:
        self.grid.set_run(run)

    @property
    def run(self) -> Run:
        return self.grid.run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.node_ids)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.grid.pull_messages(message_ids)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        return self.grid.send_and_receive(messages, timeout=timeout)
