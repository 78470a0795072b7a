"""Is the audit database there? A watch the recorder runs beside its writes.

The recorder retries a database it cannot reach with backoff, so its consumer simply
stops advancing; its ``/healthz`` looked only at the broker and said ``ok`` for minutes
while the embedded PostgreSQL was down (issue 34, item 1). The watch runs ``SELECT 1``
every ``interval_s`` (in a thread: the driver blocks) and says the database is
unavailable after ``grace_s`` without an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from venn.audit.db import normalize_url

log = logging.getLogger(__name__)


@dataclass
class DatabaseWatch:
    url: str
    interval_s: float = 1.0
    grace_s: float = 3.0
    """How long without an answer before the database counts as unavailable."""
    timeout_s: float = 2.0
    """Connect and statement timeout of one probe."""
    last_ok: float = field(default_factory=time.monotonic)
    checks: int = 0
    failures: int = 0
    last_error: str | None = None
    _engine: Engine | None = None
    _task: asyncio.Task[None] | None = None

    @property
    def available(self) -> bool:
        return time.monotonic() - self.last_ok <= self.grace_s

    def status(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "seconds_since_answer": round(time.monotonic() - self.last_ok, 1),
            "failed_checks": self.failures,
            "last_error": self.last_error,
        }

    def probe(self) -> bool:
        """One ``SELECT 1`` on a fresh connection (blocking, bounded by ``timeout_s``)."""
        if self._engine is None:
            url = normalize_url(self.url)
            args: dict[str, Any] = {}
            if url.startswith("postgresql"):
                ms = int(self.timeout_s * 1000)
                args = {
                    "connect_timeout": max(1, int(self.timeout_s)),
                    "options": f"-c statement_timeout={ms}",
                }
            self._engine = create_engine(url, poolclass=NullPool, connect_args=args)
        try:
            with self._engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except SQLAlchemyError as exc:
            self.last_error = type(getattr(exc, "orig", None) or exc).__name__
            return False
        self.last_error = None
        return True

    async def check(self) -> bool:
        was = self.available
        ok = await asyncio.to_thread(self.probe)
        self.checks += 1
        if ok:
            self.last_ok = time.monotonic()
        else:
            self.failures += 1
        if was != self.available:
            log.warning("audit database %s", "is back" if ok else "is unavailable")
        return ok

    async def run(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name="database-watch")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
