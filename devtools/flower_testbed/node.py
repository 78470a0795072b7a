"""What the example ClientApps emulate of a node: its compute time (``samples x speed-ms``
of device time on top of the real numpy training), and that a node lacking a run's
requirement cannot run its task.

That a node works for one run at a time needs no emulation: flwr 1.42's SuperNode takes
one message at a time (`supernode/start_client_internal.py`, `_push_messages`), so a
second run's message waits until the node is done with the first's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from venn_flower.profile import NodeProfile

from venn.core.model import Requirement


def parse_requirement(text: str) -> Requirement:
    """``"cpu_f=4,ram=8"`` (each attribute at least that value); ``""``: anything."""
    pairs = [p.split("=", 1) for p in text.replace(" ", "").split(",") if p]
    if any(len(p) != 2 for p in pairs):
        raise ValueError(f"requirement {text!r}: expected name=value[,name=value...]")
    return Requirement.of({k: float(v) for k, v in pairs})


class Ineligible(RuntimeError):
    """The node lacks what the run requires (only Flower's own sampling sends it work)."""


def check_eligible(node_config: Mapping[str, Any], requirement: str) -> NodeProfile:
    profile = NodeProfile.from_node_config(node_config)
    wanted = parse_requirement(requirement)
    if not wanted.admits(profile.attrs):
        raise Ineligible(f"{profile.device_id} does not meet {wanted}")
    return profile


def device_time(node_config: Mapping[str, Any], samples: int) -> None:
    """Spend the node's emulated compute time for ``samples`` examples."""
    profile = NodeProfile.from_node_config(node_config)
    time.sleep(samples * profile.speed_ms_per_sample / 1000.0)
