"""Tokens for processes of a deployment that hold its secret (the demo's coordinators and
fleet, the SDK example run beside `venn up`): they mint what they need. Everyone else is
given a token (`venn token ...`)."""

from __future__ import annotations

from collections.abc import Iterable

from venn.auth.tokens import GivenTokens, Tokens
from venn.settings import Settings

JOB_TOKEN_TTL_S = 7 * 86400.0
DASHBOARD_TOKEN_TTL_S = 12 * 3600.0
"""Lifetime of the operator token in the dashboard URL `venn up` prints."""


def issuer(settings: Settings) -> Tokens | None:
    return Tokens(settings.auth_secret) if settings.auth_enabled else None


def job_token(settings: Settings, jobs: Iterable[str], owner: str = "local") -> str | None:
    """VENN_JOB_TOKEN when given; else one minted for ``jobs`` (None: no authentication)."""
    if settings.job_token:
        return settings.job_token
    tokens = issuer(settings)
    if tokens is None:
        return None
    return tokens.issue("job", owner, jobs=list(jobs), ttl_s=JOB_TOKEN_TTL_S)


def verifier(settings: Settings, token: str | None) -> Tokens | None:
    """What checks job events in a process that acts with ``token``: the deployment's secret
    where it has it, else only ``token`` itself (`GivenTokens`); None: no authentication."""
    tokens = issuer(settings)
    if tokens is not None or token is None:
        return tokens
    return GivenTokens([token])


def dashboard_url(
    settings: Settings, port: int | None = None, ttl_s: float = DASHBOARD_TOKEN_TTL_S
) -> str:
    """The gateway's dashboard page (``port``: the gateway's, default VENN_GATEWAY_PORT).
    With authentication it carries a fresh operator token in the URL fragment, which a
    browser never sends to a server; the page moves it into the tab's sessionStorage."""
    host = settings.gateway.host
    host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    host = f"[{host}]" if ":" in host else host
    url = f"http://{host}:{port or settings.gateway.port}/"
    if settings.auth_enabled:
        token = Tokens(settings.auth_secret).issue("admin", "dashboard", ttl_s=ttl_s)
        url += f"#token={token}"
    return url
