"""Waiting for a condition, never for a fixed time: one sync and one async poller."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` every half second (it may ask a process over HTTP or a database);
    AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


async def until(condition: Callable[[], bool], timeout: float = 20.0, what: str = "it") -> None:
    """Poll ``condition`` (cheap: in this process) every 50 ms without blocking the loop;
    AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        await asyncio.sleep(0.05)
