"""The one authorization rule of job events (`venn.auth.checks`, applied by every reader
through `venn.broker.stream.authorized`): a token judged at the time the broker stored the
event, not when a reader gets to it (issue 26, items 1 and 2)."""

from __future__ import annotations

import asyncio
import secrets
import time

import msgspec
import pytest

from venn import events as ev
from venn.auth import AuthError, Tokens
from venn.auth.tokens import GivenTokens
from venn.broker import topics
from venn.broker.publish import MemoryEvents
from venn.broker.stream import (
    LOG_APPEND_TIME,
    EventStream,
    MemoryRecords,
    Record,
    Unusable,
    authorized,
    owned_by,
    produced_at,
)

TOKENS = Tokens(secrets.token_urlsafe(32))
NOW = time.time()


def cancel(job_id: str, token: str | None) -> ev.JobCancelled:
    return ev.JobCancelled(
        event_id=f"c-{job_id}-{secrets.token_hex(4)}", time=NOW, job_id=job_id, reason="x",
        token=token,
    )  # fmt: skip


def stored(event: ev.Event, at: float | None) -> Record:
    """``event``'s record as the broker stored it: stamped at ``at`` (None: CreateTime)."""
    if at is None:
        return Record(topics.JOBS, 0, 0, None, ev.encode(event), NOW, 0)
    return Record(topics.JOBS, 0, 0, None, ev.encode(event), at, LOG_APPEND_TIME)


def verdict(check: object, event: ev.Event, at: float | None) -> str:
    assert callable(check)
    try:
        check(event, stored(event, at))
    except Unusable as exc:
        return exc.reason
    return "ok"


def test_a_token_is_judged_when_the_broker_stored_the_event() -> None:
    now = time.time()
    check = authorized(TOKENS)
    short = TOKENS.issue("job", "o", jobs=["j"], ttl_s=20, now=now - 100)  # expired at now-80
    event = cancel("j", short)
    assert verdict(check, event, now - 90) == "ok"  # stored while valid, read 90 s later
    assert "expired_token" in verdict(check, event, now - 79)  # stored after it expired
    # A producer's stamp (CreateTime) proves nothing: judged now, the token has expired.
    assert "expired_token" in verdict(check, event, None)
    assert produced_at(stored(event, None)) is None
    assert produced_at(stored(event, now - 90)) == now - 90
    # Stored before the token was issued (beyond the clock skew allowed): not its event.
    assert "invalid_token" in verdict(check, event, now - 200)


def test_the_rule_names_the_job_and_the_kind() -> None:
    now = time.time()
    check = authorized(TOKENS)
    a = TOKENS.issue("job", "a", jobs=["a-*"], ttl_s=600)
    assert verdict(check, cancel("a-1", a), now) == "ok"
    assert "forbidden" in verdict(check, cancel("b-1", a), now)
    assert "missing_token" in verdict(check, cancel("a-1", None), now)
    device = TOKENS.issue("device", "d", ttl_s=600)
    assert "forbidden" in verdict(check, cancel("a-1", device), now)
    other = Tokens(secrets.token_urlsafe(32)).issue("job", "a", jobs=["a-1"], ttl_s=600)
    assert "invalid_token" in verdict(check, cancel("a-1", other), now)
    expiry = ev.JobExpired(
        event_id="x", time=now, job_id="a-1", last_seen=now - 700, reason="silent", token=a
    )
    assert "forbidden" in verdict(check, expiry, now)  # Venn's own: an admin token
    admin = TOKENS.issue("admin", "scheduler", ttl_s=600)
    assert verdict(check, msgspec.structs.replace(expiry, token=admin), now) == "ok"
    # Other events pass; no authentication: nothing is checked.
    checkin = ev.DeviceCheckin(
        event_id="ci", time=now, device_id="d", attrs={}, speed_ms_per_sample=1, bandwidth_kbps=1
    )
    assert verdict(check, checkin, now) == "ok"
    assert verdict(authorized(None), cancel("a-1", None), now) == "ok"


def test_a_registration_names_its_owners_tenant_only() -> None:
    now = time.time()
    check = authorized(TOKENS)
    a = TOKENS.issue("job", "team-a", jobs=["a-*"], ttl_s=600)

    def register(tenant: str | None, token: str) -> ev.JobRegistered:
        return ev.JobRegistered(
            event_id=f"r-{tenant}", time=now, job_id="a-1", requirement={}, demand=1,
            rounds=1, deadline_s=60.0, workload_s=1.0, token=token, tenant=tenant,
        )  # fmt: skip

    assert verdict(check, register("team-a", a), now) == "ok"
    assert verdict(check, register(None, a), now) == "ok"
    assert "forbidden" in verdict(check, register("team-b", a), now)
    admin = TOKENS.issue("admin", "operator", ttl_s=600)
    assert verdict(check, register("team-b", admin), now) == "ok"


def test_a_revocation_refuses_the_events_stored_after_it_only() -> None:
    now = time.time()
    tokens = Tokens(secrets.token_urlsafe(32))
    token = tokens.issue("job", "o", jobs=["j"], ttl_s=600, now=now - 100)
    claims = tokens.check(token, "job")
    tokens.revocations.revoke(claims.token_id, now - 50)
    check = authorized(tokens)
    assert verdict(check, cancel("j", token), now - 60) == "ok"  # a replay keeps it
    assert "revoked_token" in verdict(check, cancel("j", token), now - 50)
    with pytest.raises(AuthError, match="revoked_token"):
        tokens.check(token, "job")  # a request: revoked now
    # Kept after the token expires: a replay must still refuse what came after the revocation.
    tokens.revocations.revoke(claims.token_id, now)  # a later copy changes nothing
    assert tokens.revocations.revoked(claims.token_id, now - 50)


def test_without_the_secret_only_the_given_token_is_admitted() -> None:
    now = time.time()
    mine = TOKENS.issue("job", "coordinator", jobs=["j"], ttl_s=600)
    admin = TOKENS.issue("admin", "scheduler", ttl_s=600)
    check = authorized(GivenTokens([mine]))
    assert verdict(check, cancel("j", mine), now) == "ok"
    # Genuine, but not verifiable without the secret: not admitted (a subset, never more).
    assert "invalid_token" in verdict(check, cancel("j", admin), now)
    forged = Tokens(secrets.token_urlsafe(32)).issue("job", "coordinator", jobs=["j"], ttl_s=600)
    assert "invalid_token" in verdict(check, cancel("j", forged), now)
    assert "forbidden" in verdict(check, cancel("k", mine), now)
    with pytest.raises(RuntimeError):
        GivenTokens([mine]).issue("job", "x", ttl_s=1)


def test_a_stream_reader_skips_what_the_rule_refuses_and_its_owner_letters_it() -> None:
    now = time.time()
    token = TOKENS.issue("job", "o", jobs=["j"], ttl_s=20, now=now - 100)
    for service, letters_expected in (("scheduler", 1), ("gateway", 0)):
        records, letters = MemoryRecords(), MemoryEvents()
        stream = EventStream(records, letters, owned_by(service), check=authorized(TOKENS))
        records.add(topics.JOBS, cancel("j", token), appended_at=now - 90)  # valid then
        records.add(topics.JOBS, cancel("j", token), appended_at=now - 10)  # expired then
        records.add(topics.JOBS, cancel("j", None), appended_at=now)
        batch = asyncio.run(stream.read())
        assert len(batch.events) == 1 and batch.events[0].record.offset == 0
        assert stream.stats.bad_records == 2
        assert len(letters.published) == (2 if letters_expected else 0)
