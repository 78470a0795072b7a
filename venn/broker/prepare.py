"""A stack's topics, created before any of its services starts: every Venn topic and the
scheduler's changelogs, with one partition count (`venn up`, `venn prepare`, the demo, the
load test, the tests)."""

from __future__ import annotations

from venn.broker.security import ADMIN
from venn.broker.topics import ensure_topics, scheduler_changelogs
from venn.settings import Settings


async def prepare_topics(settings: Settings) -> dict[str, int]:
    """Create every Venn topic and the scheduler's changelogs with one partition count
    (as the admin principal where the broker is secured: `Settings.for_role`); idempotent.
    Run it before any service starts (`venn up`, `venn prepare`, the demo, the tests)."""
    admin = settings.for_role(ADMIN)
    return await ensure_topics(
        admin.broker,
        admin.topic_partitions,
        extra=scheduler_changelogs(admin.app_id),
        options=admin.kafka_options,
    )
