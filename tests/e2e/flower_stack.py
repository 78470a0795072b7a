"""The Venn side of the Flower end-to-end tests: a scheduler worker and a gateway (with
authentication) on the session's broker, once per test module (tests/e2e/conftest.py makes
it a fixture of every module here)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from devtools.stack.local import Stack
from tests.brokers import SessionBroker
from venn.net import free_port
from venn.settings import GatewaySettings, Settings


@pytest.fixture(scope="module")
def flower_venn(
    session_broker: SessionBroker, partitions: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """A scheduler worker and a gateway (with authentication) on the session's broker, its
    plain listener (the bridges' SDK signs in without SASL): (gateway URL, auth secret)."""
    secret = secrets.token_hex(32)
    settings = Settings(
        broker=session_broker.bootstrap,
        broker_kind="external",
        broker_tuning=session_broker.kind,
        run_dir=str(tmp_path_factory.mktemp("flower-venn")),
        topic_partitions=partitions,
        auth_secret=secret,
        gateway=GatewaySettings(port=free_port(), retry_after_s=1),
    )
    with Stack(settings, recorder=False, unique=True) as stack:
        yield stack.url, secret
