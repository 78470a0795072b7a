"""Coordinator SDK: what a job owner's FL server uses to talk to Venn."""

from venn.sdk.client import ClientStats, VennClient, new_event_id
from venn.sdk.clock import TraceClock

__all__ = ["ClientStats", "TraceClock", "VennClient", "new_event_id"]
