"""Is the broker there? A watch every service runs beside its Kafka clients.

Kafka clients hide a lost broker: they buffer, retry and reconnect, and a consumer simply
fetches nothing. So a service kept answering from a stale view while its broker was gone
(issue 12, defect 6). The watch asks the bootstrap servers for metadata every
``interval_s`` (the same cheap probe the launchers wait on) and says the broker is
unavailable after ``grace_s`` without an answer; health endpoints turn red, and the
gateway refuses check-ins instead of answering from what it saw last. The clients
themselves reconnect on their own once the broker is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from venn.broker.security import Credentials, librdkafka_options
from venn.net import split_address

log = logging.getLogger(__name__)


@dataclass
class BrokerWatch:
    bootstrap: str
    credentials: Credentials | None = None
    """A SASL listener refuses a bare metadata request: then the probe signs in first."""
    interval_s: float = 1.0
    grace_s: float = 3.0
    """How long without any answer before the broker counts as unavailable."""
    last_ok: float = field(default_factory=time.monotonic)
    checks: int = 0
    failures: int = 0
    _reported: bool = True
    _task: asyncio.Task[None] | None = None
    _admin: Any = None

    @property
    def available(self) -> bool:
        return time.monotonic() - self.last_ok <= self.grace_s

    def status(self) -> dict[str, object]:
        return {
            "broker": self.bootstrap,
            "available": self.available,
            "seconds_since_answer": round(time.monotonic() - self.last_ok, 1),
            "failed_checks": self.failures,
        }

    def probe(self) -> bool:
        """One check: any bootstrap server answers metadata (blocking; short timeouts)."""
        if self.credentials is not None:
            return self._probe_signed_in()
        for address in self.bootstrap.split(","):
            try:
                host, port = split_address(address.strip())
            except ValueError:
                continue
            if metadata_brokers(host, port, timeout=min(1.0, self.interval_s)) is not None:
                return True
        return False

    def _probe_signed_in(self) -> bool:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient(
                {
                    "bootstrap.servers": self.bootstrap,
                    "log_level": 0,  # its own reconnect noise; the watch reports the state
                    **librdkafka_options(self.credentials),
                }
            )
        try:
            return bool(self._admin.list_topics(timeout=min(2.0, self.interval_s * 2)).brokers)
        except KafkaException:
            return False

    async def check(self) -> bool:
        ok = await asyncio.to_thread(self.probe)
        self.checks += 1
        if ok:
            self.last_ok = time.monotonic()
        else:
            self.failures += 1
        if self._reported != self.available:
            self._reported = self.available
            log.warning("broker %s %s", self.bootstrap, "is back" if ok else "is unavailable")
        return ok

    async def run(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name="broker-watch")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


_METADATA = 3
_METADATA_VERSION = 4  # supported by Tansu and by Apache Kafka 4 (which removed v0-v3)


def metadata_brokers(host: str, port: int, timeout: float) -> int | None:
    """Ask a Kafka-protocol broker for metadata on no topic (so nothing is auto-created);
    the number of brokers it knows, or None when it does not answer."""
    client_id = b"venn-probe"
    body = struct.pack(">hhih", _METADATA, _METADATA_VERSION, 1, len(client_id)) + client_id
    body += struct.pack(">i?", 0, False)  # topics: empty array; allow_auto_topic_creation
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            size, correlation = struct.unpack(">ii", _recv_exact(s, 8))
            if correlation != 1 or size < 12:
                return None
            _throttle, brokers = struct.unpack(">ii", _recv_exact(s, 8))
            return int(brokers)
    except OSError:
        return None


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return buf
