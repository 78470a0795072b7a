"""Which Flower node is which Venn device.

In insecure mode a SuperNode's node id is random and says nothing of the node, so the
ServerApp asks: one ``query.venn`` message per node it does not know yet (answered by the
handler `venn.integrations.flower.node.answer_venn_queries` registers), once per run and
node. A node whose ClientApp cannot answer stays unknown and is never given work.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from flwr.serverapp import Grid

from venn.integrations.flower.protocol import device_of, device_query

log = logging.getLogger("venn.flower")


class NodeDirectory:
    """Device id <-> node id, learnt by asking nodes."""

    def __init__(self, query_timeout_s: float = 60.0) -> None:
        self.query_timeout_s = query_timeout_s
        self.node_of: dict[str, int] = {}
        self.device_of: dict[int, str] = {}
        self.unanswered: set[int] = set()
        """Nodes asked that gave no device id (not running the Venn ClientApp side, or too
        slow to answer): asked again when an assigned device is not known."""

    def learn(self, node_id: int, device_id: str) -> None:
        """Record an answer; a device that moved to a new node id (a restarted SuperNode)
        replaces its old entry."""
        old = self.node_of.get(device_id)
        if old is not None and old != node_id:
            self.device_of.pop(old, None)
        self.node_of[device_id] = node_id
        self.device_of[node_id] = device_id
        self.unanswered.discard(node_id)

    def refresh(self, grid: Grid) -> None:
        """Ask every online node not known yet for its device id."""
        unknown = [n for n in grid.get_node_ids() if n not in self.device_of]
        if not unknown:
            return
        replies = grid.send_and_receive(
            [device_query(n) for n in unknown], timeout=self.query_timeout_s
        )
        for reply in replies:
            device = device_of(reply)
            if device is not None:
                self.learn(reply.metadata.src_node_id, device)
        self.unanswered.update(n for n in unknown if n not in self.device_of)
        log.info("node directory: %d known, %d unanswered", len(self.node_of), len(self.unanswered))

    def nodes(self, grid: Grid, devices: Iterable[str]) -> dict[str, int]:
        """The node of each device (asking new nodes once if one is unknown); devices
        without a node (offline, or not a Flower node of this SuperLink) are left out."""
        wanted = list(devices)
        if any(d not in self.node_of for d in wanted):
            self.refresh(grid)
        return {d: self.node_of[d] for d in wanted if d in self.node_of}
