"""venn-flower: Venn schedules Flower runs (flwr >= 1.42).

ServerApp side: `VennStrategy` wraps any Message-API strategy (`VennStrategy.for_run`);
`VennJob` is the run as a Venn job. ClientApp side: `venn_mod` (and
`answer_venn_queries`). Node side: the
`venn-flower-supernode` command (`python -m venn_flower.supernode`).

Names load on first use (PEP 562): every ClientApp task is a new process, and it should
not pay for the ServerApp side it does not use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

_HOMES = {
    "Bridge": "bridge",
    "NodeProfile": "profile",
    "RoundRecord": "strategy",
    "TooFewNodes": "strategy",
    "VennDown": "strategy",
    "VennJob": "strategy",
    "VennStrategy": "strategy",
    "VennUnavailable": "bridge",
    "answer_venn_queries": "mod",
    "job_id_for": "strategy",
    "venn_mod": "mod",
}

__all__ = [
    "Bridge",
    "NodeProfile",
    "RoundRecord",
    "TooFewNodes",
    "VennDown",
    "VennJob",
    "VennStrategy",
    "VennUnavailable",
    "answer_venn_queries",
    "job_id_for",
    "venn_mod",
]

if TYPE_CHECKING:
    from venn_flower.bridge import Bridge, VennUnavailable
    from venn_flower.mod import answer_venn_queries, venn_mod
    from venn_flower.profile import NodeProfile
    from venn_flower.strategy import (
        RoundRecord,
        TooFewNodes,
        VennDown,
        VennJob,
        VennStrategy,
        job_id_for,
    )


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
