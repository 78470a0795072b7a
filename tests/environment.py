"""The environment a test gives the processes it starts."""

from __future__ import annotations

import os
from pathlib import Path


def clean_env(run_dir: Path | str, **extra: str) -> dict[str, str]:
    """This process's environment without any VENN_ setting, with ``run_dir`` as the run
    dir (no stack in it unless the test starts one) and the VENN_ settings in ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENN_")}
    return {**env, "VENN_RUN_DIR": str(run_dir), **extra}
