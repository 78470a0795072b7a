"""Coordinator service: runs many jobs' round lifecycles on the Venn SDK."""

from services.coordinator.ledger import RoundLedger
from services.coordinator.runner import (
    JobCoordinator,
    JobOutcome,
    JobProgress,
    compress_arrivals,
    run_coordinator,
)

__all__ = [
    "JobCoordinator",
    "JobOutcome",
    "JobProgress",
    "RoundLedger",
    "compress_arrivals",
    "run_coordinator",
]
