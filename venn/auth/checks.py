"""Which token an event of a job's life needs: one of kind ``job`` (or ``admin``) that
names the event's job."""

from __future__ import annotations

from venn import events as ev
from venn.auth.tokens import Claims, Tokens

JOB_EVENTS = (
    ev.JobRegistered,
    ev.RoundRequested,
    ev.JobCancelled,
    ev.JobHeartbeat,
    ev.RoundClosed,
    ev.JobFinished,
)
OPERATOR_EVENTS = (ev.JobExpired,)
"""Decided by Venn itself, not by the job's owner: an operator's (admin) token."""


def check_job_event(tokens: Tokens | None, event: ev.Event) -> Claims | None:
    """The claims of the token an event of a job's life carries, if they allow it on its
    job; AuthError if not. No check (None) without authentication or for other events."""
    if tokens is None:
        return None
    if isinstance(event, OPERATOR_EVENTS):
        return tokens.check(event.token, "admin")
    if not isinstance(event, JOB_EVENTS):
        return None
    claims = tokens.check(event.token, "job")
    claims.require_job(event.job_id)
    return claims
