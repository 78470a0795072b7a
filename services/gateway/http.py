"""HTTP conventions every part of the gateway shares: JSON bodies, refusals, body limits and
the middlewares that keep a hostile request from costing more than a 4xx."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web

from services.gateway.models import RequestError
from services.gateway.stats import GatewayStats
from venn.auth import AuthError

log = logging.getLogger("venn.gateway")

Json = dict[str, Any]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_encode = msgspec.json.Encoder().encode

SERVER_OPTIONS: dict[str, Any] = {"auto_decompress": False}
"""How the gateway's app must be served (`web.AppRunner(app, **SERVER_OPTIONS)`): aiohttp's
parser would otherwise decompress a request body on the event loop as it arrives, before
any handler or limit sees it (a brotli body has no bound there)."""


def json_response(payload: Any, status: int = 200, retry_after: int | None = None) -> web.Response:
    # The header given, not content_type=: aiohttp parses and rebuilds that one per response.
    headers = {"Content-Type": "application/json"}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return web.Response(body=_encode(payload), status=status, headers=headers)


def answer(status: int, payload: Json) -> web.Response:
    """A device answer: a 429 carries its retry_after as a Retry-After header too."""
    retry = payload.get("retry_after")
    return json_response(payload, status, retry if status == 429 else None)


def busy(retry_after_s: int, reason: str) -> tuple[int, Json]:
    return 429, {"assigned": False, "retry_after": retry_after_s, "reason": reason}


def refused(stats: GatewayStats, exc: AuthError) -> web.Response:
    """A request without a valid token (401) or with one that does not allow it (403)."""
    stats.unauthorized += 1
    response = json_response({"error": exc.code, "detail": exc.detail}, exc.status)
    if exc.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="venn"'
    return response


async def read_body(request: web.Request, limit: int, deadline: float) -> bytes:
    """The body, at most ``limit`` bytes, by ``deadline`` (loop time); RequestError else."""
    length = request.content_length
    if length is not None and length > limit:
        raise RequestError(413, "too_large", f"the body has {length} bytes; the limit is {limit}")
    try:
        if request.content.is_eof():  # the usual small body: already buffered, no wait
            return await request.read()
        async with asyncio.timeout_at(deadline):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise RequestError(
            413, "too_large", f"the body exceeds the limit of {limit} bytes"
        ) from None
    except TimeoutError:
        raise RequestError(408, "timeout", "the body did not arrive in time") from None


@web.middleware
async def uncompressed(request: web.Request, handler: Handler) -> web.StreamResponse:
    """415 for a body with a Content-Encoding: the server runs with aiohttp's decompression
    off (`SERVER_OPTIONS`), so such a body would reach a handler as compressed bytes, and a
    1.6 KB brotli body expands to 1 GB. Refused before it is read."""
    if "Content-Encoding" not in request.headers:  # nearly every request: no list built
        return await handler(request)
    codings = [
        c.strip().lower()
        for value in request.headers.getall("Content-Encoding", ())
        for c in value.split(",")
    ]
    compressed = [c for c in codings if c not in ("", "identity")]
    if not compressed:
        return await handler(request)
    response = json_response(
        {
            "error": "unsupported_encoding",
            "detail": f"request bodies are never decompressed here (Content-Encoding: "
            f"{', '.join(compressed)}): send the body uncompressed",
        },
        415,
    )
    response.headers["Accept-Encoding"] = "identity"  # RFC 7694
    response.force_close()  # the unread body is not drained either
    return response


def errors(stats: GatewayStats, retry_after_s: int) -> Callable[..., Any]:
    """Middleware: JSON bodies for aiohttp's own 4xx; an unexpected failure is a 429, never
    a 5xx."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status >= 500 or exc.status < 400:
                raise
            body = {"error": exc.reason.lower().replace(" ", "_"), "detail": exc.text or ""}
            response = json_response(body, exc.status)
            if "Allow" in exc.headers:  # a 405 must say which methods are allowed (RFC 9110)
                response.headers["Allow"] = exc.headers["Allow"]
            return response
        except asyncio.CancelledError:
            raise
        except Exception:
            stats.internal_errors += 1
            log.exception("gateway failed on %s %s", request.method, request.path)
            return answer(*busy(retry_after_s, "gateway_error"))

    return middleware
