"""Which Flower node is which Venn device, without asking the nodes.

A device enrolled by its launcher is ``<name>@<node id>``: the node id is read off the id.
A device under a fixed device token is its plain name, found among the SuperLink's node
names (secure mode: `flwr supernode register KEY.pub --name <name>`). Only online nodes
(``grid.get_nodes()``) count: an id of a SuperNode that has gone is not used.

`EligibleNodes` is what a run knows of the nodes that meet its requirement, for the rounds
it samples itself while Venn is unreachable: every node Venn gave it before, and every
node whose profile (its answer to ``query.venn``) meets the requirement.

Pure: the grid's node list is passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from venn_flower.profile import NodeProfile, split_device_id


def nodes_of(devices: Iterable[str], online: Iterable[Any]) -> dict[str, int]:
    """Device id -> online node id, for the devices that have one. ``online``: Flower's
    NodeInfo records (``node_id``, ``name``) of the online nodes."""
    infos = list(online)
    ids = {int(n.node_id) for n in infos}
    by_name: dict[str, int] = {}
    for n in infos:
        name = getattr(n, "name", "") or ""
        if name:
            by_name.setdefault(name, int(n.node_id))
    found: dict[str, int] = {}
    for device in devices:
        _, node = split_device_id(device)
        if node is not None:
            if node in ids:
                found[device] = node
        elif device in by_name:
            found[device] = by_name[device]
    return found


@dataclass
class EligibleNodes:
    """Nodes known to meet a run's requirement (node id -> the node's name)."""

    requirement: Mapping[str, float]
    known: dict[int, str] = field(default_factory=dict)
    asked: set[int] = field(default_factory=set)
    """Nodes asked for their profile (an answer or not: not asked again)."""

    def assigned(self, nodes: Mapping[str, int]) -> None:
        """Venn gave the run these devices (device id -> node id): they meet it."""
        for device, node in nodes.items():
            self.known[node] = split_device_id(device)[0]

    def answered(self, node_id: int, profile: NodeProfile | None) -> None:
        """A node's answer to the profile query (None: no answer, or no venn_mod)."""
        self.asked.add(node_id)
        if profile is not None and profile.meets(self.requirement):
            self.known[node_id] = profile.device_id

    def online(self, node_ids: Iterable[int]) -> dict[int, str]:
        """The known eligible nodes among ``node_ids``."""
        return {n: self.known[n] for n in node_ids if n in self.known}

    def unasked(self, node_ids: Iterable[int]) -> list[int]:
        return [n for n in node_ids if n not in self.known and n not in self.asked]
