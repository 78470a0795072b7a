"""One home for what the e2e modules run: a demo whose audit rows stay in a database of its
own, and a `venn up` stack on a private Apache Kafka."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from tests.environment import clean_env
from venn.audit.db import create_database, drop_database
from venn.audit.migrate import upgrade_database
from venn.broker import topics
from venn.broker.process import free_port
from venn.settings import Settings, run_dir_secret
from venn.stack.demo import DemoConfig, DemoHandles, DemoResult, run_demo
from venn.stack.local import StackInfo, down, up

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


@asynccontextmanager
async def demo_run(
    config: DemoConfig,
    pg_admin_url: str,
    run_dir: Path,
    broker_kind: str,
    handles: DemoHandles | None = None,
) -> AsyncIterator[DemoResult]:
    """A finished `run_demo(config)` whose audit rows stay in a database of its own
    (dropped on exit), run in ``run_dir`` on its own broker of ``broker_kind``."""
    url = create_database(pg_admin_url, f"venn_e2e_{uuid.uuid4().hex[:10]}")
    try:
        upgrade_database(url)
        config = dataclasses.replace(
            config, database_url=url, run_dir=str(run_dir), broker_kind=broker_kind
        )
        yield await run_demo(config, handles)
    finally:
        drop_database(url)


@contextmanager
def venn_up(run_dir: Path, **env: str) -> Iterator[tuple[StackInfo, Settings]]:
    """`venn up` in ``run_dir`` on Apache Kafka at free ports (``env``: more VENN_ settings),
    and its settings as a client in the run dir sees them; `venn down` on exit."""
    settings = Settings.from_env(
        clean_env(
            run_dir,
            VENN_BROKER=f"127.0.0.1:{free_port()}",
            VENN_BROKER_KIND="kafka",
            VENN_GATEWAY_PORT=str(free_port()),
            **env,
        )
    )
    try:
        info = up(settings)
    except BaseException:
        down(settings)  # what did start (broker, database, services) stops with it
        raise
    settings = dataclasses.replace(
        settings,
        run_dir=str(info.run_dir),
        broker=info.broker,
        database_url=info.database_url,
        auth_secret=run_dir_secret(info.run_dir),
    )
    try:
        yield info, settings
    finally:
        down(settings)
