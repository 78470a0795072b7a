"""Run the Alembic migrations (migrations/, alembic.ini at the repo root) from Python."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from venn.audit.db import normalize_url

ROOT = Path(__file__).resolve().parents[2]


def alembic_config(url: str) -> Config:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    # env.py prefers this over VENN_DATABASE_URL.
    cfg.attributes["url"] = normalize_url(url)
    return cfg


def upgrade_database(url: str, revision: str = "head") -> None:
    """`alembic upgrade head` on `url`."""
    command.upgrade(alembic_config(url), revision)


def downgrade_database(url: str, revision: str = "base") -> None:
    """`alembic downgrade base` on `url` (tests, dev resets)."""
    command.downgrade(alembic_config(url), revision)
