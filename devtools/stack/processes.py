"""Service child processes with pid files and logs in a run directory."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from devtools.process import (
    PRIVATE_UMASK,
    open_private_log,
    pid_alive,
    tail,
    terminate,
    write_private,
)

SERVICES_FILE = "services.json"


@dataclass(frozen=True)
class ServiceSpec:
    """A service to run: its name (log/pid file stem) and its arguments after `python`."""

    name: str
    args: tuple[str, ...]

    def command(self) -> list[str]:
        return [sys.executable, *self.args]

    def profiled(self, out_dir: Path) -> ServiceSpec:
        """The same service under pyinstrument, its session saved as out_dir/<name>.pyisession
        (the directory made if need be)."""
        out_dir.mkdir(parents=True, exist_ok=True)
        out = str(out_dir / f"{self.name}.pyisession")
        return ServiceSpec(
            self.name, ("-m", "pyinstrument", "-r", "session", "-o", out, *self.args)
        )


def scheduler_spec(worker: int = 1) -> ServiceSpec:
    """Scheduler worker ``worker`` (1, 2, ...): "scheduler", "scheduler-2", ..."""
    name = "scheduler" if worker == 1 else f"scheduler-{worker}"
    # info: Faust's rebalance and recovery steps, what a stalled worker's log must show.
    return ServiceSpec(name, ("-m", "services.scheduler", "worker", "-l", "info"))


def recorder_spec() -> ServiceSpec:
    return ServiceSpec("recorder", ("-m", "services.recorder", "--log-level", "WARNING"))


def _read(run_dir: Path) -> dict[str, int]:
    try:
        data = json.loads((run_dir / SERVICES_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _write(run_dir: Path, pids: dict[str, int]) -> None:
    write_private(run_dir / SERVICES_FILE, json.dumps(pids, indent=1))


def running_services(run_dir: str | Path) -> dict[str, int]:
    """Recorded services of ``run_dir`` that are still alive: {name: pid}."""
    return {name: pid for name, pid in _read(Path(run_dir)).items() if pid_alive(pid)}


def start_service(
    run_dir: str | Path, spec: ServiceSpec, env: dict[str, str], *, detached: bool = True
) -> subprocess.Popen[bytes]:
    """Start ``spec`` with ``env`` (on top of os.environ), logging to ``<run>/<name>.log``.

    A detached service gets its own session, so it outlives the CLI and its Ctrl-C.
    """
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    with os.fdopen(open_private_log(run / f"{spec.name}.log"), "ab") as log:
        proc = subprocess.Popen(
            spec.command(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            cwd=run,
            start_new_session=detached,
            umask=PRIVATE_UMASK,
        )
    pids = _read(run)
    pids[spec.name] = proc.pid
    _write(run, pids)
    return proc


def stop_pid(pid: int, timeout: float = 10.0) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``. True if the process was running. A process
    that leads its own group (a detached service) has that group killed after it: what it
    started (a gateway's workers) does not outlive it."""
    if not pid_alive(pid):
        return False
    try:
        leads = os.getpgid(pid) == pid
    except ProcessLookupError:
        leads = False
    # SIGKILL after the timeout: Faust can hang in wait_empty on SIGTERM after an agent crash.
    terminate(pid, timeout)
    if leads:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    return True


def stop_services(run_dir: str | Path, timeout: float = 10.0) -> list[str]:
    """Stop every recorded service of ``run_dir`` (in reverse start order)."""
    run = Path(run_dir)
    stopped = [name for name, pid in reversed(list(_read(run).items())) if stop_pid(pid, timeout)]
    (run / SERVICES_FILE).unlink(missing_ok=True)
    return stopped


def log_tail(run_dir: str | Path, name: str, lines: int = 20) -> str:
    return tail(Path(run_dir) / f"{name}.log", lines)


def first_error(run_dir: str | Path, name: str) -> str:
    """The first ``[ERROR]`` line of a service's log (Faust and logging both mark them so):
    the cause, where the tail holds what failed after it."""
    try:
        with open(Path(run_dir) / f"{name}.log", errors="replace") as log:
            return next((line.strip() for line in log if "[ERROR]" in line), "")
    except OSError:
        return ""


def worker_metric(port: int, name: str, host: str = "127.0.0.1") -> float | None:
    """The unlabelled metric ``name`` of the scheduler worker whose web server is on
    ``port``; None if the worker does not answer or has no such metric."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5.0) as resp:
            body = resp.read().decode()
    except OSError:
        return None
    for line in body.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return None


def deciding_workers(ports: Mapping[str, int]) -> list[str]:
    """The workers (name -> web port) that say they decide (``venn_scheduler_deciding``):
    one in a settled group of any size."""
    return [name for name, port in ports.items() if worker_metric(port, DECIDING) == 1.0]


def settled_decider(ports: Mapping[str, int]) -> str | None:
    """The decider of the workers ``ports`` (name -> web port) once every one of them
    answers and exactly one decides; None before."""
    states = {name: worker_metric(port, DECIDING) for name, port in ports.items()}
    values = list(states.values())
    if None in values or values.count(1.0) != 1 or values.count(0.0) != len(values) - 1:
        return None
    return next(name for name, state in states.items() if state == 1.0)


DECIDING = "venn_scheduler_deciding"
