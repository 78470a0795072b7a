"""Venn's lines in a run's log (`flwr log <run id>`).

Flower uploads what a ServerApp writes to stdout and stderr; the ``venn_flower`` logger
gets a handler that writes there in Flower's own layout (``INFO :      [venn] ...``), once,
unless the app configured it already.
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("venn_flower")


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is at the time (Flower swaps and mirrors it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def to_run_log() -> None:
    """Send ``venn_flower``'s INFO lines to the run's log."""
    if log.handlers:
        return
    handler = _Stderr(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s :      [venn] %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
