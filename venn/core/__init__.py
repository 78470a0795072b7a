"""The pure scheduling core: no I/O, no clock, no asyncio; deterministic for a seed."""

from venn.core.capacity import TierModel
from venn.core.model import Assignment, JobSpec, Requirement
from venn.core.registry import POLICIES, make_scheduler
from venn.core.scheduler import Scheduler

__all__ = [
    "POLICIES",
    "Assignment",
    "JobSpec",
    "Requirement",
    "Scheduler",
    "TierModel",
    "make_scheduler",
]
