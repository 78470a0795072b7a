"""The one authorization rule of a job's events, for every reader of venn.jobs and
venn.rounds (the scheduler, the recorder, the gateway's views, a coordinator's resume):

- a job owner's event (register, round request, heartbeat, cancel, close, finish) needs a
  token of kind ``job`` that names its job (or an ``admin`` token); Venn's own (an
  expiry, an admission decision) needs an ``admin`` token; a registration's tenant, if
  it names one, is the job token's owner (its subject);
- the token is judged at the time the event was produced, not when it is read: signed
  with the deployment's secret, unexpired and unrevoked *then*. A consumer that was down
  or lags, and a replay from offset 0, so reach the verdict a reader at the time did.

The time an event was produced is the broker's, where the topic stamps its records on
append (``message.timestamp.type=LogAppendTime``, `venn.broker.topics.TOPIC_CONFIGS`):
no client can choose it. A record stamped by its producer (CreateTime: a topic created
otherwise, or a broker without the setting) proves nothing about when it was sent, since
a holder of an expired token could backdate it; such an event is judged when it is read,
as before (`venn.broker.stream.produced_at`).
"""

from __future__ import annotations

from venn import events as ev
from venn.auth.tokens import AuthError, Claims, Tokens, subject_of
from venn.core.model import DEFAULT_TENANT

JOB_EVENTS = (
    ev.JobRegistered,
    ev.RoundRequested,
    ev.JobCancelled,
    ev.JobHeartbeat,
    ev.RoundClosed,
    ev.JobFinished,
)
OPERATOR_EVENTS = (ev.JobExpired, ev.JobAdmission)
"""Decided by Venn itself, not by the job's owner: an operator's (admin) token."""
CHECKED = (*JOB_EVENTS, *OPERATOR_EVENTS)
"""Every event this rule applies to; any other passes."""


def check_job_event(
    tokens: Tokens | None, event: ev.Event | object, at: float | None = None
) -> Claims | None:
    """The claims of the token an event of a job's life carries, if they allowed it on its
    job at time ``at`` (when it was produced; None: now); AuthError if not. No check (None)
    without authentication or for other events."""
    if tokens is None:
        return None
    if isinstance(event, OPERATOR_EVENTS):
        return tokens.check(event.token, "admin", at=at)
    if not isinstance(event, JOB_EVENTS):
        return None
    claims = tokens.check(event.token, "job", at=at)
    claims.require_job(event.job_id)
    tenant = event.tenant if isinstance(event, ev.JobRegistered) else None
    if tenant is not None and claims.kind != "admin" and tenant != claims.subject:
        # A job's tenant is its owner's: a job token cannot spend another tenant's share.
        raise AuthError(403, "forbidden", f"this token may not register for tenant {tenant!r}")
    return claims


def tenant_of(event: ev.JobRegistered) -> str:
    """A registration's tenant, for every reader alike: the one it names (the rule above
    lets a job token name only its owner), else its token's owner, else (no token: a
    deployment without authentication) the default tenant. A registration that named none
    was filed under the default tenant, outside its owner's share and cap (issue 34,
    item 6). Read after the rule admitted the event, so the token's subject is its own."""
    if event.tenant:
        return event.tenant
    subject = subject_of(event.token) if event.token else None
    return subject or DEFAULT_TENANT
