"""A SuperLink and SuperNodes as local processes, on free loopback ports, and the runs
submitted to them with `flwr run` (runtime dependency installation off: the apps use this
environment's packages). Insecure, or secure: TLS to the SuperLink (a CA of the bed's own)
and node authentication (each SuperNode's key registered with `flwr supernode register
--name <device-id>` before it starts).

With a Venn gateway, each node is started by venn-flower's launcher (`python -m
venn_flower.supernode`, its enrol token in its environment), so it checks in to Venn, and
the Venn Flower bridge runs beside the SuperLink for the ServerApps; without one, nodes
are plain `flower-supernode`s.
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from devtools.flower_testbed.report import RunReport
from devtools.flower_testbed.secure import TlsFiles, make_node_key, make_tls
from devtools.process import tail
from venn.net import free_port, wait_listening

CONNECTION = "testbed"
LS_EVERY_S = 15.0
"""How often `wait` asks `flwr ls` while no run of its has written its report."""
PROCESS_S = 180.0
"""How long a `flwr` command or a Flower process may take to answer or listen: beside the
compose check's image build a `flwr supernode register` took 58 s (a CI run of b4715da)."""
EXAMPLE_APPS = Path(__file__).resolve().parents[2] / "examples" / "flower" / "apps"
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
    """Environment of the SuperLink, hence of every ServerApp."""
    bridge_env: Mapping[str, str] | None = None
    """Environment of the Venn Flower bridge (where Venn's broker and secret are); None:
    no bridge (Flower alone)."""
    secure: bool = False
    """TLS to the SuperLink and node authentication."""
    checkin_interval_s: float = 1.0
    task_poll_s: float = 0.2
    superlink_port: int = 0
    bridge_port: int = 0
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    tls: TlsFiles | None = None

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
            # No telemetry posts and no update checks from a test bed: every `flwr` process
            # would try to reach flower.ai (a telemetry post may wait up to 4 s at exit).
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
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

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.superlink_port}"

    @property
    def bridge_url(self) -> str:
        return f"http://127.0.0.1:{self.bridge_port}"

    def start(self, timeout: float = PROCESS_S) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(exist_ok=True)
        self.report_dir.mkdir(exist_ok=True)
        self.superlink_port = self.superlink_port or free_port()
        security = ["--insecure"]
        connection = "insecure = true\n"
        if self.secure:
            self.tls = make_tls(self.root / "tls")
            security = [
                "--ssl-ca-certfile",
                str(self.tls.ca),
                "--ssl-certfile",
                str(self.tls.cert),
                "--ssl-keyfile",
                str(self.tls.key),
                "--enable-supernode-auth",
            ]
            connection = f'root-certificates = "{self.tls.ca}"\n'
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n\n'
            f'[superlink.{CONNECTION}]\naddress = "{self.address}"\n{connection}'
        )
        server_env = dict(self.server_env)
        if self.bridge_env is not None:
            self.bridge_port = self.bridge_port or free_port()
            self._spawn(
                "bridge",
                [
                    sys.executable,
                    "-m",
                    "venn.integrations.flower.bridge",
                    "--port",
                    str(self.bridge_port),
                ],
                self._env(self.bridge_env),
            )
            server_env["VENN_FLOWER_BRIDGE"] = self.bridge_url
        self._spawn(
            "superlink",
            [
                _bin("flower-superlink"),
                *security,
                "--disable-runtime-dependency-installation",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.superlink_port),
            ],
            self._env(server_env),
        )
        if not wait_listening("127.0.0.1", self.superlink_port, timeout):
            raise RuntimeError(f"the SuperLink does not listen; see {self.root}/superlink.log")
        if self.bridge_env is not None and not wait_listening(
            "127.0.0.1", self.bridge_port, timeout
        ):
            raise RuntimeError(f"the bridge does not listen; see {self.root}/bridge.log")
        if self.tls is not None:
            with ThreadPoolExecutor(8) as pool:  # each `flwr supernode register` takes seconds
                list(pool.map(self._security, self.nodes))
        for node in self.nodes:
            self.start_node(node)
        self.wait_nodes(timeout)

    def _security(self, node: NodeSpec) -> list[str]:
        """A node's flags to reach the SuperLink: insecure, or TLS and its own key (made
        and registered under its name the first time)."""
        if self.tls is None:
            return ["--insecure"]
        keys = self.root / "node-keys"
        private = keys / f"{node.device_id}.key"
        if not private.exists():
            private, public = make_node_key(keys, node.device_id)
            self.flwr("supernode", "register", str(public), CONNECTION, "--name", node.device_id)
        return [
            "--root-certificates",
            str(self.tls.ca),
            "--auth-supernode-private-key",
            str(private),
        ]

    def start_node(self, node: NodeSpec) -> None:
        """Start (or start again) one SuperNode."""
        flower = [
            *self._security(node),
            "--superlink",
            self.address,
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
                "venn_flower.supernode",
                "--gateway",
                self.gateway,
                "--checkin-interval",
                str(self.checkin_interval_s),
                "--",
                *flower,
            ]
            token = self.device_tokens.get(node.device_id)
            secret = (
                {"VENN_DEVICE_TOKEN": token}
                if token
                else {"VENN_ENROLL_TOKEN": self.enroll_token or ""}
            )
            env = self._env(secret)
        self._spawn(f"node-{node.device_id}", command, env)

    def stop_node(self, device_id: str, sig: int = signal.SIGKILL) -> None:
        """Stop one SuperNode (its launcher, the SuperNode and its ClientApps)."""
        proc = self.procs.pop(f"node-{device_id}")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        proc.wait(30)

    def wait_nodes(self, timeout: float) -> None:
        """Until the SuperLink has activated every node and, with Venn, every launcher
        checks in (so a run's time does not include a node's start)."""
        deadline = time.monotonic() + timeout
        log = self.root / "superlink.log"
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace") if log.exists() else ""
            active = text.count("Activated node_id=") >= len(self.nodes)
            if active and (self.gateway is None or self._checking_in() >= len(self.nodes)):
                return
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited; see {self.root}/{name}.log")
            time.sleep(0.2)
        raise RuntimeError(f"not every SuperNode connected in {timeout:.0f} s")

    def _checking_in(self) -> int:
        found = 0
        for node in self.nodes:
            path = self.root / f"node-{node.device_id}.log"
            if path.exists() and "checks in to Venn as" in path.read_text(errors="replace"):
                found += 1
        return found

    def flwr(self, *args: str, timeout: float = PROCESS_S) -> dict[str, object]:
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
        runs = self.flwr("ls", CONNECTION, timeout=60).get("runs", [])
        assert isinstance(runs, list)
        return {int(r["run-id"]): f"{r['status']}" for r in runs}

    def wait(self, runs: list[SubmittedRun], timeout: float) -> list[RunReport]:
        """Until every run has finished; their reports (RuntimeError with the run's log
        when one failed or did not finish in time)."""
        deadline = time.monotonic() + timeout
        pending = {r.run_id: r for r in runs}
        asked = time.monotonic()
        while pending:
            # `flwr ls` is a Python process of its own (3 s of CPU here): asked every second,
            # two beds' polls took most of a 2-core machine and a CI's Flower setup passed
            # 600 s. Asked when a report lands, else now and then for a run that failed.
            reported = any(r.report_path.exists() for r in pending.values())
            if not reported and time.monotonic() - asked < LS_EVERY_S:
                if time.monotonic() > deadline:
                    asked = 0.0  # one last look before giving up
                time.sleep(0.5)
                continue
            asked = time.monotonic()
            try:
                statuses = self.statuses()
            except subprocess.TimeoutExpired:
                # Beside two busy loops `flwr ls` took longer than its 60 s once; the runs'
                # own deadline still holds.
                statuses = {}
            for run_id, status in statuses.items():
                if run_id in pending and status.startswith("finished"):
                    run = pending.pop(run_id)
                    (self.root / f"run-{run.name}.log").write_text(self.log(run_id))
                    if not run.report_path.exists():
                        raise RuntimeError(
                            f"run {run.name} ended ({status}):\n{self.log(run_id)[-6000:]}"
                        )
            if pending and time.monotonic() > deadline:
                names = [r.name for r in pending.values()]
                logs = "\n".join(self.log(i, timeout=30)[-6000:] for i in pending)
                raise RuntimeError(f"runs {names} did not finish in {timeout:.0f} s:\n{logs}")
            if pending:
                time.sleep(1.0)
        return [RunReport.read(r.report_path) for r in runs]

    def digest(self, lines: int = 15) -> str:
        """The tail of every log of the bed (SuperLink, bridge, nodes): what a failure
        quotes, since the bed's directory may be gone by the time anyone reads it."""
        return "\n".join(
            f"--- {path.name}\n{tail(path, lines)}" for path in sorted(self.root.glob("*.log"))
        )

    def log(self, run_id: int, timeout: float = PROCESS_S) -> str:
        """The run's `flwr log` ("" and why, when it does not answer within ``timeout``:
        a failure's message must not wait out a starved machine)."""
        try:
            done = subprocess.run(
                [_bin("flwr"), "log", str(run_id), CONNECTION, "--show"],
                env=self._env(),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return f"(flwr log {run_id} did not answer in {timeout:.0f} s)"
        return done.stdout + done.stderr

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
        try:
            self.start()
        except BaseException:
            self.stop()  # what did start (the SuperLink, the bridge, nodes) stops with it
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
