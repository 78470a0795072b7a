"""Child processes of the local stack (brokers, Postgres): ports, liveness, stopping, and the
Kafka-protocol readiness probe every broker kind answers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import time
from collections.abc import Callable


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
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
