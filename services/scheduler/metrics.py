"""Prometheus counters of the scheduler worker."""

from __future__ import annotations

from prometheus_client import Counter

EVENTS = Counter("venn_scheduler_events", "Input events processed", ["topic"])
DUPLICATES = Counter("venn_scheduler_duplicates", "Events skipped as replays", ["topic"])
CHECKINS = Counter("venn_scheduler_checkins", "Device check-ins decided (single or in batches)")
ASSIGNMENTS = Counter("venn_scheduler_assignments", "Assignments published")
ADOPTED = Counter(
    "venn_scheduler_adopted", "Assignments accounted from the topic (decided before a restart)"
)
DEAD_LETTERS = Counter("venn_scheduler_dead_letters", "Dead letters published", ["topic"])
REBUILDS = Counter("venn_scheduler_rebuilds", "Core rebuilds from the tables")
OUTPUT_ERRORS = Counter(
    "venn_scheduler_output_errors", "Outputs that could not be sent", ["topic", "error"]
)
STALE_CHECKINS = Counter(
    "venn_scheduler_stale_checkins",
    "Check-ins dropped as too old to act on (VENN_CHECKIN_MAX_AGE_S)",
)
EXPIRED = Counter("venn_scheduler_expired_jobs", "Jobs expired after their coordinator fell silent")
