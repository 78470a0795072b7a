"""Prometheus counters of the scheduler worker."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

EVENTS = Counter("venn_scheduler_events", "Input events processed", ["topic"])
DUPLICATES = Counter("venn_scheduler_duplicates", "Events skipped as replays", ["topic"])
CHECKINS = Counter("venn_scheduler_checkins", "Device check-ins decided (single or in batches)")
ASSIGNMENTS = Counter("venn_scheduler_assignments", "Assignments published")
DEAD_LETTERS = Counter("venn_scheduler_dead_letters", "Dead letters published", ["topic"])
UNREADABLE_ROWS = Counter(
    "venn_scheduler_unreadable_rows",
    "Table rows skipped at a rebuild (not a row, or not restorable), by table",
    ["table"],
)
REBUILDS = Counter("venn_scheduler_rebuilds", "Core rebuilds from the tables")
SKIPPED_DECIDED = Counter(
    "venn_scheduler_checkins_skipped_as_decided",
    "Check-in records past the commit that a new decider skipped: the tables held their decisions",
)
ANNOUNCED_AGAIN = Counter(
    "venn_scheduler_assignments_announced_again",
    "Assignments the restored tables hold, published again by a new decider",
)
OUTPUT_ERRORS = Counter(
    "venn_scheduler_output_errors", "Outputs that could not be sent", ["topic", "error"]
)
STALE_CHECKINS = Counter(
    "venn_scheduler_stale_checkins",
    "Check-ins dropped as too old to act on (VENN_CHECKIN_MAX_AGE_S)",
)
EXPIRED = Counter("venn_scheduler_expired_jobs", "Jobs expired after their coordinator fell silent")
REFUSED = Counter(
    "venn_scheduler_refused_registrations",
    "Registrations refused because admitting them would pass an operator limit, by limit",
    ["reason"],
)
UNVOUCHED_REPORTS = Counter(
    "venn_scheduler_unvouched_supply_reports",
    "Supply reports not counted: no valid token of the gateway they name",
)
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
    "Records of an input partition the decider has not accounted for yet (high watermark - "
    "the offset ledger's lowest offset not handled, dead-lettered, deduplicated or dropped)",
    ["topic", "partition"],
)
OFFSETS = Counter(
    "venn_scheduler_offsets",
    "Input offsets accounted for in the offset ledger (venn.broker.ledger), by outcome",
    ["topic", "partition", "outcome"],
)
PLAN_RECOMPUTE = Histogram(
    "venn_scheduler_plan_recompute_seconds",
    "Time of the core's plan recompute and dispatch-table compile (one observation per "
    "compile, measured around the check-in decision that triggered it)",
    buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
DECIDING = Gauge(
    "venn_scheduler_deciding",
    "1 on the worker that decides (it holds every input partition), 0 on a hot standby",
)
BATCHES_PER_DECISION = Histogram(
    "venn_scheduler_batches_per_decision",
    "Check-in batches decided together (read in one fetch), per decision",
    buckets=(1, 2, 4, 8, 16, 32, 64),
)
CYCLE = Histogram(
    "venn_scheduler_cycle_seconds",
    "The decider's cycles that brought records, by step: decide (the records and ticks), "
    "rows_durable (the broker acknowledged the cycle's table rows), outputs_acked (and its "
    "outputs)",
    ["step"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
