"""The gateway's view of the shared `venn.settings.Settings` (every option is there, as
VENN_GATEWAY_*), with the reasons behind the defaults."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from venn.broker.security import JOBS, Credentials, password_variable
from venn.settings import Settings, run_dir_kafka_users


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    settings: Settings
    host: str = "127.0.0.1"
    port: int = 8080
    wait_s: float = 2.0
    """Longest a check-in waits for the scheduler's answer (an assignment, or the check-in
    in a CheckinsDeclined) before answering retry_after. The answer normally comes in tens
    of milliseconds; the bound covers a scheduler that is down, restarting or backlogged."""
    max_inflight: int = 2000
    """Check-ins in progress beyond which new ones get 429 + retry_after at once."""
    max_lag_s: float = 0.25
    """Event-loop lag beyond which new check-ins get 429 + retry_after at once: when the
    process is CPU-bound, requests wait before their handler (and its bound) even starts,
    so shedding on lag keeps the answers of admitted requests fast."""
    max_body_bytes: int = 16384
    idle_timeout_s: float = 10.0
    """A connection that sends no complete request headers within this long, or idles this
    long between requests, is closed (a client that never finishes its headers held its
    connection forever: issue 12, defect 8). The body has its own bound, ``wait_s``."""
    retry_after_s: int = 30
    """retry_after of a check-in that got no assignment."""
    busy_retry_after_s: int = 2
    """retry_after of a check-in refused because the gateway is overloaded or Kafka is down."""
    fast_no: bool = True
    """Answer retry_after at once when no open round with remaining demand admits the
    device (the gateway's own view of venn.jobs/venn.rounds/venn.assignments)."""
    linger_ms: int = 5
    """How long check-ins are gathered into one batch event (and the producer's linger)."""
    fetch_wait_ms: int = 10
    """fetch_max_wait_ms of the assignments consumer: on Tansu an idle consumer sees new
    records only when its parked fetch expires, so this adds up to that much latency."""

    result_window_s: float = 3600.0
    """How long after an assignment its device may still upload the round's result (a
    restarted gateway reads this much of venn.assignments back)."""
    max_remembered: int = 500_000
    """Most assignments remembered for that check (the oldest are forgotten first)."""

    batch_max: int = 128
    """Most check-ins in one CheckinBatch; a batch also stays under the event size limit."""

    jobs_credentials: Credentials | None = None
    """The job API's own Kafka principal (`venn.broker.security.JOBS`), the only one that
    writes venn.jobs: from VENN_KAFKA_PASSWORD_JOBS or the run dir's users. None where Kafka
    has no SASL (the gateway's producer writes them), or where this gateway serves devices
    only (its job API then refuses submissions and cancels: 503)."""

    @classmethod
    def from_env(
        cls, settings: Settings | None = None, environ: Mapping[str, str] | None = None
    ) -> GatewayConfig:
        s = (settings or Settings.from_env(environ)).for_role("gateway")
        env = os.environ if environ is None else environ
        jobs = env.get(password_variable(JOBS)) or run_dir_kafka_users(s.run_dir).get(JOBS)
        return cls(
            jobs_credentials=Credentials(JOBS, jobs) if s.kafka_user and jobs else None,
            settings=s,
            host=s.gateway_host,
            port=s.gateway_port,
            wait_s=s.gateway_wait_s,
            max_inflight=s.gateway_max_inflight,
            max_lag_s=s.gateway_max_lag_s,
            max_body_bytes=s.gateway_max_body,
            idle_timeout_s=s.gateway_idle_timeout_s,
            retry_after_s=s.gateway_retry_after_s,
            busy_retry_after_s=s.gateway_busy_retry_after_s,
            fast_no=bool(s.gateway_fast_no),
            linger_ms=s.gateway_linger_ms,
            fetch_wait_ms=s.gateway_fetch_wait,
            batch_max=s.gateway_batch_max,
        )

    def __post_init__(self) -> None:
        if self.wait_s <= 0:
            raise ValueError("VENN_GATEWAY_WAIT_S must be > 0")
        if self.max_inflight < 1:
            raise ValueError("VENN_GATEWAY_MAX_INFLIGHT must be >= 1")
        if self.idle_timeout_s <= 0:
            raise ValueError("VENN_GATEWAY_IDLE_TIMEOUT_S must be > 0")
        if self.batch_max < 1:
            raise ValueError("VENN_GATEWAY_BATCH_MAX must be >= 1")
