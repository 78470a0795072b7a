"""The scheduler's view of the shared `venn.settings.Settings`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from venn.auth import Tokens
from venn.broker.process import free_port
from venn.settings import Settings

DEFAULT_TASK_URL_BASE = "http://coordinator.local"


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    settings: Settings
    policy: str = "venn"
    seed: int = 0
    web_port: int = 0
    task_url_base: str = DEFAULT_TASK_URL_BASE
    dedupe_window: int = 100_000
    checkin_max_age_s: float = 10.0
    job_timeout_s: float = 600.0
    tokens: Tokens | None = None
    """Checks the job owners' tokens on job and round events (None: no authentication)."""
    leased: bool = False
    """Any number of workers share the partitions with leases (``services.scheduler.leases``);
    False: one worker owns every partition."""

    @classmethod
    def from_env(
        cls, settings: Settings | None = None, environ: Mapping[str, str] | None = None
    ) -> SchedulerConfig:
        env = os.environ if environ is None else environ
        s = (settings or Settings.from_env(env)).for_role("scheduler")
        return cls(
            settings=s,
            policy=s.policy,
            seed=s.seed,
            # 0 = any free port: every worker needs its own (Faust's web server always binds).
            web_port=s.scheduler_web_port or free_port(),
            task_url_base=s.task_url_base.rstrip("/"),
            dedupe_window=s.dedupe_window,
            checkin_max_age_s=s.checkin_max_age_s,
            job_timeout_s=s.job_timeout_s,
            tokens=Tokens(s.auth_secret) if s.auth_enabled else None,
            leased=leased_mode(s.scheduler_mode),
        )

    def task_url(self, job_id: str, round_index: int) -> str:
        return f"{self.task_url_base}/jobs/{job_id}/rounds/{round_index}/task"


MODES = ("single", "leased")


def leased_mode(mode: str) -> bool:
    if mode not in MODES:
        raise ValueError(f"VENN_SCHEDULER_MODE must be one of {', '.join(MODES)}, not {mode!r}")
    return mode == "leased"
