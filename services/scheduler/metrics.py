"""Prometheus counters of the scheduler worker."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

EVENTS = Counter("venn_scheduler_events", "Input events processed", ["topic"])
DUPLICATES = Counter("venn_scheduler_duplicates", "Events skipped as replays", ["topic"])
CHECKINS = Counter("venn_scheduler_checkins", "Device check-ins decided (single or in batches)")
ASSIGNMENTS = Counter("venn_scheduler_assignments", "Assignments published")
ADOPTED = Counter(
    "venn_scheduler_adopted", "Assignments accounted from the topic (decided before a restart)"
)
DEAD_LETTERS = Counter("venn_scheduler_dead_letters", "Dead letters published", ["topic"])
UNREADABLE_ROWS = Counter(
    "venn_scheduler_unreadable_rows",
    "Table rows skipped at a rebuild (not a row, or not restorable), by table",
    ["table"],
)
REBUILDS = Counter("venn_scheduler_rebuilds", "Core rebuilds from the tables")
OUTPUT_ERRORS = Counter(
    "venn_scheduler_output_errors", "Outputs that could not be sent", ["topic", "error"]
)
STALE_CHECKINS = Counter(
    "venn_scheduler_stale_checkins",
    "Check-ins dropped as too old to act on (VENN_CHECKIN_MAX_AGE_S)",
)
EXPIRED = Counter("venn_scheduler_expired_jobs", "Jobs expired after their coordinator fell silent")
DEAD_LETTER_REASONS = Counter(
    "venn_scheduler_dead_letter_reasons",
    "Dead letters by input topic and kind of reason (an InvalidEvent kind, unauthorized, "
    "rejected, internal)",
    ["topic", "reason"],
)
DECLINED = Counter("venn_scheduler_declined", "Check-ins decided without an assignment")
ROUND_OUTCOMES = Counter("venn_scheduler_round_outcomes", "Rounds closed, by outcome", ["outcome"])
ROUND_FILL = Histogram(
    "venn_scheduler_round_fill_seconds",
    "How long rounds waited for their devices (the close's sched_delay_s)",
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600),
)
LAG = Gauge(
    "venn_scheduler_consumer_lag",
    "Records of an input partition not accounted for yet (high watermark - the offset "
    "ledger's lowest offset not handled, dead-lettered, deduplicated or dropped as stale)",
    ["topic", "partition"],
)
OFFSETS = Counter(
    "venn_scheduler_offsets",
    "Input offsets accounted for in the offset ledger (venn.broker.ledger), by outcome",
    ["topic", "partition", "outcome"],
)
STALLED = Gauge(
    "venn_scheduler_stalled_partitions",
    "Input partitions with records waiting and none read for a minute (see stall.py)",
)
STALL_RESUMED = Counter(
    "venn_scheduler_stalled_partitions_resumed",
    "Stalled input partitions that Faust had left out of its fetch set and were put back",
)
PLAN_RECOMPUTE = Histogram(
    "venn_scheduler_plan_recompute_seconds",
    "Time of the core's plan recompute and dispatch-table compile (one observation per "
    "compile, measured around the check-in decision that triggered it)",
    buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
READBACK_HELD = Counter(
    "venn_scheduler_readback_held_checkins",
    "Check-ins declined after a takeover while the predecessor's assignments were read back",
)
DECIDING = Gauge(
    "venn_scheduler_deciding",
    "1 on the worker that decides (it holds every input partition), 0 on a hot standby",
)
STALL_REFETCHED = Counter(
    "venn_scheduler_stalled_partitions_refetched",
    "Stalled input partitions fetched again from the lowest offset not handled",
)
BATCHES_PER_DECISION = Histogram(
    "venn_scheduler_batches_per_decision",
    "Check-in batches decided together (read in one fetch), per decision",
    buckets=(1, 2, 4, 8, 16, 32, 64),
)
