"""`python -m services.recorder [--migrate]`: run the audit recorder with Settings from env."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from services.recorder.app import RecorderStats, run_recorder
from services.recorder.web import recorder_app, serve
from venn.audit import upgrade_database
from venn.audit.health import DatabaseWatch
from venn.broker.health import BrokerWatch
from venn.settings import Settings


async def _main(settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    stats = RecorderStats()
    watch = BrokerWatch(settings.broker, settings.kafka_credentials)
    database = DatabaseWatch(settings.database_url)
    runner = None
    if settings.recorder_port:
        watch.start()
        database.start()
        runner = await serve(
            recorder_app(stats, watch, database), settings.recorder_host, settings.recorder_port
        )
    try:
        await run_recorder(settings, stop, stats=stats)
    finally:
        await watch.stop()
        await database.stop()
        if runner is not None:
            await runner.cleanup()
    logging.getLogger("venn.recorder").info("stopped: %s", stats)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m services.recorder", description=__doc__)
    parser.add_argument(
        "--migrate", action="store_true", help="run `alembic upgrade head` on the DB first"
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args()
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    settings = Settings.from_env().for_role("recorder")
    if args.migrate:
        upgrade_database(settings.database_url)
    asyncio.run(_main(settings))


if __name__ == "__main__":
    main()
