"""Apache Kafka (KRaft, no ZooKeeper) from its published jars, on loopback.

The jars of the release pinned in ``kafka-pom.xml`` are copied by Maven into a per-user
cache once (``~/.cache/venn/kafka-<version>/libs``, or under ``VENN_CACHE_DIR``); every
later start is offline. A node is a combined broker+controller:
``java -cp 'libs/*' kafka.Kafka server.properties``, as ``kafka-server-start.sh`` runs it.
Storage (topics, data, committed offsets) lives in the directory given, so stopping and
starting again keeps everything.

``KafkaBroker(data_dir)`` is one node; ``KafkaBroker(data_dir, nodes=3)`` three combined
nodes on loopback with replication factor 3 and ``min.insync.replicas=2`` (for fault tests:
``kill_node``/``start_node``).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from devtools.process import (
    PRIVATE_UMASK,
    open_private_log,
    private_dir,
    tail,
    tighten,
    write_private,
)
from devtools.starts import note_start
from venn.broker.health import metadata_brokers
from venn.net import free_port

POM = Path(__file__).with_name("kafka-pom.xml")
MIN_JAVA = 17
CLUSTER_FILE = "cluster.json"
JVM_OPTIONS = (
    # What kafka-run-class.sh gives the broker, with a heap for a 2-core machine.
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)
LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.console.ref = console
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
logger.groups.name = org.apache.kafka.coordinator.group
logger.groups.level = INFO
"""
# Group rebalances at INFO (generations, members, why each began): what a consumer stuck
# after a node's loss had from the broker (test_faults in the CI of f39b3bf).


def new_cluster_id() -> str:
    """A KRaft cluster id: a base64url UUID without padding, as `random-uuid` prints, and
    like Kafka's own `Uuid.randomUuid()` never one that begins with '-' (the storage
    tool's argument parser would read it as an option: 1 start in 64 failed)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class KafkaError(RuntimeError):
    pass


@cache
def kafka_version() -> str:
    """The Apache Kafka release pinned in kafka-pom.xml."""
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text())
    if match is None:
        raise KafkaError(f"no <kafka.version> in {POM}")
    return match.group(1).strip()


def cache_root() -> Path:
    from venn.settings import Settings  # venn.settings imports this package

    explicit = Settings.from_env(running=False).cache_dir
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "venn"


def libs_dir(version: str | None = None) -> Path:
    return cache_root() / f"kafka-{version or kafka_version()}" / "libs"


def libs_cached(version: str | None = None) -> bool:
    libs = libs_dir(version)
    return any(libs.glob("kafka_2.13-*.jar")) if libs.is_dir() else False


def java_binary() -> str | None:
    """A java of version 17 or newer: $JAVA_HOME/bin/java first, then PATH; None if neither."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    found = shutil.which("java")
    if found:
        candidates.append(found)
    for java in candidates:
        major = java_major(java)
        if major is not None and major >= MIN_JAVA:
            return java
    return None


@cache
def java_major(java: str) -> int | None:
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def unavailable_reason() -> str | None:
    """Why Apache Kafka cannot run here, or None when it can (a JDK 17+, and Maven or the
    cached jars)."""
    if java_binary() is None:
        return f"no Java {MIN_JAVA}+ (set JAVA_HOME or put java on PATH)"
    if not libs_cached() and shutil.which("mvn") is None:
        return f"the Kafka {kafka_version()} jars are not cached in {libs_dir()} and mvn is missing"
    return None


def ensure_libs(version: str | None = None) -> Path:
    """The cached jar folder, resolved through Maven on first use (under a file lock, so
    parallel first starts resolve once)."""
    version = version or kafka_version()
    libs = libs_dir(version)
    if libs_cached(version):
        return libs
    libs.parent.mkdir(parents=True, exist_ok=True)
    with open(libs.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if libs_cached(version):
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise KafkaError(f"mvn is needed once to fetch Apache Kafka {version} into {libs}")
        staging = Path(tempfile.mkdtemp(prefix="libs-", dir=libs.parent))
        pom = staging / "pom.xml"
        pom.write_text(POM.read_text().replace(kafka_version(), version))
        command = [
            mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
            f"-DoutputDirectory={staging / 'libs'}", "-DincludeScope=runtime",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not any((staging / "libs").glob("kafka_2.13-*.jar")):
            shutil.rmtree(staging, ignore_errors=True)
            raise KafkaError(
                f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
            )
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(libs)
        (staging / "libs").rename(libs)
        shutil.rmtree(staging, ignore_errors=True)
    return libs


@dataclass(frozen=True)
class NodePorts:
    node_id: int
    port: int
    controller_port: int
    plain_port: int = 0
    """A secured node's PLAINTEXT listener (0: none)."""


def security_properties(admin_password: str) -> dict[str, object]:
    """SCRAM-SHA-256 on the client listener (users in the cluster metadata, created at
    format), PLAIN between controllers (SCRAM needs the metadata the quorum serves), the
    standard authorizer with no access without an ACL, and admin as the only super user."""
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required"
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule required"
    admin = f'username="admin" password="{admin_password}"'
    return {
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": f"{scram} {admin};",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": (
            f'{plain} {admin} user_admin="{admin_password}";'
        ),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false",
    }


def node_properties(
    node: NodePorts,
    voters: list[NodePorts],
    host: str,
    log_dir: Path,
    replication: int,
    admin_password: str | None = None,
) -> str:
    """server.properties of one combined broker+controller node (with SASL/SCRAM and ACLs
    when ``admin_password`` is given, and then a PLAINTEXT listener too where the node has a
    ``plain_port``: a client there is ANONYMOUS, a super user)."""
    min_isr = 2 if replication >= 3 else 1
    quorum = ",".join(f"{v.node_id}@{host}:{v.controller_port}" for v in voters)
    client = "SASL_PLAINTEXT" if admin_password else "PLAINTEXT"
    settings: dict[str, object] = {
        "process.roles": "broker,controller",
        "node.id": node.node_id,
        "listeners": f"{client}://{host}:{node.port},CONTROLLER://{host}:{node.controller_port}",
        "advertised.listeners": f"{client}://{host}:{node.port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": quorum,
        "log.dirs": str(log_dir),
        "auto.create.topics.enable": "false",
        "default.replication.factor": replication,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": replication,
        "offsets.topic.num.partitions": 12,
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": 12,
        "share.coordinator.state.topic.replication.factor": replication,
        "share.coordinator.state.topic.min.isr": min_isr,
        # A small machine: no wait before the first rebalance of a new group, few threads.
        "group.initial.rebalance.delay.ms": 0,
        # The scheduler's short session (venn/broker/tuning.py), so that a standby takes
        # over from a killed decider within seconds; the default floor is 6 s.
        "group.min.session.timeout.ms": 1000,
        "num.network.threads": 2,
        "num.io.threads": 2,
        "background.threads": 2,
        "num.recovery.threads.per.data.dir": 1,
        "log.cleaner.threads": 1,
        "log.cleaner.dedupe.buffer.size": 8 << 20,
    }
    if admin_password:
        settings.update(security_properties(admin_password))
        if node.plain_port:
            plain = f"PLAINTEXT://{host}:{node.plain_port}"
            extra = {
                "listeners": f",{plain}",
                "advertised.listeners": f",{plain}",
                "listener.security.protocol.map": ",PLAINTEXT:PLAINTEXT",
                "super.users": ";User:ANONYMOUS",
            }
            settings.update({key: f"{settings[key]}{more}" for key, more in extra.items()})
    return "".join(f"{key}={value}\n" for key, value in settings.items())


class KafkaBroker:
    """Apache Kafka on loopback: one combined node, or ``nodes`` of them as one cluster.

    ``with KafkaBroker(path) as k: k.bootstrap`` -> "127.0.0.1:PORT[,...]". ``port`` fixes
    the first node's client port (default: the one recorded in ``data_dir``, else free).
    """

    kind = "kafka"

    def __init__(
        self,
        data_dir: str | Path,
        *,
        nodes: int = 1,
        host: str = "127.0.0.1",
        port: int | None = None,
        heap_mb: int | None = None,
        ready_timeout: float = 120.0,
        version: str | None = None,
        users: Mapping[str, str] | None = None,
        plain_listener: bool = False,
    ) -> None:
        """``users`` (principal -> password, with "admin"): SASL/SCRAM and ACLs on; the users
        are created when the storage is formatted (a cluster keeps the users it was made
        with). ``plain_listener`` (with ``users``): each node also listens without SASL, at
        ``plain_bootstrap``, where any client may do anything, so that one broker serves a
        secured stack and plain clients at once (the tests' session broker)."""
        if users is not None and "admin" not in users:
            raise ValueError("a secured cluster needs an admin user")
        if plain_listener and users is None:
            raise ValueError("a plain listener beside SASL needs users")
        self.plain_listener = plain_listener
        self.users = dict(users) if users else None
        if nodes not in (1, 3):
            raise ValueError("a local Kafka runs 1 or 3 nodes")
        self.data_dir = Path(data_dir).resolve()
        self.nodes = nodes
        self.host = host
        self.heap_mb = heap_mb or (512 if nodes == 1 else 384)
        self.ready_timeout = ready_timeout
        self.version = version or kafka_version()
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._logs: dict[int, IO[bytes]] = {}
        self.ports = self._ports(port)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{n.port}" for n in self.ports)

    @property
    def plain_bootstrap(self) -> str:
        """The PLAINTEXT listeners of a secured cluster with ``plain_listener``; else the
        bootstrap (a plain cluster is all plain)."""
        if not self.plain_listener:
            return self.bootstrap
        return ",".join(f"{self.host}:{n.plain_port}" for n in self.ports)

    @property
    def port(self) -> int:
        return self.ports[0].port

    def pids(self) -> list[int]:
        return [p.pid for p in self._procs.values() if p.poll() is None]

    def running(self) -> bool:
        return bool(self.pids())

    def node_dir(self, node_id: int) -> Path:
        return self.data_dir / f"node-{node_id}"

    def log_path(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "server.log"

    def _ports(self, port: int | None) -> list[NodePorts]:
        record = self.data_dir / CLUSTER_FILE
        if record.exists():
            saved = json.loads(record.read_text())
            ports = [NodePorts(**n) for n in saved["nodes"]]
            if len(ports) != self.nodes:
                raise KafkaError(f"{self.data_dir} holds a {len(ports)}-node cluster")
            if port is not None and port != ports[0].port:
                # Client ports may move; the controllers' stay what the quorum was formed with.
                ports[0] = dataclasses.replace(ports[0], port=port)
            if self.plain_listener and not all(n.plain_port for n in ports):
                raise KafkaError(f"{self.data_dir} was made without a plain listener")
            return ports
        first = port or free_port(self.host)
        chosen = {first}
        result = []
        for i in range(self.nodes):
            client = first if i == 0 else self._fresh(chosen)
            plain = self._fresh(chosen) if self.plain_listener else 0
            result.append(NodePorts(i + 1, client, self._fresh(chosen), plain))
        return result

    def _fresh(self, taken: set[int]) -> int:
        while True:
            candidate = free_port(self.host)
            if candidate not in taken:
                taken.add(candidate)
                return candidate

    def _cluster_id(self) -> str:
        record = self.data_dir / CLUSTER_FILE
        if record.exists():
            return str(json.loads(record.read_text())["cluster_id"])
        return new_cluster_id()

    def _write_config(self, java: str, libs: Path) -> None:
        private_dir(self.data_dir)
        tighten(self.data_dir)  # segments written before the broker ran with PRIVATE_UMASK
        record = self.data_dir / CLUSTER_FILE
        if record.exists() and json.loads(record.read_text()).get("secured", False) != bool(
            self.users
        ):
            # Its users live in its storage: it runs secured or plain as it was made.
            made = "with" if json.loads(record.read_text()).get("secured") else "without"
            raise KafkaError(f"{self.data_dir} was made {made} SASL users; start it the same way")
        cluster_id = self._cluster_id()
        for node in self.ports:
            home = self.node_dir(node.node_id)
            private_dir(home)
            write_private(home / "log4j2.properties", LOG4J2)
            props = home / "server.properties"
            log_dir = home / "data"
            admin = self.users["admin"] if self.users else None
            write_private(  # it holds the admin's password
                props, node_properties(node, self.ports, self.host, log_dir, self.nodes, admin)
            )
            if not (log_dir / "meta.properties").exists():
                command = [
                    java, "-cp", f"{libs}/*", "kafka.tools.StorageTool",
                    "format", "-t", cluster_id, "-c", str(props),
                ]  # fmt: skip
                for user, password in (self.users or {}).items():
                    command += ["--add-scram", f"SCRAM-SHA-256=[name={user},password={password}]"]
                done = subprocess.run(
                    command, capture_output=True, text=True, check=False, umask=PRIVATE_UMASK
                )
                if done.returncode != 0:
                    raise KafkaError(f"formatting {log_dir} failed:\n{done.stdout}{done.stderr}")
        write_private(
            self.data_dir / CLUSTER_FILE,
            json.dumps(
                {
                    "cluster_id": cluster_id,
                    "version": self.version,
                    "nodes": [asdict(n) for n in self.ports],
                    "secured": self.users is not None,
                },
                indent=1,
            ),
        )

    def start(self, detached: bool = False) -> Self:
        """Format storage on first use, start every node, wait until each answers metadata
        with the whole cluster."""
        if self.running():
            return self
        java = java_binary()
        if java is None:
            raise KafkaError(f"Apache Kafka needs Java {MIN_JAVA}+")
        libs = ensure_libs(self.version)
        self._write_config(java, libs)
        try:
            for node in self.ports:
                self._spawn(node.node_id, java, libs, detached)
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, node_id: int, java: str, libs: Path, detached: bool) -> None:
        home = self.node_dir(node_id)
        note_start("kafka", f"{self.data_dir} node {node_id}")
        log = os.fdopen(open_private_log(self.log_path(node_id)), "ab")
        self._logs[node_id] = log
        command = [
            java, f"-Xms{self.heap_mb // 2}m", f"-Xmx{self.heap_mb}m", *JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={home}",
            "-cp", f"{libs}/*", "kafka.Kafka", str(home / "server.properties"),
        ]  # fmt: skip
        self._procs[node_id] = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=home,
            # A detached broker must survive the CLI that started it (and its Ctrl-C).
            start_new_session=detached,
            umask=PRIVATE_UMASK,
        )

    def wait_ready(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or self.ready_timeout)
        pending = {n.node_id: n for n in self.ports if n.node_id in self._procs}
        while pending:
            for node_id, node in list(pending.items()):
                proc = self._procs[node_id]
                if proc.poll() is not None:
                    raise KafkaError(
                        f"Kafka node {node_id} exited with {proc.returncode}; see "
                        f"{self.log_path(node_id)}:\n{tail(self.log_path(node_id))}"
                    )
                if self._brokers_seen(node.port) >= self.live_nodes():
                    del pending[node_id]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise KafkaError(
                    f"Kafka nodes {sorted(pending)} did not answer in time; see {self.data_dir}"
                )
            time.sleep(0.2)

    def _brokers_seen(self, port: int) -> int:
        """How many brokers the node at ``port`` reports (0: it does not answer yet)."""
        if self.users is None:
            return metadata_brokers(self.host, port, 1.0) or 0
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        from venn.broker.security import Credentials, librdkafka_options

        client = AdminClient(
            {
                "bootstrap.servers": f"{self.host}:{port}",
                "log_level": 0,  # a node that is still starting refuses: expected
                **librdkafka_options(Credentials("admin", self.users["admin"])),
            }
        )
        try:
            return len(client.list_topics(timeout=1.0).brokers)
        except KafkaException:
            return 0

    def live_nodes(self) -> int:
        return sum(p.poll() is None for p in self._procs.values())

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node (fault tests); ``start_node`` brings it back."""
        proc = self._procs[node_id]
        proc.kill()
        proc.wait()

    def start_node(self, node_id: int, detached: bool = False) -> int:
        """Start one node again (its storage is kept); returns its pid once the cluster
        answers with every node."""
        java = java_binary()
        assert java is not None
        proc = self._procs.get(node_id)
        if proc is None or proc.poll() is not None:
            self._spawn(node_id, java, ensure_libs(self.version), detached)
        self.wait_ready()
        return self._procs[node_id].pid

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM every node (a controlled shutdown), SIGKILL after ``timeout``."""
        procs, self._procs = self._procs, {}
        for proc in procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._close_logs()

    def detach(self) -> None:
        """Forget the children without stopping them (``venn down`` stops them by pid)."""
        self._procs = {}
        self._close_logs()

    def _close_logs(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs = {}

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
