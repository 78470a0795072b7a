"""The ClientApp side: a mod that reports every Venn-assigned task's result to Venn's
gateway with the node's own device token, and the handler that tells the ServerApp which
Venn device this node is.

    app = ClientApp(mods=[venn_mod])
    answer_venn_queries(app)

The gateway's address and the device token come from the environment the node's launcher
(`python -m venn.integrations.flower.supernode`) gives its SuperNode, which Flower passes
on to every ClientApp it starts: ``VENN_GATEWAY_URL`` and ``VENN_DEVICE_TOKEN`` (a node
config key ``venn-gateway`` overrides the address).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable

from venn.integrations.flower.profile import NodeProfile
from venn.integrations.flower.protocol import QUERY_ACTION, RoundTag, device_answer, tag_of
from venn.settings import Settings, env_name

log = logging.getLogger("venn.flower")

GATEWAY_ENV = env_name("flower", "gateway_url")
TOKEN_ENV = env_name("flower", "device_token")
GATEWAY_KEY = "venn-gateway"
REPORT_ATTEMPTS = 3


@dataclass(frozen=True)
class ResultReporter:
    """Posts a node's results to `POST /v1/results` of the gateway."""

    gateway: str
    device_id: str
    token: str | None

    @classmethod
    def for_node(
        cls, node_config: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> ResultReporter:
        flower = Settings.from_env(environ, running=False).flower
        profile = NodeProfile.from_node_config(node_config)
        gateway = node_config.get(GATEWAY_KEY) or flower.gateway_url
        if not isinstance(gateway, str) or not gateway:
            raise RuntimeError(
                f"no Venn gateway for node {profile.device_id}: set {GATEWAY_ENV} (the "
                f"launcher does) or the node config key {GATEWAY_KEY}"
            )
        return cls(gateway.rstrip("/"), profile.device_id, flower.device_token or None)

    def report(self, round_tag: RoundTag, ok: bool, response_time_s: float, reason: str) -> bool:
        """True once the gateway accepted the result. A refusal is logged, not raised: the
        round's close releases the node anyway."""
        body = {
            "device_id": self.device_id,
            "job_id": round_tag.job_id,
            "round_index": round_tag.round_index,
            "ok": ok,
            "response_time_s": max(0.0, response_time_s),
            "reason": reason[:200] or None,
        }
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        for attempt in range(REPORT_ATTEMPTS):
            request = urllib.request.Request(
                f"{self.gateway}/v1/results", json.dumps(body).encode(), headers, method="POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    return bool(200 <= answer.status < 300)
            except urllib.error.HTTPError as exc:
                if exc.code != 429:
                    log.warning("Venn refused the result of %s: %s", self.device_id, exc)
                    return False
                retry = float(exc.headers.get("Retry-After") or 1)
            except OSError as exc:
                log.warning("Venn gateway unreachable (%s), try %d", exc, attempt + 1)
                retry = 1.0
            time.sleep(min(retry, 5.0))
        return False


def venn_mod(message: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Runs the task; if Venn assigned it, reports the result (ok, or the error) to Venn,
    which frees the node for its next assignment."""
    round_tag = tag_of(message)
    if round_tag is None:
        return call_next(message, context)
    reporter = ResultReporter.for_node(context.node_config)
    started = time.monotonic()
    try:
        reply = call_next(message, context)
    except Exception as exc:
        reporter.report(round_tag, False, time.monotonic() - started, repr(exc))
        raise
    reason = (reply.error.reason or "error") if reply.has_error() else ""
    reporter.report(round_tag, not reply.has_error(), time.monotonic() - started, reason)
    return reply


def answer_venn_queries(app: ClientApp) -> None:
    """Register the ``query.venn`` handler: the node's Venn device id, from its config."""

    @app.query(QUERY_ACTION)
    def venn_device(message: Message, context: Context) -> Message:
        return device_answer(message, NodeProfile.from_node_config(context.node_config).device_id)
