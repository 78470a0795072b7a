"""Two views of Flower's Grid, each passing everything else to the real one:

- `ChosenGrid` shows a strategy only the round's nodes: Flower's strategies pick nodes from
  ``grid.get_node_ids()`` (`sample_nodes` in `flwr/serverapp/strategy/strategy_utils.py`),
  so FedAvg and its kin choose among exactly those, with no change to them.
- `RoundGrid` is the grid Flower's round loop (`Strategy.start`) sends through: its
  ``send_and_receive`` returns once the round has the replies it needs (Venn's target,
  80% of the messages by default) instead of waiting for the slowest node, and looks for
  replies every ``poll_s`` (Flower's own grid waits 3 s between looks). What it does with a
  round is the strategy's (`RoundWatch`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Protocol

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid


class _Delegating(Grid):
    def __init__(self, grid: Grid) -> None:
        self.grid = grid

    def set_run(self, run: Any) -> None:
        self.grid.set_run(run)

    @property
    def run(self) -> Any:
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
        return self.grid.get_node_ids()

    def get_nodes(self) -> Iterable[Any]:
        return self.grid.get_nodes()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.grid.pull_messages(message_ids)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        return self.grid.send_and_receive(messages, timeout=timeout)


class ChosenGrid(_Delegating):
    """The real grid, showing only ``node_ids``."""

    def __init__(self, grid: Grid, node_ids: Iterable[int]) -> None:
        super().__init__(grid)
        self.node_ids = list(node_ids)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.node_ids)

    def get_nodes(self) -> Iterable[Any]:
        chosen = set(self.node_ids)
        return [n for n in self.grid.get_nodes() if n.node_id in chosen]


class RoundWatch(Protocol):
    """What `RoundGrid` asks of the strategy while a round's replies come in."""

    def target(self, sent: int) -> int:
        """Replies that end the round, of ``sent`` messages."""
        ...

    def open(self) -> bool:
        """True while the round may still take more nodes (its end waits for them)."""
        ...

    def more(self) -> list[Message]:
        """Messages for nodes that joined the round since the last look."""
        ...

    def waiting(self, lost: dict[str, Message], ok: int) -> list[Message]:
        """Called every few seconds, with the messages whose nodes left the grid (id ->
        message; they are not waited for any more) and the good replies so far: the
        strategy keeps its job alive, and answers messages for the nodes that replace the
        lost ones (none: the round goes on without them)."""
        ...


class RoundGrid(_Delegating):
    """The grid a round loop sends through: it stops waiting at the round's target, and
    does not wait for a node that left (the strategy may send its work to another)."""

    def __init__(
        self, grid: Grid, watch: RoundWatch, poll_s: float = 0.5, watch_every_s: float = 5.0
    ) -> None:
        super().__init__(grid)
        self.watch = watch
        self.poll_s = poll_s
        self.watch_every_s = watch_every_s

    def _push(self, messages: list[Message], pending: dict[str, Message]) -> None:
        for message_id, message in zip(self.grid.push_messages(messages), messages, strict=True):
            if message_id:
                pending[message_id] = message

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        messages = list(messages)
        if not messages:
            return []
        pending: dict[str, Message] = {}
        self._push(messages, pending)
        sent = len(pending)
        replies: list[Message] = []
        ok = 0
        end = None if timeout is None else time.monotonic() + timeout
        watched = time.monotonic()
        while True:
            failed: dict[str, Message] = {}
            for reply in self.grid.pull_messages(list(pending)):
                message_id = reply.metadata.reply_to_message_id
                if reply.has_error() and message_id in pending:
                    failed[message_id] = pending[message_id]
                pending.pop(message_id, None)
                replies.append(reply)
                ok += not reply.has_error()
            lost: dict[str, Message] = {}
            if failed:
                # A task that failed because its node went away (a SuperNode stopped
                # mid-task) is lost work, not the node's answer: it may be done elsewhere.
                online = set(self.grid.get_node_ids())
                lost = {i: m for i, m in failed.items() if m.metadata.dst_node_id not in online}
                if lost:
                    gone = {m.metadata.dst_node_id for m in lost.values()}
                    replies = [
                        r for r in replies if not (r.has_error() and r.metadata.src_node_id in gone)
                    ]
            joined = self.watch.more()
            if joined:
                before = len(pending)
                self._push(joined, pending)
                sent += len(pending) - before
            if ok >= self.watch.target(sent):
                break
            now = time.monotonic()
            if end is not None and now >= end:
                break
            if lost or now - watched >= self.watch_every_s:
                watched = now
                online = set(self.grid.get_node_ids())
                lost.update(
                    {i: m for i, m in pending.items() if m.metadata.dst_node_id not in online}
                )
                for message_id in lost:
                    pending.pop(message_id, None)
                before = len(pending)
                self._push(self.watch.waiting(lost, ok), pending)
                sent += len(pending) - before
            if not pending and not self.watch.open():
                break
            time.sleep(self.poll_s if end is None else max(0.0, min(self.poll_s, end - now)))
        return replies
