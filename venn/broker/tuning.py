"""Kafka client settings that depend on the broker: Tansu needs workarounds, Apache Kafka
does not. Every service takes its producer, consumer-group and fetch settings from here.

Tansu (measured against Apache Kafka in docs/notes/performance.md):
- its ListOffsets answer ends at the last batch's base offset, so Faust's table recovery
  drops the tail of a multi-record changelog batch: Faust's producer sends one record per
  batch;
- it makes a new group wait about half the rebalance timeout before the first assignment,
  and a rejoining member about session + rebalance timeout: short group timeouts;
- it keeps a parked fetch for the whole wait even when data arrives: short fetch waits
  (each one is latency);
- no InitProducerId: no idempotent producer, acks=1.

Apache Kafka answers a parked fetch as soon as data arrives and delays a new group's first
rebalance only by ``group.initial.rebalance.delay.ms`` (0 on the local broker), so it keeps
Faust's producer batching, long fetch waits (fewer idle requests) and acks from every
in-sync replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class ClientTuning:
    name: str
    faust_producer_max_batch_size: int
    """Faust's own producer (table changelogs): bytes per partition batch."""
    faust_producer_linger_s: float
    """How long Faust's own producer gathers records into a batch (0: none; each record
    that finds the sender idle then costs a produce request of its own)."""
    acks: Literal[1, "all"]
    session_timeout_ms: int
    decider_session_timeout_ms: int
    """The scheduler workers' session: how long after the deciding worker died (SIGKILL, a
    lost host) the group rebalances and a standby takes over. Apache Kafka accepts less
    than 6 s only with ``group.min.session.timeout.ms`` lowered (the local broker and
    docker-compose set 1 s)."""
    rebalance_timeout_ms: int
    heartbeat_interval_ms: int
    fetch_wait_ms: int
    """Longest a consumer that waits for fresh data (scheduler, gateway) parks a fetch."""

    @property
    def faust_acks(self) -> int:
        return -1 if self.acks == "all" else self.acks

    def consumer_group(self) -> dict[str, int]:
        """aiokafka consumer-group keyword arguments."""
        return {
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
        }


TANSU = ClientTuning(
    name="tansu",
    faust_producer_max_batch_size=1,
    faust_producer_linger_s=0.0,
    acks=1,
    # 6 s is also the smallest session timeout Apache Kafka accepts by default.
    session_timeout_ms=6_000,
    decider_session_timeout_ms=6_000,
    rebalance_timeout_ms=6_000,
    heartbeat_interval_ms=1_000,
    fetch_wait_ms=10,
)

KAFKA = ClientTuning(
    name="kafka",
    faust_producer_max_batch_size=16_384,  # Faust's default
    faust_producer_linger_s=0.005,
    acks="all",
    # A killed worker's partitions move after this long; Kafka's own default is 45 s.
    session_timeout_ms=10_000,
    # Heartbeats come from Faust's consumer thread, not the event loop the agents keep
    # busy: 6 heartbeats of 0.5 s per session.
    decider_session_timeout_ms=3_000,
    rebalance_timeout_ms=20_000,
    # Members learn of a rebalance at their next heartbeat. With 3 s, a scheduler worker's
    # graceful leave stopped assignments for up to 27.5 s (`tests/e2e/test_workers.py`,
    # 3 runs); with 1 s the longest gap after the leave was 3.8-8.4 s in 5 runs, and the
    # failover bench's worst run 5.29 s (4 of 20 past its 5 s goal, by up to one interval).
    heartbeat_interval_ms=500,
    fetch_wait_ms=500,
)

PROFILES = {profile.name: profile for profile in (TANSU, KAFKA)}


def tuning_for(broker_kind: str, override: str = "") -> ClientTuning:
    """The profile of ``override`` when set (benchmarks compare them), else Tansu's on Tansu
    and Apache Kafka's on everything else (kafka, external, auto)."""
    if override:
        if override not in PROFILES:
            raise ValueError(f"VENN_BROKER_TUNING={override!r}: expected one of {list(PROFILES)}")
        return PROFILES[override]
    return TANSU if broker_kind == "tansu" else KAFKA
