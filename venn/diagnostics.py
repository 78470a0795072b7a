"""What a stuck asyncio process is waiting on, for its log."""

from __future__ import annotations

import asyncio
import gc
import io
import threading


def _loops() -> list[asyncio.AbstractEventLoop]:
    """Every running event loop of the process: this thread's first, then those other
    threads run (Faust's consumer runs aiokafka's group membership in a thread of its own)."""
    here = asyncio.get_running_loop()
    others = [
        o
        for o in gc.get_objects()
        if isinstance(o, asyncio.AbstractEventLoop) and o.is_running() and o is not here
    ]
    return [here, *others]


def task_stacks(limit: int = 12) -> str:
    """Every task of every running loop with the innermost ``limit`` frames it awaits in."""
    out = io.StringIO()
    for loop in _loops():
        out.write(f"-- event loop {loop!r} ({threading.active_count()} threads)\n")
        for _ in range(3):  # another thread's loop may add a task while this reads them
            try:
                tasks = list(asyncio.all_tasks(loop))
                break
            except RuntimeError:
                continue
        else:
            tasks = []
        for task in tasks:
            out.write(f"{task!r}\n")
            for where in awaits(task.get_coro())[-limit:]:
                out.write(f"  {where}\n")
    return out.getvalue()


def awaits(coro: object) -> list[str]:
    """Where a suspended coroutine waits, outermost first: its frame, the frame of what it
    awaits, and so on (`Task.print_stack` gives one frame of a suspended task)."""
    chain = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            code = frame.f_code
            chain.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return chain
