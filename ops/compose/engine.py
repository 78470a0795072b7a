"""A Docker engine for the compose check: the one answering on the default socket, or a
dockerd started here (root only) and stopped again afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


class EngineError(RuntimeError):
    pass


def docker(*args: str, timeout: float = 600.0, input: bytes | None = None) -> str:
    """`docker ARGS`; its stdout, or EngineError with its stderr."""
    done = subprocess.run(
        ["docker", *args], input=input, capture_output=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip()
        raise EngineError(f"docker {' '.join(args[:3])} exited {done.returncode}: {err[-2000:]}")
    return done.stdout.decode(errors="replace")


def answers() -> bool:
    """Whether a Docker engine answers the docker CLI."""
    if shutil.which("docker") is None:
        return False
    try:
        done = subprocess.run(["docker", "info"], capture_output=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def unavailable_reason() -> str | None:
    """Why no engine can be had here, or None: one answers, or dockerd can be started."""
    if shutil.which("docker") is None:
        return "no docker CLI (apt-get install docker.io)"
    if answers():
        return None
    if shutil.which("dockerd") is None:
        return "no Docker engine answers and there is no dockerd (apt-get install docker.io)"
    if os.geteuid() != 0:
        return "no Docker engine answers and only root may start dockerd"
    return None


@contextmanager
def engine(log_dir: Path) -> Iterator[bool]:
    """A Docker engine while the block runs; yields True if it started dockerd for it (and
    then stops it after, its log in log_dir/dockerd.log)."""
    if answers():
        yield False
        return
    reason = unavailable_reason()
    if reason is not None:
        raise EngineError(reason)
    log_path = log_dir / "dockerd.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["dockerd"], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not answers():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-3000:]
                raise EngineError(f"dockerd did not start (exit {proc.poll()}):\n{tail}")
            time.sleep(0.5)
        yield True
    finally:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
