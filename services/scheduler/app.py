"""The Faust app "scheduler": one agent per input topic, all feeding one core.

Agents (values read as raw bytes, decoded strictly with `venn.events.decode`):
- venn.jobs      -> register / request round / cancel
- venn.rounds    -> round closed / job finished
- venn.results   -> release the device, record its response time for the matching
- venn.checkins  -> decide; a single DeviceCheckin gives at most one Assignment; the
  CheckinBatches read in one fetch are decided together: one AssignmentBatch per job
  (venn.assignments, key job_id) and, for each batch with a reply_to, one CheckinsDeclined
  for the rest of its check-ins (venn.replies)
- venn.assignments (our own output, read back on the job's partition) -> account the
  assignments in the jobs table (see `services.scheduler.state` for why)
Anything that cannot be decoded or applied is dead-lettered as `venn.broker.stream` says
(the scheduler owns every topic it reads: all go to venn.dead-letters); the agents never die.
In a batch with bad items, each bad item gets its own dead letter and the rest is applied.

The hot path carries batches because Faust's cost is per Kafka message (about 200-400 µs
of consumer, stream and commit work each on these machines), not per byte.

Workers: one decides, any others are hot standbys. `OneDeciderAssignor`
(venn.broker.faust_adapter) gives every partition to one member of the group, so one core
sees every check-in and every job (the invariants hold as with one worker), and makes the
others standbys of the tables' changelogs; when the decider dies its session expires
(`Settings.scheduler_session_timeout`), the group rebalances and a standby becomes the
decider, restores the tables and resumes from the committed offsets.

`create_app` only wires the units: the state (`state.SchedulerState`) over the scheduler
store (`store`, the Faust one in `tables`), one `intake.Intake` per input topic with its
handler (`handlers`), the `publisher`, the timers (`expiry`, `status`, the stall guard of
`stall`) and the pages (`web`). Faust's consumer is reached only through
`venn.broker.faust_adapter`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import faust

from services.scheduler import metrics
from services.scheduler.expiry import expire_silent_jobs, expiry_interval
from services.scheduler.handlers import TopicHandlers
from services.scheduler.intake import Intake
from services.scheduler.letters import WrittenLetters
from services.scheduler.publisher import Publisher
from services.scheduler.readback import ReadBack
from services.scheduler.stall import GUARD_INTERVAL_S, StallGuard
from services.scheduler.state import SchedulerState
from services.scheduler.status import STATUS_INTERVAL_S, publish_status
from services.scheduler.tables import FaustStore
from services.scheduler.web import add_pages
from venn.auth import Tokens
from venn.auth.revocations import follow_revocations
from venn.broker import security, topics
from venn.broker.faust_adapter import (
    STANDBY_MEMORY_STORE,
    FaustPartitions,
    OffsetsApp,
    OneDeciderAssignor,
    owned_partitions,
    send_output,
    serve,
)
from venn.broker.health import BrokerWatch
from venn.broker.ledger import OffsetLedger
from venn.broker.process import free_port
from venn.broker.stream import StreamStats, authorized
from venn.checkin_columns import AttrsCache
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


def worker_app(settings: Settings) -> OffsetsApp:
    """The Faust app of one worker, before its tables, agents, pages and timers."""
    config = settings.scheduler
    # 0: any free port; every worker needs its own (Faust's web server always binds).
    web_port = config.web_port or free_port(config.web_host)
    tuning = settings.tuning
    return OffsetsApp(
        settings.app_id,
        fetch_wait_ms=settings.scheduler_fetch_wait,
        fetch_gather_ms=settings.scheduler.gather_ms,
        broker=f"kafka://{settings.broker}",
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
        output_errors=lambda topic, kind: metrics.OUTPUT_ERRORS.labels(topic, kind).inc(),
        ledger=OffsetLedger(
            observe=lambda topic, p, outcome: metrics.OFFSETS.labels(topic, str(p), outcome).inc()
        ),
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
    partitions = settings.topic_partitions

    def owned() -> set[int]:
        return owned_partitions(app, topics.JOBS)

    faust_parts = FaustPartitions(app)
    readback = ReadBack(lambda p: faust_parts.next_offset((topics.ASSIGNMENTS, p)))
    store = FaustStore.create(app, partitions, owned)
    state = SchedulerState(
        config, store, readback, settings.tenants.config(), settings.max_event_bytes
    )
    held: set[int] = set()

    async def expect_readback(generation: int) -> None:
        parts = [(topics.ASSIGNMENTS, p) for p in range(partitions)]
        while generation == readback.generation:
            try:
                ends = await faust_parts.end_offsets(parts)
            except Exception:  # the broker may be rebalancing or down: ask again
                log.warning("end offsets of %s not known yet", topics.ASSIGNMENTS, exc_info=True)
                await asyncio.sleep(1.0)
                continue
            readback.expect(generation, {p: end for (_, p), end in ends.items()})
            return

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]
    async def _on_assigned(sender: object, assigned: object, **kwargs: object) -> None:
        now_owned = owned()
        deciding = len(now_owned) == partitions
        metrics.DECIDING.set(1 if deciding else 0)
        log.info("%s", "deciding" if deciding else "standby")
        if now_owned != held:
            held.clear()
            held.update(now_owned)
            state.invalidate()
            if deciding:  # the predecessor's last assignments first (ReadBack)
                app.add_future(expect_readback(readback.arm()))

    def send(topic: str, key: bytes, value: bytes) -> None:
        send_output(app, topic, key, value)

    letters = WrittenLetters(partitions)
    publisher = Publisher(send, state, letters)
    stats = StreamStats()
    # Job and round events need a token that allowed them when they were produced: the
    # rule every reader of these topics applies (judged at production time: issue 26).
    authorize = authorized(tokens)
    attrs_cache = AttrsCache()
    topic_handlers = TopicHandlers(state)
    handlers = topic_handlers.by_topic()
    for name, handle in handlers.items():
        intake = Intake(
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

        # Only check-ins are read a fetch at a time: the other topics' handlers write table
        # rows, whose changelog partition is that of the event Faust yielded last.
        most = config.decide_together if name == topics.CHECKINS else 1

        async def agent(stream: faust.StreamT, _intake: Intake = intake, _most: int = most) -> None:
            await letters.ready.wait()
            await serve(stream, app.ledger, _intake.many, _most)

        channel = app.topic(name, key_serializer="raw", value_serializer="raw")
        app.agent(channel, name="scheduler-" + name.removeprefix("venn."))(agent)

    watch = BrokerWatch(settings.broker, settings.kafka_credentials)
    guard = StallGuard(faust_parts, set(handlers), watch)
    add_pages(app, watch, guard.stalls)

    @app.task
    async def _start() -> None:
        quiet_logs(logging.getLogger().level)
        watch.start()
        await letters.load(settings)

    @app.task
    async def _revocations() -> None:
        if tokens is not None:
            await follow_revocations(settings.broker, tokens.revocations, settings.kafka_options)

    @app.timer(interval=expiry_interval(config))
    async def _expire_silent_jobs() -> None:
        expire_silent_jobs(state, tokens, send, time.time())

    @app.timer(interval=STATUS_INTERVAL_S)
    async def _status() -> None:
        publish_status(state, send, time.time())

    @app.timer(interval=GUARD_INTERVAL_S)
    async def _stall_guard() -> None:
        await guard.check()

    return app
