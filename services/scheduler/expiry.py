"""Jobs whose coordinator went silent: every few seconds the decider removes each live job
silent past ``job_timeout_s`` (its demand released before the next decision:
`SchedulerState.expire_silent_jobs`) and announces it with a JobExpired on venn.jobs, for
its coordinator, the gateways and the recorder; reading that back changes nothing here."""

from __future__ import annotations

import logging

from services.scheduler import metrics
from services.scheduler.publisher import Send
from services.scheduler.state import SchedulerState
from venn import events as ev
from venn.auth import Tokens
from venn.broker import topics
from venn.broker.publish import message
from venn.settings import SchedulerSettings

log = logging.getLogger(__name__)

TOKEN_TTL_S = 600


def expiry_interval(config: SchedulerSettings) -> float:
    """A quarter of the timeout, within 1-30 s."""
    return max(1.0, min(30.0, config.job_timeout_s / 4 or 30.0))


def expire_silent_jobs(state: SchedulerState, tokens: Tokens | None, send: Send, now: float) -> int:
    """Publish a JobExpired per job silent past the timeout; how many."""
    timeout = state.config.job_timeout_s
    if not state.loaded or timeout <= 0:
        return 0
    found = state.expire_silent_jobs(now)
    for job_id, seen in found:
        token = (
            tokens.issue("admin", "scheduler", ttl_s=TOKEN_TTL_S) if tokens is not None else None
        )
        expired = ev.JobExpired(
            event_id=f"expired:{job_id}:{int(seen)}",
            time=now,
            job_id=job_id,
            last_seen=seen,
            reason=f"silent for {now - seen:.0f} s (timeout {timeout:g} s)",
            token=token,
        )
        log.warning("expiring job %s: %s", job_id, expired.reason)
        metrics.EXPIRED.inc()
        send(topics.JOBS, *message(topics.JOBS, expired))
    return len(found)
