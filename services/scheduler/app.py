"""The scheduler worker: a Faust app whose tables hold the scheduler's state, and the
decider's loop that reads its inputs while this worker decides.

Workers: one decides, any others are hot standbys. `OneDeciderAssignor`
(venn.broker.faust_adapter) gives every changelog partition to one member of the Faust
group and makes the others standbys of them (Faust keeps their copies filled); when the
decider dies its session expires (`Settings.scheduler_session_timeout`), the group
rebalances, and a standby becomes the decider once Faust has read the changelogs to
their end. Only then does its loop (`services.scheduler.inputs.DeciderLoop`) start: it
rebuilds the core from the tables and reads every input topic from the offsets its
predecessor committed.

What each topic's events do is `handlers`; how a record becomes an event is `intake`;
what the worker keeps is `state`, over the store of `tables`. Faust is reached only
through `venn.broker.faust_adapter`.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import faust

from services.scheduler import metrics
from services.scheduler.expiry import expire_silent_jobs, expiry_interval
from services.scheduler.handlers import TopicHandlers
from services.scheduler.inputs import DeciderLoop, Outbox, Tick
from services.scheduler.intake import Intake
from services.scheduler.letters import WrittenLetters
from services.scheduler.publisher import Publisher
from services.scheduler.state import SchedulerState
from services.scheduler.status import STATUS_INTERVAL_S, publish_status
from services.scheduler.tables import FaustStore
from services.scheduler.web import STALLED_S, add_pages
from venn.auth import Tokens
from venn.auth.revocations import follow_revocations
from venn.broker import security, topics
from venn.broker.faust_adapter import (
    CONSUMER_SCHEME,
    STANDBY_MEMORY_STORE,
    OneDeciderAssignor,
    follow_decider,
)
from venn.broker.health import BrokerWatch
from venn.broker.ledger import OffsetLedger
from venn.broker.stream import StreamStats, authorized
from venn.checkin_columns import AttrsCache
from venn.net import free_port
from venn.settings import Settings

log = logging.getLogger(__name__)

TABLES = topics.SCHEDULER_TABLES
QUIET_LOGGERS = ("faust", "mode", "aiokafka")


def faust_credentials(settings: Settings) -> faust.SASLCredentials | None:
    creds = settings.kafka_credentials
    if creds is None:
        return None
    return faust.SASLCredentials(
        username=creds.user, password=creds.password, mechanism=security.MECHANISM
    )


def quiet_logs(level: int = logging.WARNING) -> None:
    # Faust builds debug records even at -l warn; this saves about 15% CPU. A worker
    # started with `-l info` keeps Faust's recovery and rebalance logs.
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(level, logging.INFO))


def restart_process(broker: BrokerWatch) -> bool:
    """Replace this worker process with a fresh one, same command line and environment
    (`RejoinWatch`: its group membership is stuck); False while the broker is away, which a
    fresh worker could not join either."""
    if not broker.available:
        log.warning("the group membership is stuck and the broker is away: not restarting")
        return False
    log.warning("the group membership is stuck: this worker starts again as a new process")
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, sys.orig_argv)


def worker_app(settings: Settings) -> faust.App:
    """The Faust app of one worker, before its tables, pages and tasks."""
    config = settings.scheduler
    # 0: any free port; every worker needs its own (Faust's web server always binds).
    web_port = config.web_port or free_port(config.web_host)
    tuning = settings.tuning
    return faust.App(
        settings.app_id,
        broker=f"kafka://{settings.broker}",
        broker_consumer=f"{CONSUMER_SCHEME}://{settings.broker}",
        store=STANDBY_MEMORY_STORE,
        topic_partitions=settings.topic_partitions,
        topic_replication_factor=1,
        topic_disable_leader=True,  # the leader topic would be auto-created with 4 partitions
        # Standbys keep the tables filled from the changelogs (OneDeciderAssignor).
        PartitionAssignor=OneDeciderAssignor,
        table_standby_replicas=1,
        consumer_auto_offset_reset="earliest",
        producer_acks=tuning.faust_acks,
        producer_max_batch_size=tuning.faust_producer_max_batch_size,
        producer_linger=tuning.faust_producer_linger_s,
        broker_session_timeout=settings.scheduler_session_timeout / 1000,
        broker_rebalance_timeout=tuning.rebalance_timeout_ms / 1000,
        broker_heartbeat_interval=tuning.heartbeat_interval_ms / 1000,
        web_bind=config.web_host,
        broker_credentials=faust_credentials(settings),
        web_port=web_port,
        # One per worker: workers of one run dir must not share Faust's data directory.
        datadir=str(Path(settings.run_dir) / f"{settings.app_id}-data-{web_port}"),
    )


def create_app(settings: Settings | None = None) -> faust.App:
    """The app of one worker (settings: default from the environment, with the
    scheduler's Kafka principal)."""
    settings = (settings or Settings.from_env()).for_role("scheduler")
    config = settings.scheduler
    tokens = Tokens(settings.auth_secret) if settings.auth_enabled else None
    quiet_logs()
    app = worker_app(settings)
    store = FaustStore.create(app, settings.topic_partitions)
    state = SchedulerState(
        config,
        store,
        settings.tenants.config(),
        settings.max_event_bytes,
        time.time(),
        answer_wait_s=settings.gateway.wait_s,
        limits=settings.admission.limits(),
        tokens=tokens,
    )
    outbox = Outbox()
    letters = WrittenLetters(settings.topic_partitions)
    publisher = Publisher(outbox.put, letters)
    stats = StreamStats()
    # Job and round events need a token that allowed them when they were produced: the
    # rule every reader of these topics applies (judged at production time: issue 26).
    authorize = authorized(tokens)
    attrs_cache = AttrsCache()
    topic_handlers = TopicHandlers(state)
    intakes = {
        name: Intake(
            name,
            handle,
            state,
            publisher,
            authorize,
            stats,
            settings.max_event_bytes,
            attrs_cache,
            together=topic_handlers.decide_batches if name == topics.CHECKINS else None,
        )
        for name, handle in topic_handlers.by_topic().items()
    }
    ledger = OffsetLedger(
        observe=lambda topic, p, outcome: metrics.OFFSETS.labels(topic, str(p), outcome).inc()
    )

    async def send(topic: str, key: bytes | None, value: bytes) -> Any:
        return await app.producer.send(topic, key, value, None, None, None)

    ticks = [
        Tick(
            expiry_interval(config),
            lambda now: expire_silent_jobs(state, tokens, outbox.put, now),
            caught_up_on=topics.JOBS,
        ),
        Tick(STATUS_INTERVAL_S, lambda now: publish_status(state, outbox.put, now)),
    ]
    loop = DeciderLoop(settings, state, intakes, outbox, send, ledger, ticks, letters.ready.wait)
    watch = BrokerWatch(settings.broker, settings.kafka_credentials)
    follow_decider(app, loop.start, loop.stop, lambda: restart_process(watch))
    add_pages(app, watch, loop)

    @app.task
    async def _start() -> None:
        quiet_logs(logging.getLogger().level)
        watch.start()
        await letters.load(settings)

    @app.timer(STALLED_S / 3)
    async def _stuck() -> None:
        loop.report_if_stuck(STALLED_S)

    @app.task
    async def _revocations() -> None:
        if tokens is not None:
            await follow_revocations(settings.broker, tokens.revocations, settings.kafka_options)

    return app
