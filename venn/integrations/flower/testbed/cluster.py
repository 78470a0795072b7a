"""A SuperLink and SuperNodes as local processes, on free loopback ports, and the runs
submitted to them with `flwr run` (insecure, runtime dependency installation off: the apps
use this environment's packages).

With a Venn gateway, each node is started by the Venn launcher
(`python -m venn.integrations.flower.supernode`), so it checks in to Venn and its
ClientApps report their results; without one, as a plain `flower-supernode`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from venn.broker.process import free_port, wait_listening
from venn.integrations.flower.testbed.report import RunReport
from venn.settings import env_name

CONNECTION = "testbed"
EXAMPLE_APPS = Path(__file__).resolve().parents[4] / "examples" / "flower" / "apps"
"""The example apps of a source checkout (the demo, the benchmark and the tests use them)."""


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


@dataclass(frozen=True)
class NodeSpec:
    """One SuperNode: its Venn device id, attributes, speed and data seed."""

    device_id: str
    attrs: Mapping[str, float]
    speed_ms: float
    seed: int

    def node_config(self) -> str:
        attrs = " ".join(f"attr.{k}={float(v)!r}" for k, v in self.attrs.items())
        speed = float(self.speed_ms)
        return f"device-id='{self.device_id}' {attrs} speed-ms={speed!r} seed={self.seed}"


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))  # a TOML basic string


@dataclass
class SubmittedRun:
    run_id: int
    name: str
    report_path: Path


@dataclass
class FlowerTestbed:
    """Start with `start()`, stop with `stop()` (or use as a context manager)."""

    root: Path
    nodes: list[NodeSpec]
    gateway: str | None = None
    """Venn's gateway URL: nodes check in to it; None: plain Flower."""
    device_tokens: Mapping[str, str] = field(default_factory=dict)
    """Device id -> its token; a node without one enrols with ``enroll_token``."""
    enroll_token: str | None = None
    server_env: Mapping[str, str] = field(default_factory=dict)
    """Environment of the SuperLink, hence of every ServerApp (VENN_* for the SDK)."""
    checkin_interval_s: float = 1.0
    task_poll_s: float = 0.2
    superlink_port: int = 0
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return self.root / "flwr-home"

    @property
    def report_dir(self) -> Path:
        return self.root / "reports"

    def _env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {
            **os.environ,
            "FLWR_HOME": str(self.home),
            # Flower's SuperExec looks for new ServerApp/ClientApp tasks every second by
            # default; every arm of the benchmark runs with the same, shorter poll.
            "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": str(self.task_poll_s),
            **(extra or {}),
        }
        # Flower starts flower-superexec, flwr-serverapp and flwr-clientapp from PATH.
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        return env

    def _spawn(self, name: str, command: list[str], env: dict[str, str]) -> None:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 (the child keeps it)
        try:
            self.procs[name] = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.root,
                start_new_session=True,  # its own group: stop() ends its children too
            )
        finally:
            log.close()

    def start(self, timeout: float = 60.0) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(exist_ok=True)
        self.report_dir.mkdir(exist_ok=True)
        self.superlink_port = self.superlink_port or free_port()
        address = f"127.0.0.1:{self.superlink_port}"
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n\n'
            f'[superlink.{CONNECTION}]\naddress = "{address}"\ninsecure = true\n'
        )
        self._spawn(
            "superlink",
            [
                _bin("flower-superlink"),
                "--insecure",
                "--disable-runtime-dependency-installation",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.superlink_port),
            ],
            self._env(self.server_env),
        )
        if not wait_listening("127.0.0.1", self.superlink_port, timeout):
            raise RuntimeError(f"the SuperLink does not listen; see {self.root}/superlink.log")
        for node in self.nodes:
            flower = [
                "--insecure",
                "--superlink",
                address,
                "--port",
                str(free_port()),
                "--node-config",
                node.node_config(),
            ]
            if self.gateway is None:
                command = [_bin("flower-supernode"), *flower]
                env = self._env()
            else:
                command = [
                    sys.executable,
                    "-m",
                    "venn.integrations.flower.supernode",
                    "--gateway",
                    self.gateway,
                    "--checkin-interval",
                    str(self.checkin_interval_s),
                    "--",
                    *flower,
                ]
                token = self.device_tokens.get(node.device_id)
                if token:
                    env = self._env({env_name("flower", "device_token"): token})
                else:
                    enroll = self.enroll_token or ""
                    env = self._env({env_name("flower", "enroll_token"): enroll})
            self._spawn(f"node-{node.device_id}", command, env)
        self.wait_nodes(timeout)

    def wait_nodes(self, timeout: float) -> None:
        """Until the SuperLink has activated every node."""
        deadline = time.monotonic() + timeout
        log = self.root / "superlink.log"
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace") if log.exists() else ""
            if text.count("Activated node_id=") >= len(self.nodes):
                return
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited; see {self.root}/{name}.log")
            time.sleep(0.2)
        raise RuntimeError(f"not every SuperNode connected in {timeout:.0f} s")

    def flwr(self, *args: str, timeout: float = 60.0) -> dict[str, object]:
        """A `flwr` command with JSON output."""
        done = subprocess.run(
            [_bin("flwr"), *args, "--format", "json"],
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
        )
        start = done.stdout.find("{")
        if start < 0:
            raise RuntimeError(f"flwr {' '.join(args)}: {done.stdout}{done.stderr}")
        answer: dict[str, object] = json.loads(done.stdout[start:])
        if not answer.get("success"):
            raise RuntimeError(f"flwr {' '.join(args)}: {answer}")
        return answer

    def submit(self, app: Path, name: str, config: Mapping[str, object]) -> SubmittedRun:
        """`flwr run` an app with ``config`` overrides; its report lands in report_dir."""
        config = {**config, "run-name": name, "report-dir": str(self.report_dir)}
        overrides = " ".join(f"{k}={_toml_value(v)}" for k, v in config.items())
        answer = self.flwr("run", str(app), CONNECTION, "--run-config", overrides)
        return SubmittedRun(int(str(answer["run-id"])), name, self.report_dir / f"{name}.json")

    def statuses(self) -> dict[int, str]:
        runs = self.flwr("ls", CONNECTION).get("runs", [])
        assert isinstance(runs, list)
        return {int(r["run-id"]): f"{r['status']}" for r in runs}

    def wait(self, runs: list[SubmittedRun], timeout: float) -> list[RunReport]:
        """Until every run has finished; their reports (RuntimeError with the run's log
        when one failed or did not finish in time)."""
        deadline = time.monotonic() + timeout
        pending = {r.run_id: r for r in runs}
        while pending:
            for run_id, status in self.statuses().items():
                if run_id in pending and status.startswith("finished"):
                    run = pending.pop(run_id)
                    if not run.report_path.exists():
                        raise RuntimeError(f"run {run.name} ended ({status}):\n{self.log(run_id)}")
            if pending and time.monotonic() > deadline:
                names = [r.name for r in pending.values()]
                logs = "\n".join(self.log(i) for i in pending)
                raise RuntimeError(f"runs {names} did not finish in {timeout:.0f} s:\n{logs}")
            if pending:
                time.sleep(1.0)
        return [RunReport.read(r.report_path) for r in runs]

    def log(self, run_id: int) -> str:
        done = subprocess.run(
            [_bin("flwr"), "log", str(run_id), CONNECTION, "--show"],
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.stdout[-6000:] + done.stderr[-2000:]

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every process group started here, SIGKILL what is left after
        ``timeout`` (a SuperNode can take longer than that to leave)."""
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        self.procs.clear()

    def __enter__(self) -> FlowerTestbed:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
