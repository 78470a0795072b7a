"""Signed API tokens: who may check in as a device, act on a job, or enrol devices.

Tokens are JWTs (PyJWT, HS256) signed with the deployment's secret (`VENN_AUTH_SECRET`,
from the environment; never in the repository). Every Venn service that checks tokens
holds the secret, so checking one needs no lookup; a token is revoked by publishing its id
(`jti`) on venn.revocations, which every checker follows.

Kinds and what they allow:
- ``device``: check in and upload results as the device named in ``sub`` (issued at
  enrolment, `POST /v1/devices`);
- ``job``: register, request rounds of, close, finish and cancel the jobs listed in
  ``jobs`` (an id, or a prefix ending in ``*``); a token of job A cannot touch job B;
- ``enroll``: enrol devices (given to whoever provisions a fleet);
- ``gateway``: vouch for the supply counts of the gateway named in ``sub`` (a gateway
  issues its own, short-lived, for its supply reports);
- ``admin``: everything.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import jwt

Kind = Literal["device", "job", "enroll", "gateway", "admin"]
KINDS: tuple[Kind, ...] = ("device", "job", "enroll", "gateway", "admin")
ALGORITHM = "HS256"
ISSUER = "venn"
MIN_SECRET_BYTES = 32  # HS256 wants a key at least as long as its output
CLOCK_SKEW_S = 60.0
"""How far the clock of a token's issuer may run ahead of the clock that judges it."""
VERIFIED_CACHE = 100_000
"""Verified tokens a checker remembers (a few hundred bytes each): a device checking in
again within a gateway's last this-many check-ins costs a lookup, not an HMAC and a JSON
parse (about 25-40 µs of the gateway's CPU per check-in)."""


class AuthError(Exception):
    """A request without the right to do what it asks: HTTP ``status`` (401: no valid
    token; 403: a valid token that does not allow this) and a stable ``code``."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class Claims:
    kind: Kind
    subject: str
    token_id: str
    expires_at: float
    jobs: tuple[str, ...] = ()

    def may_act_on_job(self, job_id: str) -> bool:
        if self.kind == "admin":
            return True
        if self.kind != "job":
            return False
        return any(job_id.startswith(p[:-1]) if p.endswith("*") else job_id == p for p in self.jobs)

    def require_job(self, job_id: str) -> None:
        if not self.may_act_on_job(job_id):
            raise AuthError(403, "forbidden", f"this token may not act on job {job_id!r}")

    def require_device(self, device_id: str) -> None:
        if self.kind == "admin":
            return
        if self.kind != "device" or self.subject != device_id:
            raise AuthError(403, "forbidden", f"this token may not act as device {device_id!r}")


@dataclass
class Revocations:
    """Revoked token ids, each with the time it was revoked.

    Kept for good, as venn.revocations (compacted) keeps them: an event of a job is judged
    at the time it was produced (`Tokens.check`'s ``at``), so a reader that replays the log
    long after a token expired must still know that it was revoked before some of its
    events. One entry per revoked token."""

    since: dict[str, float] = field(default_factory=dict)

    def revoke(self, token_id: str, at: float) -> None:
        """``token_id`` is refused from ``at`` on (the earliest revocation counts)."""
        self.since[token_id] = min(at, self.since.get(token_id, at))

    def revoked(self, token_id: str, at: float | None = None) -> bool:
        """Whether ``token_id`` was revoked at time ``at`` (None: by now, whenever)."""
        since = self.since.get(token_id)
        return since is not None and (at is None or since <= at)

    def __contains__(self, token_id: object) -> bool:
        return isinstance(token_id, str) and token_id in self.since


_Verified = tuple[Kind, str, str, float, tuple[str, ...], float]
"""A verified token's kind, subject, id, expiry, jobs and issue time: a tuple of strings
and numbers, which the garbage collector stops tracking, where a `Claims` and its pair were
two objects it traversed at every full collection per remembered token (a gateway that
had seen 50,000 devices spent about half of each full collection on them: issue 34, the
flood)."""


class Tokens:
    """Issues and checks the deployment's tokens."""

    def __init__(
        self,
        secret: str,
        revocations: Revocations | None = None,
        cache_size: int = VERIFIED_CACHE,
    ) -> None:
        if len(secret.encode()) < MIN_SECRET_BYTES:
            raise ValueError(f"VENN_AUTH_SECRET must be at least {MIN_SECRET_BYTES} bytes")
        self._secret = secret
        self.revocations = revocations or Revocations()
        self._verified: dict[str, _Verified] = {}
        """Token -> its claims and issue time, for tokens whose signature and format were
        verified: the same string verifies the same way, so only what changes with time
        (expiry, revocation) is judged again. Oldest entries go first past ``cache_size``."""
        self._cache_size = cache_size

    def issue(
        self,
        kind: Kind,
        subject: str,
        *,
        ttl_s: float,
        jobs: Iterable[str] = (),
        now: float | None = None,
    ) -> str:
        if kind not in KINDS:
            raise ValueError(f"unknown token kind {kind!r}")
        issued = time.time() if now is None else now
        claims = {
            "iss": ISSUER,
            "kind": kind,
            "sub": subject,
            "jti": uuid.uuid4().hex,
            "iat": int(issued),
            "exp": int(issued + ttl_s),
            "jobs": list(jobs),
        }
        return jwt.encode(claims, self._secret, algorithm=ALGORITHM)

    def check(self, token: str | None, *kinds: Kind, at: float | None = None) -> Claims:
        """The token's claims if it is valid, unrevoked and of one of ``kinds`` (admin
        tokens always qualify) at time ``at``; AuthError otherwise. ``at`` None is now (a
        request); an event on Kafka is judged at the time the broker stored it
        (`venn.auth.checks`), so a reader that reads it late judges it as one that read it
        at once."""
        if not token:
            raise AuthError(401, "missing_token", "send Authorization: Bearer <token>")
        when = time.time() if at is None else at
        kind, subject, token_id, expires_at, jobs, issued_at = self._verified.get(
            token
        ) or self._verify(token)
        if expires_at <= when:
            raise AuthError(401, "expired_token", "the token has expired")
        if issued_at > when + CLOCK_SKEW_S:
            raise AuthError(401, "invalid_token", "the token was issued after this was sent")
        if self.revocations.revoked(token_id, at):
            raise AuthError(401, "revoked_token", "the token has been revoked")
        if kind != "admin" and kinds and kind not in kinds:
            raise AuthError(403, "forbidden", f"a {kind} token cannot do this")
        return Claims(kind, subject, token_id, expires_at, jobs)

    def _verify(self, token: str) -> _Verified:
        """The claims and issue time of a well-formed token signed with the secret (cached);
        AuthError 401 if it is not one."""
        try:
            raw = self._decode(token)
            expires_at = float(raw["exp"])
            issued_at = float(raw.get("iat", 0))
        except (jwt.InvalidTokenError, TypeError, ValueError, OverflowError) as exc:
            raise AuthError(401, "invalid_token", f"the token is not valid ({exc})") from None
        kind = raw.get("kind")
        if kind not in KINDS:
            raise AuthError(401, "invalid_token", "the token has no known kind")
        verified: _Verified = (
            cast(Kind, kind),
            str(raw["sub"]),
            str(raw["jti"]),
            expires_at,
            tuple(str(j) for j in raw.get("jobs") or ()),
            issued_at,
        )
        if self._cache_size > 0:
            if len(self._verified) >= self._cache_size:
                del self._verified[next(iter(self._verified))]
            self._verified[token] = verified
        return verified

    def _decode(self, token: str) -> dict[str, Any]:
        """The claims of a token signed with the secret (InvalidTokenError if not). exp and
        iat are left to `check`, which judges them at its ``at``: PyJWT only knows now."""
        return jwt.decode(
            token,
            self._secret,
            algorithms=[ALGORITHM],
            issuer=ISSUER,
            options={
                "require": ["exp", "jti", "sub", "iss"],
                "verify_exp": False,
                "verify_iat": False,
            },
        )


class GivenTokens(Tokens):
    """The check of a process without the secret, which cannot verify a signature (HS256 is
    symmetric): it takes only the tokens it was given (a coordinator's VENN_JOB_TOKEN, from
    the deployment) and judges them by the same rules. A subset of what `Tokens` admits,
    never more; it issues nothing."""

    def __init__(self, given: Iterable[str], revocations: Revocations | None = None) -> None:
        self._given = frozenset(given)
        self.revocations = revocations or Revocations()
        self._verified = {}
        self._cache_size = len(self._given)

    def issue(self, *args: Any, **kwargs: Any) -> str:
        raise RuntimeError("a process without VENN_AUTH_SECRET issues no token")

    def _decode(self, token: str) -> dict[str, Any]:
        if token not in self._given:
            raise jwt.InvalidTokenError("not a token this process was given (no secret here)")
        return jwt.decode(
            token,
            algorithms=[ALGORITHM],
            issuer=ISSUER,
            options={"verify_signature": False, "require": ["exp", "jti", "sub", "iss"]},
        )


def subject_of(token: str) -> str | None:
    """Who a token says it belongs to (``sub``), unverified: for its holder, which has no
    secret (a coordinator stamping its tenant); whoever checks the token verifies it.
    None if it is not a token."""
    try:
        raw = jwt.decode(token, algorithms=[ALGORITHM], options={"verify_signature": False})
    except jwt.InvalidTokenError:
        return None
    sub = raw.get("sub")
    return str(sub) if sub is not None else None


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None
