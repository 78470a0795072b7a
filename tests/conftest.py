"""Shared fixtures: ONE embedded broker and ONE migrated Postgres database per test run.

Tests that use `broker` get the `broker` marker, tests that use `pg_url` get `database`,
so `pytest -m "not broker"` skips the slow ones.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# The project is run from the checkout, not installed: make `venn` and `services` importable.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PG_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "broker" in fixtures:
            item.add_marker(pytest.mark.broker)
        if "pg_url" in fixtures or "pg_admin_url" in fixtures:
            item.add_marker(pytest.mark.database)


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch VENN_RUN_DIR for the session."""
    return tmp_path_factory.mktemp("venn-run")


@pytest.fixture(scope="session")
def broker(run_dir: Path) -> Iterator[str]:
    """Bootstrap address ("127.0.0.1:PORT") of one Tansu broker shared by the whole run.

    Tansu keeps everything in memory: use unique topic names / group ids per test
    (see `unique`) and delete topics you create in bulk.
    """
    from venn.broker.embedded import EmbeddedBroker

    with EmbeddedBroker(log_path=run_dir / "broker.log") as b:
        yield b.bootstrap


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    """URL of the maintenance database (for CREATE/DROP DATABASE)."""
    return PG_ADMIN_URL


@pytest.fixture(scope="session")
def pg_url(pg_admin_url: str) -> Iterator[str]:
    """URL of a fresh, uniquely named Postgres database migrated to Alembic head."""
    from venn.audit.db import create_database, drop_database
    from venn.audit.migrate import upgrade_database

    url = create_database(pg_admin_url, f"venn_test_{uuid.uuid4().hex[:10]}")
    try:
        upgrade_database(url)
        yield url
    finally:
        drop_database(url)


@pytest.fixture(scope="session")
def partitions(broker: str) -> int:
    """Partition count of the run's Venn topics: the first test that creates them picks it
    (4), and every scheduler stack of the run must use the same, or Faust's changelogs and
    the shared input topics would disagree."""
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient

    from venn.broker import topics

    async def existing() -> int:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker)
        await admin.start()
        try:
            return (await topics.topic_partitions(admin)).get(topics.JOBS, 4)
        finally:
            await admin.close()

    return asyncio.run(existing())


@pytest.fixture
def unique() -> str:
    """A short unique token for topic prefixes, group ids, job ids."""
    return uuid.uuid4().hex[:8]
