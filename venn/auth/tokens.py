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
- ``admin``: everything.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, cast

import jwt

Kind = Literal["device", "job", "enroll", "admin"]
KINDS: tuple[Kind, ...] = ("device", "job", "enroll", "admin")
ALGORITHM = "HS256"
ISSUER = "venn"
MIN_SECRET_BYTES = 32  # HS256 wants a key at least as long as its output


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
    """Revoked token ids, each kept until the token would have expired anyway."""

    until: dict[str, float] = field(default_factory=dict)

    def revoke(self, token_id: str, expires_at: float) -> None:
        self.until[token_id] = max(expires_at, self.until.get(token_id, 0.0))

    def __contains__(self, token_id: object) -> bool:
        return isinstance(token_id, str) and token_id in self.until

    def forget_expired(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        for token_id in [t for t, until in self.until.items() if until < now]:
            del self.until[token_id]


class Tokens:
    """Issues and checks the deployment's tokens."""

    def __init__(self, secret: str, revocations: Revocations | None = None) -> None:
        if len(secret.encode()) < MIN_SECRET_BYTES:
            raise ValueError(f"VENN_AUTH_SECRET must be at least {MIN_SECRET_BYTES} bytes")
        self._secret = secret
        self.revocations = revocations or Revocations()

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

    def check(self, token: str | None, *kinds: Kind) -> Claims:
        """The token's claims if it is valid, unexpired, unrevoked and of one of ``kinds``
        (admin tokens always qualify); AuthError otherwise."""
        if not token:
            raise AuthError(401, "missing_token", "send Authorization: Bearer <token>")
        try:
            raw = jwt.decode(
                token,
                self._secret,
                algorithms=[ALGORITHM],
                issuer=ISSUER,
                options={"require": ["exp", "jti", "sub", "iss"]},
            )
        except jwt.ExpiredSignatureError:
            raise AuthError(401, "expired_token", "the token has expired") from None
        except jwt.InvalidTokenError as exc:
            raise AuthError(401, "invalid_token", f"the token is not valid ({exc})") from None
        kind = raw.get("kind")
        if kind not in KINDS:
            raise AuthError(401, "invalid_token", "the token has no known kind")
        claims = Claims(
            kind=cast(Kind, kind),
            subject=str(raw["sub"]),
            token_id=str(raw["jti"]),
            expires_at=float(raw["exp"]),
            jobs=tuple(str(j) for j in raw.get("jobs") or ()),
        )
        if claims.token_id in self.revocations:
            raise AuthError(401, "revoked_token", "the token has been revoked")
        if kind != "admin" and kinds and kind not in kinds:
            raise AuthError(403, "forbidden", f"a {kind} token cannot do this")
        return claims


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None
