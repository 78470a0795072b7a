"""Start and stop a scheduler worker process (for the launcher and the tests)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]


def start_worker(
    env: Mapping[str, str], log: IO[bytes] | None = None, level: str = "warn"
) -> subprocess.Popen[bytes]:
    """`python -m services.scheduler worker` with `env` on top of this process's env."""
    return subprocess.Popen(
        [sys.executable, "-m", "services.scheduler", "worker", "-l", level],
        cwd=ROOT,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        stdout=log if log is not None else subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )


def stop_worker(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """SIGTERM, then SIGKILL after `timeout`: a Faust worker can hang in wait_empty."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_worker(proc)
    return proc.wait()


def kill_worker(proc: subprocess.Popen[bytes]) -> int:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGKILL)
    return proc.wait()
