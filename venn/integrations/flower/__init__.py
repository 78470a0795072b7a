"""Venn schedules Flower (flwr 1.42): which SuperNode serves which run, across runs.

ServerApp side: `VennStrategy` wraps any Flower strategy; `VennSession`/`VennJob` are the
run as a Venn job; `open_session` builds one from the run's context.
ClientApp side: `venn_mod` and `answer_venn_queries`.
Node side: `python -m venn.integrations.flower.supernode` (a SuperNode plus its check-ins).
docs/flower.md tells the whole story.
"""

from venn.integrations.flower.connect import client_for, job_id_for
from venn.integrations.flower.directory import NodeDirectory
from venn.integrations.flower.node import answer_venn_queries, venn_mod
from venn.integrations.flower.profile import NodeProfile
from venn.integrations.flower.session import VennJob, VennSession
from venn.integrations.flower.strategy import RoundRecord, VennStrategy

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
