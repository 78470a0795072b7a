"""One home for what the e2e modules run: a demo whose audit rows stay in a database of its
own, and a `venn up` stack; each on the module's `stack_broker` (tests/brokers.py): the
session's broker, or a broker of its own in an `own_broker` module."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from devtools.stack.demo import DemoConfig, DemoHandles, DemoResult, run_demo
from devtools.stack.local import Stack, StackInfo
from tests.brokers import StackBroker
from tests.environment import clean_env
from venn.audit.db import create_database, drop_database
from venn.audit.migrate import upgrade_database
from venn.broker import topics
from venn.net import free_port
from venn.settings import Settings, run_dir_secret

PIPELINE_TOPICS = (topics.CHECKINS, topics.JOBS, topics.ASSIGNMENTS, topics.RESULTS, topics.ROUNDS)
"""What a demo reads back for the invariants of design.md."""

DEMO = DemoConfig(
    workload="demo",
    policy="venn",
    seed=3,
    speedup=20.0,
    rate_per_s=1.5,
    arrival_scale=0.02,
    capture_topics=PIPELINE_TOPICS,
)
"""The e2e demo: the demo workload's nested tiers, 20 times faster than the trace."""


@contextmanager
def own_database(pg_admin_url: str) -> Iterator[str]:
    """A fresh database migrated to head on the session's server (dropped on exit)."""
    url = create_database(pg_admin_url, f"venn_e2e_{uuid.uuid4().hex[:10]}")
    try:
        upgrade_database(url)
        yield url
    finally:
        drop_database(url)


@asynccontextmanager
async def demo_run(
    config: DemoConfig,
    pg_admin_url: str,
    run_dir: Path,
    where: StackBroker | str,
    handles: DemoHandles | None = None,
) -> AsyncIterator[DemoResult]:
    """A finished `run_demo(config)` whose audit rows stay in a database of its own
    (dropped on exit), run in ``run_dir`` on ``where`` (the module's `stack_broker`; a
    broker kind: a broker of its own of that kind)."""
    where = StackBroker(where) if isinstance(where, str) else where
    with own_database(pg_admin_url) as url:
        config = dataclasses.replace(
            config,
            database_url=url,
            run_dir=str(run_dir),
            broker_kind=where.kind,
            broker=where.bootstrap,
            broker_tuning=where.tuning,
            kafka_users=where.users,
        )
        yield await run_demo(config, handles)


@contextmanager
def venn_up(
    run_dir: Path, where: StackBroker | None = None, **env: str
) -> Iterator[tuple[StackInfo, Settings]]:
    """`venn up` in ``run_dir`` (``env``: more VENN_ settings), and its settings as a client
    in the run dir sees them; `venn down` on exit. On ``where`` (shared: the module's
    `stack_broker`, with an app id and recorder group of its own), else on an Apache Kafka
    of its own at a free port."""
    if where is not None and where.shared:
        env = {
            "VENN_BROKER_KIND": "external",
            "VENN_BROKER": where.bootstrap,
            "VENN_BROKER_TUNING": where.tuning,
            **env,
        }
    else:
        env = {"VENN_BROKER_KIND": "kafka", "VENN_BROKER": f"127.0.0.1:{free_port()}", **env}
    settings = Settings.from_env(
        clean_env(run_dir, VENN_GATEWAY_PORT=str(free_port()), **env), running=False
    )
    stack = Stack(
        settings,
        detached=True,
        unique=where is not None and where.shared,
        kafka_users=where.users if where is not None else None,
    )
    info = stack.up()  # what did start stops with it if it fails
    settings = dataclasses.replace(
        stack.settings,
        run_dir=str(info.run_dir),
        auth_secret=run_dir_secret(info.run_dir),
    )
    try:
        yield info, settings
    finally:
        stack.down()
