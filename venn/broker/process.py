"""Child processes of the local stack (brokers, Postgres): ports, liveness, stopping, and the
Kafka-protocol readiness probe every broker kind answers."""

from __future__ import annotations

import contextlib
import functools
import os
import random
import signal
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

import port_for

PRIVATE_UMASK = 0o077
"""The umask of the stack's processes (brokers, services, the database's tools): what they
create (Kafka's segments, which hold job tokens; logs; Faust's data) is their owner's
alone (issue 26: segments and server.properties, which holds the Kafka admin password,
were 0644)."""


def private_dir(path: str | Path) -> Path:
    """``path`` created if need be, mode 0700."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
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


@functools.cache
def _good_ports() -> list[int]:
    return sorted(port_for.available_good_ports())


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing uses at ``host`` now, outside the kernel's ephemeral range. A port
    bound at 0 comes from that range, where any outgoing connection can take it before the
    service handed it listens (CI: a scheduler exited, "address already in use", and `venn
    up` waited 90 s for it)."""
    ports = _good_ports()
    for port in random.sample(ports, min(len(ports), 200)):
        if not port_for.port_is_used(port, host):
            return port
    with socket.socket() as s:  # no good port free: the kernel's choice
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_free(host: str, port: int) -> bool:
    """True if a server could listen at host:port now. Bound with SO_REUSEADDR, as Kafka
    and Tansu bind: the connections of a broker just stopped, in TIME_WAIT for a minute,
    do not hold the port; a listener does."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            s.listen()
        except OSError:
            return False
    return True


def wait_listening(host: str, port: int, timeout: float) -> bool:
    """True once something accepts connections at host:port, False after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1.0):
            return True
        time.sleep(0.1)
    return False


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


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{address!r} is not host:port")
    return host, int(port)


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
