"""`GET /v1/wanted`: what the open rounds can still use, published (issue 35, item 2).

Apple's on-device FL system (Paulik et al. 2021) has devices judge their eligibility
locally against what the server publishes. This document lists the requirements of the
rounds open with demand left (a device that one of them admits, every attribute at least
its threshold, may be wanted; one that none admits is not) and the pace of
`venn/core/pace.py`. It changes only when a round opens, fills or ends, so it carries an
ETag (a hash of its bytes) and ``Cache-Control: public, max-age`` (VENN_GATEWAY_WANTED_MAX_AGE_S):
a device, or any HTTP cache in front of the gateways, asks again with If-None-Match and gets
304 while it holds. A device no requirement admits still checks in at the idle pace: its
check-ins are the supply the scheduler plans with (a device that never checks in is a
device the scheduler cannot count).

``complete`` is false while the gateway has not read venn.jobs and venn.rounds to their
end: the list may then miss open rounds, and a device should check in at the base pace.
"""

from __future__ import annotations

import hashlib

import msgspec
from aiohttp import web

from services.gateway.context import GatewayContext
from services.gateway.demand import DemandView
from services.gateway.http import refused
from venn.auth import AuthError, bearer
from venn.core.model import Requirement
from venn.core.pace import Pace

_encode = msgspec.json.Encoder().encode


class WantedDocument:
    """The document's bytes and ETag, made again only when what it says changed."""

    def __init__(self, view: DemandView, pace: Pace) -> None:
        self.view = view
        self.pace = pace
        self._said: tuple[tuple[Requirement, ...], bool] | None = None
        self.body = b""
        self.etag = ""

    def current(self, complete: bool) -> tuple[bytes, str]:
        """(body, ETag) of the document now."""
        said = (self.view.open_requirements(), complete)
        if said != self._said:
            self._said = said
            requirements = sorted(said[0], key=lambda r: r.thresholds)
            pace = self.pace
            self.body = _encode(
                {
                    "complete": complete,
                    "requirements": [r.as_dict() for r in requirements],
                    "pace": {
                        "wanted_s": pace.wanted_s,
                        "base_s": pace.base_s,
                        "idle_s": pace.idle_s,
                        "jitter": pace.jitter,
                    },
                }
            )
            self.etag = '"' + hashlib.sha256(self.body).hexdigest()[:20] + '"'
        return self.body, self.etag


def _matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an If-None-Match header names ``etag`` (a weak match, as RFC 9110 asks)."""
    if not if_none_match:
        return False
    if if_none_match.strip() == "*":
        return True
    tags = (t.strip().removeprefix("W/") for t in if_none_match.split(","))
    return etag in tags


def register(app: web.Application, ctx: GatewayContext) -> None:
    document = WantedDocument(ctx.view, ctx.config.pace)
    cache = f"public, max-age={ctx.config.wanted_max_age_s}"

    async def wanted(request: web.Request) -> web.Response:
        if ctx.tokens is not None:
            try:
                ctx.tokens.check(bearer(request.headers.get("Authorization")), "device")
            except AuthError as exc:
                return refused(ctx.stats, exc)
        body, etag = document.current(ctx.view_ready())
        headers = {"ETag": etag, "Cache-Control": cache}
        if _matches(request.headers.get("If-None-Match"), etag):
            ctx.stats.wanted_not_modified += 1
            return web.Response(status=304, headers=headers)
        ctx.stats.wanted_served += 1
        headers["Content-Type"] = "application/json"
        return web.Response(body=body, headers=headers)

    app.router.add_get("/v1/wanted", wanted)
