"""Coordinator SDK: what a job owner's FL server uses to talk to Venn."""

from venn.sdk.client import ClientStats, VennClient, new_event_id

__all__ = ["ClientStats", "VennClient", "new_event_id"]
