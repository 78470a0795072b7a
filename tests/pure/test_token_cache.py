"""Verified tokens are remembered by their string, and only their signature and format are:
expiry, revocation and kind are judged on every check, as before the cache."""

from __future__ import annotations

import gc

import pytest

from venn.auth import AuthError, Tokens

SECRET = "a-test-secret-of-at-least-32-bytes!"


def test_a_cached_token_still_expires_is_still_revoked_and_keeps_its_kind() -> None:
    tokens = Tokens(SECRET)
    token = tokens.issue("device", "dev-1", ttl_s=60, now=1000.0)
    claims = tokens.check(token, "device", at=1010.0)
    assert tokens.check(token, "device", at=1020.0) == claims  # the cached path
    with pytest.raises(AuthError) as expired:
        tokens.check(token, "device", at=1061.0)
    assert expired.value.code == "expired_token"
    with pytest.raises(AuthError) as kind:
        tokens.check(token, "job", at=1020.0)
    assert kind.value.status == 403
    tokens.revocations.revoke(claims.token_id, 1030.0)
    assert tokens.check(token, "device", at=1025.0) == claims  # judged at the event's time
    with pytest.raises(AuthError) as revoked:
        tokens.check(token, "device", at=1031.0)
    assert revoked.value.code == "revoked_token"


def test_a_forged_or_tampered_token_is_never_remembered() -> None:
    tokens = Tokens(SECRET, cache_size=4)
    other = Tokens("another-secret-of-at-least-32-bytes")
    forged = other.issue("admin", "mallory", ttl_s=60)
    for _ in range(2):  # the second time too: a refusal is not cached as anything
        with pytest.raises(AuthError) as refused:
            tokens.check(forged, "device")
        assert refused.value.code == "invalid_token"
    good = tokens.issue("device", "dev-1", ttl_s=60)
    tokens.check(good, "device")
    head, body, signature = good.split(".")
    tampered = ".".join((head, body, signature[:-2] + ("AA" if signature[-2:] != "AA" else "BB")))
    with pytest.raises(AuthError):
        tokens.check(tampered, "device")


def test_the_cache_holds_at_most_its_size_oldest_out_first() -> None:
    tokens = Tokens(SECRET, cache_size=3)
    issued = [tokens.issue("device", f"dev-{i}", ttl_s=60) for i in range(5)]
    for token in issued:
        tokens.check(token, "device")
    assert list(tokens._verified) == issued[2:]
    assert tokens.check(issued[0], "device").subject == "dev-0"  # verified again, not lost


def test_remembered_tokens_are_not_traversed_by_the_collector() -> None:
    """A gateway remembers tens of thousands of device tokens; each entry an object the
    collector tracks made every full collection (an event-loop stall) longer."""
    tokens = Tokens(SECRET)
    issued = [
        tokens.issue("job", f"owner-{i}", jobs=[f"job-{i}", "team-*"], ttl_s=60) for i in range(3)
    ]
    claims = [tokens.check(token, "job") for token in issued]
    gc.collect()  # the jobs' tuple stops being tracked, then the entry holding it
    gc.collect()
    assert not any(gc.is_tracked(entry) for entry in tokens._verified.values())
    assert [tokens.check(token, "job") for token in issued] == claims  # the cached path
    assert claims[1].jobs == ("job-1", "team-*")
