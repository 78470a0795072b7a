"""The embedded stack: broker, topics, audit DB and services, in one run directory.

`venn up` keeps it running (detached); `venn demo` starts a private one and tears it down.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient

from venn.audit.migrate import upgrade_database
from venn.broker.embedded import start_detached, stop_detached
from venn.broker.topics import ensure_topics
from venn.settings import Settings
from venn.stack.processes import (
    ServiceSpec,
    recorder_spec,
    running_services,
    scheduler_spec,
    start_service,
    stop_services,
)

STACK_FILE = "stack.json"


@dataclass(frozen=True)
class StackInfo:
    run_dir: Path
    broker: str
    database_url: str
    services: dict[str, int]


def absolute(settings: Settings) -> Settings:
    """Settings with an absolute run dir (services run with the run dir as cwd)."""
    run = Path(settings.run_dir).resolve()
    url = settings.database_url
    default_db = f"sqlite:///{Path(settings.run_dir) / 'venn.sqlite'}"
    if url == default_db:
        url = f"sqlite:///{run / 'venn.sqlite'}"
    return dataclasses.replace(settings, run_dir=str(run), database_url=url)


def scheduler_topics(settings: Settings) -> list[str]:
    """The scheduler's changelog topics (they must exist before it starts)."""
    from services.scheduler.app import changelog_topics

    return list(changelog_topics(settings))


async def prepare_topics(settings: Settings) -> dict[str, int]:
    return await ensure_topics(
        settings.broker, settings.topic_partitions, extra=scheduler_topics(settings)
    )


def prepare(settings: Settings) -> None:
    """Create every topic (changelogs included) and migrate the audit DB to head."""
    asyncio.run(prepare_topics(settings))
    upgrade_database(settings.database_url)


def service_env(settings: Settings, policy: str, seed: int) -> dict[str, str]:
    return {**settings.as_env(), "VENN_POLICY": policy, "VENN_SEED": str(seed)}


def gateway_spec() -> ServiceSpec:
    """The device gateway (services.gateway): HTTP on 127.0.0.1:VENN_GATEWAY_PORT."""
    return ServiceSpec("gateway", ("-m", "services.gateway", "--log-level", "WARNING"))


def default_services() -> list[ServiceSpec]:
    return [scheduler_spec(), recorder_spec(), gateway_spec()]


async def wait_scheduler_ready(settings: Settings, timeout: float = 60.0) -> bool:
    """Wait until the scheduler's consumer group is stable (its agents are reading)."""
    deadline = time.monotonic() + timeout
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.broker, client_id="venn-stack")
    await admin.start()
    try:
        while time.monotonic() < deadline:
            try:
                groups = await admin.describe_consumer_groups([settings.app_id])
            except Exception:  # the coordinator may not know the group yet
                groups = []
            for response in groups:
                for group in response.to_object().get("groups", []):
                    if group.get("state") == "Stable" and group.get("members"):
                        return True
            await asyncio.sleep(0.5)
    finally:
        await admin.close()
    return False


def up(settings: Settings, policy: str = "venn", seed: int = 0, wait: bool = True) -> StackInfo:
    """Start (or reuse) the detached broker and services of ``settings.run_dir``; with
    ``wait``, return once the scheduler's consumer group is stable."""
    settings = absolute(settings)
    run = settings.run_path
    run.mkdir(parents=True, exist_ok=True)
    broker = start_detached(run)
    settings = dataclasses.replace(settings, broker=broker)
    prepare(settings)
    alive = running_services(run)
    env = service_env(settings, policy, seed)
    for spec in default_services():
        if spec.name not in alive:
            start_service(run, spec, env)
    if wait and not asyncio.run(wait_scheduler_ready(settings)):
        raise RuntimeError(f"the scheduler did not become ready; see {run / 'scheduler.log'}")
    info = StackInfo(run, broker, settings.database_url, running_services(run))
    (run / STACK_FILE).write_text(
        json.dumps({"broker": broker, "database_url": info.database_url, "policy": policy})
    )
    return info


def down(settings: Settings, timeout: float = 10.0) -> list[str]:
    """Stop the services and the broker of ``settings.run_dir``. Returns what was stopped."""
    run = absolute(settings).run_path
    stopped = stop_services(run, timeout)
    if stop_detached(run, timeout):
        stopped.append("broker")
    (run / STACK_FILE).unlink(missing_ok=True)
    return stopped
