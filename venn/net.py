"""Addresses and ports on this host: a free port to hand a server, whether one listens."""

from __future__ import annotations

import contextlib
import functools
import random
import socket
import time

import port_for


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


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{address!r} is not host:port")
    return host, int(port)
