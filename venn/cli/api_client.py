"""The CLI's side of the job API: where the gateway is, which token to send, and one
request with its errors turned into one-line messages (`ApiFailure`)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from venn.auth import Tokens
from venn.settings import Settings, stack_ports

ADMIN_TTL_S = 600.0
RETRY_429_S = 10.0


class ApiFailure(Exception):
    """A request that did not succeed: ``code`` is the CLI's exit code (1: the stack or the
    broker is not there; 2: the request was refused, e.g. unknown job, malformed spec)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ApiClient:
    url: str
    token: str | None
    timeout: float = 15.0

    @classmethod
    def locate(cls, url: str | None = None, token: str | None = None) -> ApiClient:
        """Flags first, then VENN_API_URL/VENN_API_TOKEN, then the run dir of `venn up`
        (its gateway port; an operator token minted with its secret)."""
        settings = Settings.from_env()
        url = url or settings.cli.api_url
        if not url:
            port = stack_ports(settings.run_dir).get("gateway", settings.gateway.port)
            url = f"http://{settings.gateway.host}:{port}"
        token = token or settings.cli.api_token
        if not token and settings.auth_enabled:
            token = Tokens(settings.auth_secret).issue("admin", "venn-cli", ttl_s=ADMIN_TTL_S)
        return cls(url.rstrip("/"), token)

    def request(self, method: str, path: str, body: bytes | None = None) -> Any:
        headers = {"Content-Type": "application/yaml"} if body is not None else {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        deadline = time.monotonic() + RETRY_429_S
        while True:
            req = urllib.request.Request(self.url + path, data=body, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as response:
                    return json.loads(response.read() or b"null")
            except urllib.error.HTTPError as exc:
                try:
                    payload = json.loads(exc.read() or b"{}")
                except ValueError:
                    payload = {}
                if exc.code == 429 and time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                detail = payload.get("detail") or payload.get("reason") or exc.reason
                error = payload.get("error") or payload.get("reason") or str(exc.code)
                code = 1 if exc.code == 429 or exc.code >= 500 else 2
                raise ApiFailure(f"{error} ({exc.code}): {detail}", code) from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                raise ApiFailure(
                    f"the stack is not up: no gateway answers at {self.url} ({reason}); "
                    "start it with `venn up` or pass --url",
                    1,
                ) from None
