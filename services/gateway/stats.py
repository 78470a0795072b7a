"""The gateway's counters, exposed on its /metrics (`venn.metrics.StatsCollector`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from venn.metrics import labelled


@dataclass
class GatewayStats:
    checkins: int = 0
    """Check-ins answered (200: assigned or not); those shed with 429 count in `overloaded`,
    `late` or `broker_down` instead."""
    assigned: int = 0
    no_assignment: int = 0
    """Waited the full bound without an assignment."""
    declined: int = 0
    """Answered retry_after as soon as the scheduler declined the check-in."""
    fast_no: int = 0
    """Answered at once: no open round with demand admits the device."""
    enough_in_flight: int = 0
    """Check-ins an open round admits, answered at once: enough of them at the scheduler."""
    supply_reports: int = 0
    wanted_served: int = 0
    """`GET /v1/wanted` answered with the document."""
    wanted_not_modified: int = 0
    """`GET /v1/wanted` answered 304: the asker's copy (If-None-Match) holds."""
    overloaded: int = 0
    """Refused at once: too many in flight, the event loop lagging or the batches in front
    of the broker full."""
    late: int = 0
    """Check-ins read so long after they arrived (a stalled loop) that they were answered
    429 at once instead of being waited for."""
    kafka_errors: int = 0
    invalid: int = 0
    results: int = 0
    late_delivered: int = 0
    """A late assignment handed to the same device's next check-in."""
    late_released: int = 0
    """A late assignment released with a failed DeviceResult."""
    internal_errors: int = 0
    bad_records: int = 0
    """Records read that could not be used: dead-lettered here when addressed to this
    gateway (`venn.broker.stream`), else skipped and counted in `skipped_records`."""
    skipped_records: dict[str, int] = field(default_factory=dict, metadata=labelled("kind"))
    """Bad records left to their owner (topics.DEAD_LETTER_OWNER), by InvalidEvent kind."""
    handler_errors: int = 0
    """Answers, job or round events whose handling failed (logged; a bad record then)."""
    dead_letters_unsent: int = 0
    """Dead letters the broker did not take."""
    broker_down: int = 0
    """Requests refused at once because the broker was unavailable."""
    refused_results: int = 0
    """Results from a device the round did not assign (403)."""
    refused_enrolments: int = 0
    """Enrolments of a device id another enrol token's owner holds (409)."""
    unauthorized: int = 0
    """Requests without a valid token (401) or with one that does not allow them (403)."""
    enrolled: int = 0
    dead_letter_reasons: dict[str, int] = field(default_factory=dict, metadata=labelled("reason"))
    """Dead letters this gateway published, by InvalidEvent kind."""
    consumer_lag: dict[tuple[str, str], int] = field(
        default_factory=dict, metadata=labelled("topic", "partition", kind="gauge")
    )
    """(topic, partition) -> records of the answers consumer not read yet."""
