"""Kafka principals and ACLs: each service its own SASL/SCRAM user, allowed exactly the
topics it reads and writes, so that (for one) the device-facing gateway cannot write job
events, and a client without credentials is refused.

`venn up` runs Apache Kafka with SCRAM-SHA-256 on its client listener, creates one user per
principal below (passwords from the environment or, for a local stack, generated into the
run dir's secrets file, 0600), and grants the ACLs of `ACCESS`. Every Kafka client of Venn
takes its options from `client_options`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from venn.broker import topics

MECHANISM = "SCRAM-SHA-256"
SCHEDULER_INPUTS = (topics.CHECKINS, topics.JOBS, topics.ROUNDS, topics.RESULTS, topics.ASSIGNMENTS)
GATEWAY_ANSWERS = (topics.ASSIGNMENTS, topics.REPLIES)
ADMIN = "admin"


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str


@dataclass(frozen=True)
class Access:
    """What one principal may do."""

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    """Topic-name prefixes it owns (read, write, create): Faust's changelogs."""
    groups: tuple[str, ...] = ()
    """Consumer groups it may join (by prefix)."""


def access(app_id: str, recorder_group: str) -> dict[str, Access]:
    """Principal -> its access, for a deployment with these group names."""
    return {
        "scheduler": Access(
            read=(
                topics.CHECKINS,
                topics.JOBS,
                topics.ROUNDS,
                topics.RESULTS,
                topics.ASSIGNMENTS,
                topics.REVOCATIONS,
            ),
            # venn.jobs: the expiry of a silent job, ordered with the job's other events
            write=(topics.ASSIGNMENTS, topics.REPLIES, topics.DEAD_LETTERS, topics.JOBS),
            prefixes=(f"{app_id}-",),
            groups=(app_id,),
        ),
        "recorder": Access(
            read=(topics.JOBS, topics.ROUNDS, topics.REVOCATIONS),
            write=(topics.DEAD_LETTERS,),
            groups=(recorder_group,),
        ),
        "gateway": Access(
            read=(
                topics.ASSIGNMENTS,
                topics.REPLIES,
                topics.JOBS,
                topics.ROUNDS,
                topics.REVOCATIONS,
            ),
            write=(topics.CHECKINS, topics.RESULTS, topics.DEAD_LETTERS),
        ),
        "coordinator": Access(
            read=(topics.ASSIGNMENTS, topics.RESULTS, topics.JOBS, topics.ROUNDS),
            write=(topics.JOBS, topics.ROUNDS),
        ),
        "devices": Access(
            read=(topics.ASSIGNMENTS,),
            write=(topics.CHECKINS, topics.RESULTS),
        ),
    }


PRINCIPALS = (ADMIN, "scheduler", "recorder", "gateway", "coordinator", "devices")


def client_options(creds: Credentials | None) -> dict[str, Any]:
    """aiokafka keyword arguments for a client with these credentials (none: plaintext)."""
    if creds is None:
        return {}
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": MECHANISM,
        "sasl_plain_username": creds.user,
        "sasl_plain_password": creds.password,
    }


def librdkafka_options(creds: Credentials | None) -> dict[str, str]:
    """The same for confluent-kafka (librdkafka) clients."""
    if creds is None:
        return {}
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": MECHANISM,
        "sasl.username": creds.user,
        "sasl.password": creds.password,
    }


def apply_acls(
    bootstrap: str, admin: Credentials, app_id: str, recorder_group: str, timeout: float = 30.0
) -> int:
    """Grant every principal its `access` (idempotent: Kafka keeps one copy of an ACL).
    Returns how many ACL bindings were asked for."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    def allow(
        principal: str, kind: Any, name: str, op: Any, pattern: Any = ResourcePatternType.LITERAL
    ) -> AclBinding:
        return AclBinding(
            kind, name, pattern, f"User:{principal}", "*", op, AclPermissionType.ALLOW
        )

    bindings = []
    for principal, grant in access(app_id, recorder_group).items():
        for topic in grant.read:
            bindings += [
                allow(principal, ResourceType.TOPIC, topic, AclOperation.READ),
                allow(principal, ResourceType.TOPIC, topic, AclOperation.DESCRIBE),
            ]
        for topic in grant.write:
            bindings += [
                allow(principal, ResourceType.TOPIC, topic, AclOperation.WRITE),
                allow(principal, ResourceType.TOPIC, topic, AclOperation.DESCRIBE),
            ]
        for prefix in grant.prefixes:
            bindings.append(
                allow(
                    principal,
                    ResourceType.TOPIC,
                    prefix,
                    AclOperation.ALL,
                    ResourcePatternType.PREFIXED,
                )
            )
        for group in grant.groups:
            bindings.append(
                allow(
                    principal,
                    ResourceType.GROUP,
                    group,
                    AclOperation.ALL,
                    ResourcePatternType.PREFIXED,
                )
            )
    unique = list({str(b): b for b in bindings}.values())  # DESCRIBE comes with read and write
    client = AdminClient(
        {"bootstrap.servers": bootstrap, "log_level": 2, **librdkafka_options(admin)}
    )
    for future in client.create_acls(unique, request_timeout=timeout).values():
        future.result(timeout)
    return len(unique)


def credentials_from(users: Mapping[str, str], principal: str) -> Credentials | None:
    password = users.get(principal)
    return Credentials(principal, password) if password else None
