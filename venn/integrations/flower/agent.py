"""A SuperNode's presence in Venn: it checks in to the gateway with the attributes of its
node config, under its own device token, for as long as the node runs.

Venn answers a check-in with an assignment (the job's ServerApp hears of it and sends the
node its task) or with "not now". A node keeps checking in while it works: the scheduler
assigns no device holding an active assignment, which ends with the node's result (the
ClientApp mod) or with the round's close. So a node serves one Venn job at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from venn.integrations.flower.profile import NodeProfile

log = logging.getLogger("venn.flower")


@dataclass
class AgentStats:
    checkins: int = 0
    assigned: int = 0
    refused: int = 0
    errors: int = 0
    assignments: list[tuple[float, str, int]] = field(default_factory=list)
    """(time, job id, round index) of each assignment."""


class NodeAgent:
    """Check-in loop of one node. ``interval_s``: the longest pause between check-ins
    while the node gets no work (a shorter retry_after from the gateway wins)."""

    def __init__(
        self,
        profile: NodeProfile,
        gateway: str,
        token: str | None,
        *,
        interval_s: float = 1.0,
        on_assignment: Callable[[str, int], None] | None = None,
    ) -> None:
        self.profile = profile
        self.gateway = gateway.rstrip("/")
        self.token = token
        self.interval_s = interval_s
        self.on_assignment = on_assignment
        self.stats = AgentStats()

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    async def checkin(self, http: aiohttp.ClientSession) -> float:
        """One check-in; returns how long to wait before the next."""
        self.stats.checkins += 1
        try:
            async with http.post(
                f"{self.gateway}/v1/checkin",
                json=self.profile.checkin_body(),
                headers=self._headers(),
            ) as response:
                payload: dict[str, Any] = await response.json(content_type=None)
                status = response.status
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self.stats.errors += 1
            log.warning("%s: check-in failed: %r", self.profile.device_id, exc)
            return self.interval_s
        if status in (401, 403, 422):
            # A bad token or profile does not heal by retrying fast.
            self.stats.refused += 1
            log.error("%s: check-in refused (%d): %s", self.profile.device_id, status, payload)
            return max(self.interval_s, 10.0)
        if status == 200 and payload.get("assigned"):
            self.stats.assigned += 1
            job_id, round_index = str(payload["job_id"]), int(payload["round_index"])
            self.stats.assignments.append((time.time(), job_id, round_index))
            log.info("%s: assigned to %s round %d", self.profile.device_id, job_id, round_index)
            if self.on_assignment is not None:
                self.on_assignment(job_id, round_index)
            return self.interval_s
        retry = payload.get("retry_after")
        if status == 429 and isinstance(retry, int | float):
            return float(retry)
        return min(float(retry), self.interval_s) if isinstance(retry, int | float) else 1.0

    async def run(self, stop: asyncio.Event) -> None:
        """Check in until ``stop`` is set."""
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while not stop.is_set():
                pause = await self.checkin(http)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), pause)


async def enroll(gateway: str, enroll_token: str, device_id: str) -> str:
    """A device token for ``device_id`` from the gateway (`POST /v1/devices`)."""
    timeout = aiohttp.ClientTimeout(total=30)
    async with (
        aiohttp.ClientSession(timeout=timeout) as http,
        http.post(
            f"{gateway.rstrip('/')}/v1/devices",
            json={"device_id": device_id},
            headers={"Authorization": f"Bearer {enroll_token}"},
        ) as response,
    ):
        payload = await response.json(content_type=None)
        if response.status != 201:
            raise RuntimeError(f"enrolment of {device_id} refused ({response.status}): {payload}")
        return str(payload["token"])
