"""Kafka principals and ACLs: each service its own SASL/SCRAM user, allowed exactly the
topics it reads and writes, so that (for one) the device-facing gateway cannot write job
events (the job API it serves writes them as its own principal, ``jobs``), and a client
without credentials is refused. What each principal can do, and what a holder of one can
do beyond it, is docs/security.md's "Job events, results and Kafka principals".

`venn up` runs Apache Kafka with SCRAM-SHA-256 on its client listener, creates one user per
principal below (passwords from the environment or, for a local stack, generated into the
run dir's secrets file, 0600), and grants the ACLs of `access`. docker-compose.yml's Kafka
formats its own storage, so there the admin signs in with PLAIN (a static user of the
broker's configuration) and `venn prepare --secure` makes the service principals' SCRAM
users (`ensure_users`, passwords from VENN_KAFKA_PASSWORD_<PRINCIPAL>) and grants the same
ACLs. Every Kafka client of Venn takes its options from `client_options`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from venn.broker import topics

MECHANISM = "SCRAM-SHA-256"
"""How every service signs in (and the admin of `venn up`'s Kafka)."""
PLAIN = "PLAIN"
"""How the admin of docker-compose's Kafka signs in (its only PLAIN user)."""
MECHANISMS = (MECHANISM, PLAIN)
SCRAM_ITERATIONS = 4096  # what kafka-storage.sh --add-scram and kafka-configs.sh use
SCHEDULER_INPUTS = (topics.CHECKINS, topics.JOBS, topics.ROUNDS, topics.RESULTS, topics.ASSIGNMENTS)
GATEWAY_ANSWERS = (topics.ASSIGNMENTS, topics.REPLIES)
ADMIN = "admin"
JOBS = "jobs"
"""The job API's principal (it writes venn.jobs and nothing else)."""


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str = field(repr=False)
    mechanism: str = MECHANISM
    """SASL mechanism: SCRAM-SHA-256, or PLAIN for compose's admin."""

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"SASL mechanism {self.mechanism!r}: one of {', '.join(MECHANISMS)}")


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
                # only to dead-letter their bad records (topics.DEAD_LETTER_OWNER)
                topics.REPLIES,
                topics.STATUS,
                # the letters already written, read back at start (one letter per record)
                topics.DEAD_LETTERS,
            ),
            # venn.jobs: the expiry of a silent job, ordered with the job's other events
            # venn.status: the plan and supply snapshot the job API reads
            write=(
                topics.ASSIGNMENTS,
                topics.REPLIES,
                topics.DEAD_LETTERS,
                topics.JOBS,
                topics.STATUS,
            ),
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
                topics.STATUS,
                topics.DEAD_LETTERS,  # the dashboard counts them
                topics.ENROLMENTS,
            ),
            write=(topics.CHECKINS, topics.RESULTS, topics.DEAD_LETTERS, topics.ENROLMENTS),
        ),
        # The job API's submissions and cancels (each with a job token the gateway issued
        # for that job alone): the gateway process signs in as this principal for them only
        # when it has its password (VENN_KAFKA_PASSWORD_JOBS or the run dir's), so a gateway
        # that serves devices only cannot write job events.
        JOBS: Access(write=(topics.JOBS,)),
        "coordinator": Access(
            read=(topics.ASSIGNMENTS, topics.RESULTS, topics.JOBS, topics.ROUNDS),
            write=(topics.JOBS, topics.ROUNDS),
        ),
        "devices": Access(
            read=(topics.ASSIGNMENTS,),
            write=(topics.CHECKINS, topics.RESULTS),
        ),
    }


PRINCIPALS = (ADMIN, "scheduler", "recorder", "gateway", JOBS, "coordinator", "devices")
SERVICES = PRINCIPALS[1:]
"""The principals with SCRAM users and ACLs (the admin is a super user)."""


def password_variable(principal: str) -> str:
    """The environment variable with ``principal``'s password where the passwords are given,
    not generated (docker-compose): VENN_KAFKA_PASSWORD_SCHEDULER, ..._ADMIN (read as
    `venn.settings.KafkaPasswords`)."""
    return f"VENN_KAFKA_PASSWORD_{principal.upper()}"


def client_options(creds: Credentials | None) -> dict[str, Any]:
    """aiokafka keyword arguments for a client with these credentials (none: plaintext)."""
    if creds is None:
        return {}
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": creds.mechanism,
        "sasl_plain_username": creds.user,
        "sasl_plain_password": creds.password,
    }


def librdkafka_options(creds: Credentials | None) -> dict[str, str]:
    """The same for confluent-kafka (librdkafka) clients."""
    if creds is None:
        return {}
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": creds.mechanism,
        "sasl.username": creds.user,
        "sasl.password": creds.password,
    }


def signs_in(bootstrap: str, creds: Credentials | None, timeout: float = 5.0) -> bool:
    """Whether ``creds`` (None: no SASL) get a metadata answer from ``bootstrap`` within
    ``timeout`` seconds: signed in (a principal without any ACL still gets the brokers)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    client = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "log_level": 0,  # a refused sign-in is the answer, not noise
            **librdkafka_options(creds),
        }
    )
    try:
        return bool(client.list_topics(timeout=timeout).brokers)
    except KafkaException:
        return False


def ensure_users(
    bootstrap: str, admin: Credentials, passwords: Mapping[str, str], timeout: float = 30.0
) -> list[str]:
    """As ``admin``, create or update the SCRAM-SHA-256 user of each principal in
    ``passwords`` (principal -> password), then wait until each of them signs in (a new
    credential reaches the brokers through the cluster metadata). Returns the users."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialAlteration,
        UserScramCredentialUpsertion,
    )

    unknown = set(passwords) - set(SERVICES)
    if unknown:
        raise ValueError(f"not Venn principals: {', '.join(sorted(unknown))}")
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, SCRAM_ITERATIONS)
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(user, info, password.encode())
        for user, password in passwords.items()
    ]
    if not upserts:
        return []
    client = AdminClient(
        {"bootstrap.servers": bootstrap, "log_level": 2, **librdkafka_options(admin)}
    )
    for future in client.alter_user_scram_credentials(upserts, request_timeout=timeout).values():
        future.result(timeout)
    deadline = time.monotonic() + timeout
    for user, password in passwords.items():
        while not signs_in(bootstrap, Credentials(user, password), timeout=2.0):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{user} cannot sign in at {bootstrap} after {timeout:.0f} s")
            time.sleep(0.2)
    return list(passwords)


def apply_acls(
    bootstrap: str, admin: Credentials, app_id: str, recorder_group: str, timeout: float = 30.0
) -> int:
    """Grant every principal its `access` (idempotent: Kafka keeps one copy of an ACL), and
    take back any other ACL a Venn principal holds. Returns how many ACL bindings were asked
    for."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
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
    # What an earlier version granted and this one does not (the gateway's write on
    # venn.jobs) is taken back: Kafka only adds ACLs.
    wanted = {str(b) for b in unique}
    principals = {f"User:{p}" for p in SERVICES}

    def as_filter(b: Any) -> Any:
        return AclBindingFilter(
            b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
            b.permission_type,
        )  # fmt: skip

    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    found = client.describe_acls(everything, request_timeout=timeout).result(timeout)
    stale = [as_filter(b) for b in found if b.principal in principals and str(b) not in wanted]
    if stale:
        for future in client.delete_acls(stale, request_timeout=timeout).values():
            future.result(timeout)
    return len(unique)


def credentials_from(users: Mapping[str, str], principal: str) -> Credentials | None:
    password = users.get(principal)
    return Credentials(principal, password) if password else None
