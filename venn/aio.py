"""asyncio helpers for code that awaits what other libraries hand it."""

from __future__ import annotations

import asyncio


def being_cancelled() -> bool:
    """Whether the running task was asked to stop (`Task.cancel`): a `CancelledError` it
    raises then is its own. Otherwise the error came from a future it awaited that someone
    else cancelled, and ending the task (or its caller) with it would be a silent stop."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
