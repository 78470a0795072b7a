"""Child processes of the local stack (brokers, Postgres, services): private files, liveness,
stopping."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

PRIVATE_UMASK = 0o077
"""The umask of the stack's processes (brokers, services, the database's tools): what they
create (Kafka's segments, which hold job tokens; logs; Faust's data) is their owner's
alone (issue 26: segments and server.properties, which holds the Kafka admin password,
were 0644)."""


def private_dir(path: str | Path, passage: bool = False) -> Path:
    """``path`` created if need be, mode 0700 (0701 with ``passage``: others may pass
    through it to a path they know, never list it)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o701 if passage else 0o700)
    return path


def write_private(path: str | Path, text: str) -> None:
    """Write ``text`` to a file only its owner may read (0600, also if it existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def open_private_log(path: str | Path) -> int:
    """A file descriptor appending to ``path`` (0600), for a child's output."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(fd, 0o600)
    return fd


def tighten(root: str | Path) -> None:
    """Directories 0700 and files 0600 under ``root``, for those this user owns (a run dir
    made before its files were private; another user's, the database's, are left as
    they are)."""
    me = os.geteuid()
    for top, dirs, files in os.walk(root):
        for name, mode in [*((d, 0o700) for d in dirs), *((f, 0o600) for f in files)]:
            path = os.path.join(top, name)
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                if st.st_uid == me and not os.path.islink(path) and st.st_mode & 0o077:
                    os.chmod(path, mode)
        dirs[:] = [d for d in dirs if os.lstat(os.path.join(top, d)).st_uid == me]


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists and is not an exited, unreaped child."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (our own exited child not yet reaped) still answers kill(0).
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


def terminate(pid: int, timeout: float, is_alive: Callable[[], bool] | None = None) -> bool:
    """SIGTERM, then SIGKILL after ``timeout`` s. Returns True if it had to SIGKILL."""
    alive = is_alive or (lambda: pid_alive(pid))
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            return False
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    while alive():
        time.sleep(0.02)
    return True


def terminate_all(pids: list[int], timeout: float) -> None:
    """SIGTERM every pid at once, then SIGKILL what is left after ``timeout`` s."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for pid in pids:
        terminate(pid, max(0.0, deadline - time.monotonic()))


def tail(path: str | Path, lines: int = 30) -> str:
    """The last ``lines`` of a log ("" when it cannot be read): what a failure message
    quotes of a child process."""
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
