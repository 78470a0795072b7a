"""`port_free` after a broker stopped: the port of a closed listener whose connections sit
in TIME_WAIT is free for the next broker (Kafka binds with SO_REUSEADDR), while a port
something listens on is not (issue 26, item 11: `venn down` then `venn up` within a minute
failed "127.0.0.1:9092 is in use")."""

from __future__ import annotations

import socket
from pathlib import Path

from venn.net import free_port, port_free


def _time_wait_port() -> int:
    """A port whose listener closed after closing a connection first (the side that closes
    first keeps the connection in TIME_WAIT, as a stopped broker does)."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = int(listener.getsockname()[1])
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    accepted.close()  # the server's side closes first: its end goes to TIME_WAIT
    assert client.recv(1) == b""
    client.close()
    listener.close()
    return port


def _in_time_wait(port: int) -> bool:
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    # local address "0100007F:PORT" in hex; state 06 is TIME_WAIT
    return any(int(r[1].split(":")[1], 16) == port and r[3] == "06" for r in rows)


def test_a_port_in_time_wait_is_free() -> None:
    port = _time_wait_port()
    assert _in_time_wait(port)
    assert port_free("127.0.0.1", port)


def test_a_port_with_a_listener_is_not_free() -> None:
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert not port_free("127.0.0.1", int(listener.getsockname()[1]))


def test_a_free_port_is_outside_the_ephemeral_range() -> None:
    """Outgoing connections take their ports from the ephemeral range; a port handed out
    from there can be taken before its service listens (CI: a scheduler exited with
    "address already in use")."""
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = {free_port() for _ in range(50)}
    assert not any(low <= p <= high for p in ports)
    assert all(port_free("127.0.0.1", p) for p in ports)
    assert len(ports) > 40  # random picks, not one port again and again
