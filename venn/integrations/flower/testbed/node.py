"""What the example ClientApps emulate of a node: its compute time, and that it can run one
task at a time.

A node's work takes ``samples x speed-ms`` of emulated device time on top of the real
numpy training, spent holding the node's lock (a file in its ``work-dir``): two tasks on
one node, of two runs, queue up for it as they would share one device's processor. So a
node serving two runs at once slows both, which is what a scheduler should avoid.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from venn.core.model import Requirement
from venn.integrations.flower.profile import NodeProfile

WORK_DIR_KEY = "work-dir"


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


@contextmanager
def node_busy(node_config: Mapping[str, Any]) -> Iterator[None]:
    """Hold the node's lock (tasks of one node run one at a time)."""
    profile = NodeProfile.from_node_config(node_config)
    work = Path(str(node_config.get(WORK_DIR_KEY) or "/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    with open(work / f"{profile.device_id}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def device_time(node_config: Mapping[str, Any], samples: int) -> None:
    """Spend the node's emulated compute time for ``samples`` examples."""
    profile = NodeProfile.from_node_config(node_config)
    time.sleep(samples * profile.speed_ms_per_sample / 1000.0)
