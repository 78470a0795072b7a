"""Venn schedules Flower (flwr 1.42): which SuperNode serves which run, across runs.

ServerApp side: `VennStrategy` wraps any Flower strategy; `VennJob` and `VennSession` are
the run as a Venn job (`client_for` and `job_id_for` build them from the run's context).
ClientApp side: `venn_mod` and `answer_venn_queries`.
Node side: `python -m venn.integrations.flower.supernode` (a SuperNode plus its check-ins).
docs/flower.md tells the whole story.

Names load on first use (PEP 562): every ClientApp task is a new process, and the node
side should not pay for importing the SDK (Kafka client and all) it does not use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_HOMES = {
    "NodeDirectory": "directory",
    "NodeProfile": "profile",
    "RoundRecord": "strategy",
    "VennJob": "session",
    "VennSession": "session",
    "VennStrategy": "strategy",
    "answer_venn_queries": "node",
    "client_for": "connect",
    "job_id_for": "connect",
    "venn_mod": "node",
}

__all__ = [
    "NodeDirectory",
    "NodeProfile",
    "RoundRecord",
    "VennJob",
    "VennSession",
    "VennStrategy",
    "answer_venn_queries",
    "client_for",
    "job_id_for",
    "venn_mod",
]

if TYPE_CHECKING:
    from venn.integrations.flower.connect import client_for, job_id_for
    from venn.integrations.flower.directory import NodeDirectory
    from venn.integrations.flower.node import answer_venn_queries, venn_mod
    from venn.integrations.flower.profile import NodeProfile
    from venn.integrations.flower.session import VennJob, VennSession
    from venn.integrations.flower.strategy import RoundRecord, VennStrategy


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
