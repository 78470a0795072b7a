"""Where a ServerApp finds Venn: the environment its SuperLink passed down (`VENN_RUN_DIR`
of a `venn up` stack, or `VENN_BROKER`, `VENN_KAFKA_USER`/`VENN_KAFKA_PASSWORD` and
`VENN_JOB_TOKEN`), overridden by the run config keys ``venn-broker`` and
``venn-job-token`` (`flwr run -c "venn-broker='host:port'"`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from venn.auth.local import job_token
from venn.sdk import VennClient
from venn.settings import Settings

BROKER_KEY = "venn-broker"
TOKEN_KEY = "venn-job-token"
JOB_ID_KEY = "venn-job-id"


def job_id_for(run_id: int, run_config: Mapping[str, Any]) -> str:
    """The Venn job id of a Flower run: ``venn-job-id`` from its run config, else
    ``flwr-<run id>``."""
    given = run_config.get(JOB_ID_KEY)
    return given if isinstance(given, str) and given else f"flwr-{run_id}"


def client_for(job_id: str, run_config: Mapping[str, Any]) -> VennClient:
    """A (not yet started) SDK client for the job, signed in as a coordinator."""
    settings = Settings.from_env().for_role("coordinator")
    broker = run_config.get(BROKER_KEY)
    if isinstance(broker, str) and broker:
        settings = dataclasses.replace(settings, broker=broker)
    token = run_config.get(TOKEN_KEY)
    if not isinstance(token, str) or not token:
        token = job_token(settings, [job_id], owner="flower") or None
    return VennClient(
        settings.broker,
        client_id=f"venn-flower-{job_id}",
        token=token,
        kafka_options=settings.kafka_options,
        heartbeat_s=settings.job_heartbeat_s,
    )
