"""Scheduler-only options on top of the shared `venn.settings.Settings`.

These are read from the environment here because `Settings` does not have them yet;
they belong there (same names) once the settings owner adds them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from venn.broker.embedded import free_port
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

    @classmethod
    def from_env(
        cls, settings: Settings | None = None, environ: Mapping[str, str] | None = None
    ) -> SchedulerConfig:
        env = os.environ if environ is None else environ
        return cls(
            settings=settings or Settings.from_env(env),
            policy=env.get("VENN_POLICY", "venn"),
            seed=int(env.get("VENN_SEED", "0")),
            # 0 = any free port: every worker needs its own (Faust's web server always binds).
            web_port=int(env.get("VENN_SCHEDULER_WEB_PORT", "0")) or free_port(),
            task_url_base=env.get("VENN_TASK_URL_BASE", DEFAULT_TASK_URL_BASE).rstrip("/"),
            dedupe_window=int(env.get("VENN_DEDUPE_WINDOW", "100000")),
        )

    def task_url(self, job_id: str, round_index: int) -> str:
        return f"{self.task_url_base}/jobs/{job_id}/rounds/{round_index}/task"
