"""The brokers a test session shares, and where a module's stacks run.

Each pytest worker starts one Apache Kafka for the session (`SessionBroker`): one JVM with
two listeners, plain (``bootstrap``: any client may do anything, what most tests use) and
SASL/SCRAM with ACLs (``secured``: one principal per service, as `venn up` runs it), so both
modes run on it. A module that starts stacks asks for ``stack_broker`` (tests/conftest.py):
the session's broker, its topics emptied for the module (`fresh_topics`) and each stack with
an app id and recorder group of its own, unless the module is marked ``own_broker`` (what it
tests is a broker's own life: a three-node cluster, an outage, compose): then each stack
starts a broker of its own.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from aiokafka.admin import AIOKafkaAdminClient

from venn.broker import security
from venn.broker.topics import delete_topics, topic_partitions


def session_users() -> dict[str, str]:
    """A fresh password for every Kafka principal (admin included)."""
    return {p: secrets.token_urlsafe(18) for p in security.PRINCIPALS}


@dataclass(frozen=True)
class SessionBroker:
    """The session's broker: ``bootstrap`` plain; ``secured`` the SASL listener of the same
    broker ("" on Tansu, which has none) whose principals' passwords are ``users``."""

    kind: str
    bootstrap: str
    secured: str = ""
    users: Mapping[str, str] = field(default_factory=dict)

    def credentials(self, principal: str) -> security.Credentials:
        return security.Credentials(principal, self.users[principal])


@dataclass(frozen=True)
class StackBroker:
    """Where a module's stacks run. ``kind`` "external": on the broker at ``bootstrap``
    (secured when ``users`` are given), which is a ``tuning`` (kafka or tansu: the client
    profile it needs); "kafka" or "tansu": each stack starts its own."""

    kind: str
    bootstrap: str = ""
    users: Mapping[str, str] | None = None
    tuning: str = ""

    @property
    def shared(self) -> bool:
        return self.kind == "external"

    @classmethod
    def of(cls, session: SessionBroker) -> StackBroker:
        """The session's broker, secured where it can be."""
        if session.secured:
            return cls("external", session.secured, dict(session.users), session.kind)
        return cls("external", session.bootstrap, tuning=session.kind)


async def fresh_topics(bootstrap: str) -> list[str]:
    """Delete every topic but Kafka's own (``__*``) on the broker at ``bootstrap`` (plain):
    a module's stacks start from empty topics, as on a broker of their own. Returns what
    was deleted."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="venn-tests")
    await admin.start()
    try:
        names = [t for t in await topic_partitions(admin) if not t.startswith("__")]
    finally:
        await admin.close()
    return await delete_topics(bootstrap, names)


def empty_topics(bootstrap: str) -> list[str]:
    return asyncio.run(fresh_topics(bootstrap))
