"""The launcher's desk on loopback: how a node's ClientApps (through `venn_mod`) tell its
launcher that a task starts and ends.

The launcher serves it on 127.0.0.1 (a free port) and puts its address and a random key in
the SuperNode's environment (``VENN_FLOWER_DESK``, ``VENN_FLOWER_DESK_KEY``), which Flower
passes on to every ClientApp it starts. `DeskClient` is the ClientApp's side: the standard
library only, short timeouts, and never an exception into the app (a ClientApp started
without the launcher just runs its tasks).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
import socket
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from venn_flower.agent import NodeAgent
from venn_flower.protocol import RoundTag

log = logging.getLogger("venn_flower.desk")

DESK_ENV = "VENN_FLOWER_DESK"
KEY_ENV = "VENN_FLOWER_DESK_KEY"
KEY_HEADER = "X-Venn-Desk-Key"
TIMEOUT_S = 5.0


def _tag(body: Mapping[str, Any]) -> RoundTag | None:
    job, index = body.get("job_id"), body.get("round_index")
    if isinstance(job, str) and isinstance(index, int) and not isinstance(index, bool):
        return RoundTag(job, index)
    return None


class Desk:
    """The desk's server side, over one `NodeAgent`."""

    def __init__(self, agent: NodeAgent) -> None:
        self.agent = agent
        self.key = secrets.token_urlsafe(24)
        self.url = ""
        self._runner: web.AppRunner | None = None

    def environment(self) -> dict[str, str]:
        """What the SuperNode (and so every ClientApp) needs to reach the desk."""
        return {DESK_ENV: self.url, KEY_ENV: self.key}

    async def _body(self, request: web.Request) -> Mapping[str, Any]:
        if not hmac.compare_digest(request.headers.get(KEY_HEADER, ""), self.key):
            raise web.HTTPForbidden(text="wrong desk key")
        try:
            body = await request.json()
        except ValueError:
            raise web.HTTPBadRequest(text="not JSON") from None
        if not isinstance(body, dict):
            raise web.HTTPBadRequest(text="expected an object")
        return body

    async def start_task(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        go = self.agent.task_started(_tag(body))
        return web.json_response({"go": go})

    async def end_task(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        took = body.get("response_time_s")
        self.agent.task_ended(
            _tag(body),
            bool(body.get("ok")),
            float(took) if isinstance(took, int | float) else 0.0,
            str(body.get("reason") or ""),
        )
        return web.json_response({"ok": True})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/task/start", self.start_task)
        app.router.add_post("/task/end", self.end_task)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))  # a free port, known before the SuperNode starts
        await web.SockSite(self._runner, sock).start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


@dataclass(frozen=True)
class DeskClient:
    """A ClientApp's way to its launcher's desk."""

    url: str
    key: str

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DeskClient | None:
        env = os.environ if environ is None else environ
        url, key = env.get(DESK_ENV), env.get(KEY_ENV)
        return cls(url.rstrip("/"), key) if url and key else None

    def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        request = urllib.request.Request(
            f"{self.url}{path}",
            json.dumps(body).encode(),
            {"Content-Type": "application/json", KEY_HEADER: self.key},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
                data = json.loads(answer.read() or b"{}")
                return data if isinstance(data, dict) else None
        except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
            log.warning("venn-flower launcher desk %s: %s", self.url, exc)
            return None

    def start(self, round_tag: RoundTag | None) -> bool:
        """True: go on with the task (also when the desk does not answer)."""
        body = _body_of(round_tag)
        answer = self._post("/task/start", body)
        return True if answer is None else bool(answer.get("go", True))

    def end(
        self, round_tag: RoundTag | None, ok: bool, response_time_s: float, reason: str = ""
    ) -> bool:
        """True once the launcher took the task's end."""
        body = {
            **_body_of(round_tag),
            "ok": ok,
            "response_time_s": response_time_s,
            "reason": reason[:200],
        }
        return self._post("/task/end", body) is not None


def _body_of(round_tag: RoundTag | None) -> dict[str, Any]:
    if round_tag is None:
        return {"job_id": None, "round_index": None}
    return {"job_id": round_tag.job_id, "round_index": round_tag.round_index}
