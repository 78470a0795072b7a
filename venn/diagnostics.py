"""What a stuck asyncio process is waiting on, for its log."""

from __future__ import annotations

import asyncio
import io


def task_stacks(limit: int = 8) -> str:
    """Every task of the running loop with the innermost ``limit`` frames of its stack."""
    out = io.StringIO()
    for task in asyncio.all_tasks():
        task.print_stack(limit=limit, file=out)
    return out.getvalue()
