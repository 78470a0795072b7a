"""The live dashboard on the gateway's address (issue 15, item 3).

- ``GET /``: the page (``static/index.html``; plain HTML, JS and CSS, no build step; charts
  with uPlot, vendored with its licence). Public: it holds no data.
- ``GET /static/{file}``: its scripts and styles.
- ``GET /v1/events/dashboard``: server-sent events, one ``snapshot`` event (JSON, built by
  `services.gateway.dashboard_view`) every ``SNAPSHOT_PERIOD_S``. Needs an operator
  (admin) token in ``Authorization: Bearer``, checked again before every event, so a token
  that expires or is revoked ends the stream with an ``auth`` event. The page sends the
  token it was given in its URL fragment (``/#token=...``, which browsers never send to a
  server) or typed into its login field; it keeps it in sessionStorage.

Dead letters come from venn.dead-letters, read from its beginning by a group-less consumer
(`DeadLetterFeed`, which the gateway runs); the rest from the gateway's context (the job
fold, venn.status).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path

import msgspec
from aiohttp import web

from services.gateway.context import GatewayContext
from services.gateway.dashboard_view import DeadLetterTally, RateMeter, dashboard_snapshot
from services.gateway.http import refused
from venn import events as ev
from venn.auth import AuthError, bearer
from venn.broker import topics
from venn.broker.follow import TopicFollower
from venn.settings import Settings

log = logging.getLogger("venn.gateway.dashboard")

STATIC_DIR = Path(__file__).resolve().parent / "static"
SNAPSHOT_PERIOD_S = 1.0
EVENTS_PATH = "/v1/events/dashboard"
PAGE_HEADERS = {
    # The page loads only its own files and talks only to its own origin.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}
_encode = msgspec.json.Encoder().encode


_LETTERS = ev.ALLOWED_ON[topics.DEAD_LETTERS]


class DeadLetterFeed(TopicFollower):
    """Follows venn.dead-letters from its beginning into a `DeadLetterTally`."""

    topic = topics.DEAD_LETTERS

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.tally = DeadLetterTally()
        self.bad_records = 0

    def offer(self, raw: bytes | None) -> None:
        try:
            letter = ev.decode(raw, _LETTERS, self.settings.max_event_bytes)
        except ev.InvalidEvent:
            self.bad_records += 1  # never a dead letter of a dead letter
            return
        if isinstance(letter, ev.DeadLetter):
            self.tally.add(letter)

    def refused(self) -> bool:
        # A deployment whose ACLs predate the dashboard: everything else still works.
        log.warning(
            "may not read %s: the dashboard counts no dead letters (grant the gateway read "
            "access: venn prepare --secure)",
            self.topic,
        )
        self.tally.unavailable = True
        return True


class Board:
    """The snapshot every stream sends, built at most once per period whatever the number
    of open pages."""

    def __init__(self, ctx: GatewayContext, dead_letters: DeadLetterTally, period_s: float) -> None:
        self.ctx = ctx
        self.period_s = period_s
        self.dead_letters = dead_letters
        self.assignments = RateMeter()
        self.stopping = asyncio.Event()
        self._built_at = -1.0
        self._event = b""

    def event(self) -> bytes:
        """The current ``snapshot`` event, encoded for the stream."""
        now = time.time()
        if now - self._built_at >= self.period_s * 0.5:
            ctx = self.ctx
            self.assignments.observe(now, ctx.view.assignments_seen)
            snapshot = dashboard_snapshot(
                ctx.view,
                ctx.status(),
                now,
                assignments=self.assignments,
                dead_letters=self.dead_letters,
                gateway={
                    "id": ctx.gateway_id,
                    "view_ready": ctx.view_ready(),
                    "broker_available": ctx.broker_available(),
                },
            )
            self._event = b"event: snapshot\ndata: " + _encode(snapshot) + b"\n\n"
            self._built_at = now
        return self._event


def register(
    app: web.Application,
    ctx: GatewayContext,
    dead_letters: DeadLetterTally,
    period_s: float = SNAPSHOT_PERIOD_S,
) -> Board:
    """Add the page, its files and its event stream to the gateway's app; ``dead_letters``
    is the tally a `DeadLetterFeed` keeps."""
    board = Board(ctx, dead_letters, period_s)
    page = (STATIC_DIR / "index.html").read_bytes()

    async def shutdown(_app: web.Application) -> None:
        board.stopping.set()  # open streams end now, not at the server's shutdown timeout

    app.on_shutdown.append(shutdown)

    def operator(request: web.Request) -> None:
        if ctx.tokens is not None:
            ctx.tokens.check(bearer(request.headers.get("Authorization")), "admin")

    async def index(request: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/html", headers=PAGE_HEADERS)

    async def events(request: web.Request) -> web.StreamResponse:
        try:
            operator(request)
        except AuthError as exc:
            return refused(ctx.stats, exc)
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # a proxy in front must not hold the events back
            }
        )
        await response.prepare(request)
        try:
            await response.write(f"retry: {int(period_s * 2000)}\n\n".encode())
            while not board.stopping.is_set():
                try:
                    operator(request)
                except AuthError as exc:
                    ctx.stats.unauthorized += 1
                    body = _encode({"error": exc.code, "detail": exc.detail})
                    await response.write(b"event: auth\ndata: " + body + b"\n\n")
                    break
                await response.write(board.event())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(board.stopping.wait(), period_s)
        except (ConnectionResetError, ConnectionError):
            pass  # the page went away
        return response

    app.router.add_get("/", index)
    app.router.add_static("/static/", STATIC_DIR, follow_symlinks=False)
    app.router.add_get(EVENTS_PATH, events)
    return board
