"""Gateway-only options on top of the shared `venn.settings.Settings`.

Read from the environment here (like the scheduler's own options) because `Settings`
only has `VENN_GATEWAY_PORT`; the rest belongs there once the settings owner adds them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from venn.settings import Settings


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    settings: Settings
    host: str = "127.0.0.1"
    port: int = 8080
    wait_s: float = 2.0
    """Longest a check-in waits for the scheduler's assignment before answering retry_after.

    The scheduler only speaks when it assigns, so "no assignment" is known by this timeout
    (unless the demand view answers at once, see `fast_no`): keep it short. Not shorter
    than 2 s on Tansu: Tansu does not wake a parked fetch when data arrives and Faust
    hard-codes `fetch_max_wait_ms=1500`, so an idle scheduler reads a check-in up to 1.5 s
    late (with Apache Kafka it is a few ms)."""
    max_inflight: int = 2000
    """Check-ins in progress beyond which new ones get 429 + retry_after at once."""
    max_lag_s: float = 0.25
    """Event-loop lag beyond which new check-ins get 429 + retry_after at once: when the
    process is CPU-bound, requests wait before their handler (and its bound) even starts,
    so shedding on lag keeps the answers of admitted requests fast."""
    max_body_bytes: int = 16384
    retry_after_s: int = 30
    """retry_after of a check-in that got no assignment."""
    busy_retry_after_s: int = 2
    """retry_after of a check-in refused because the gateway is overloaded or Kafka is down."""
    fast_no: bool = True
    """Answer retry_after at once when no open round with remaining demand admits the
    device (the gateway's own view of venn.jobs/venn.rounds/venn.assignments)."""
    linger_ms: int = 2
    fetch_wait_ms: int = 10
    """fetch_max_wait_ms of the assignments consumer: on Tansu an idle consumer sees new
    records only when its parked fetch expires, so this adds up to that much latency."""

    @classmethod
    def from_env(
        cls, settings: Settings | None = None, environ: Mapping[str, str] | None = None
    ) -> GatewayConfig:
        env = os.environ if environ is None else environ
        settings = settings or Settings.from_env(env)
        return cls(
            settings=settings,
            host=env.get("VENN_GATEWAY_HOST", "127.0.0.1"),
            port=settings.gateway_port,
            wait_s=float(env.get("VENN_GATEWAY_WAIT_S", "2.0")),
            max_inflight=int(env.get("VENN_GATEWAY_MAX_INFLIGHT", "2000")),
            max_lag_s=float(env.get("VENN_GATEWAY_MAX_LAG_S", "0.25")),
            max_body_bytes=int(env.get("VENN_GATEWAY_MAX_BODY", "16384")),
            retry_after_s=int(env.get("VENN_GATEWAY_RETRY_AFTER_S", "30")),
            busy_retry_after_s=int(env.get("VENN_GATEWAY_BUSY_RETRY_AFTER_S", "2")),
            fast_no=env.get("VENN_GATEWAY_FAST_NO", "1").lower() not in ("0", "false", "no"),
            linger_ms=int(env.get("VENN_GATEWAY_LINGER_MS", "2")),
            fetch_wait_ms=int(env.get("VENN_GATEWAY_FETCH_WAIT_MS", "10")),
        )

    def __post_init__(self) -> None:
        if self.wait_s <= 0:
            raise ValueError("VENN_GATEWAY_WAIT_S must be > 0")
        if self.max_inflight < 1:
            raise ValueError("VENN_GATEWAY_MAX_INFLIGHT must be >= 1")
