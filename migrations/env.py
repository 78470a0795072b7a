"""Alembic environment for the Venn audit store (online and offline modes)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from venn.audit.db import make_engine, normalize_url
from venn.audit.models import Base
from venn.settings import Settings

config = context.config
target_metadata = Base.metadata


def database_url() -> str:
    passed = config.attributes.get("url") or context.get_x_argument(as_dictionary=True).get("url")
    if passed:
        return normalize_url(str(passed))
    configured = config.get_main_option("sqlalchemy.url")
    if configured:
        return normalize_url(configured)
    return Settings.from_env().database_url


def run_with(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_offline() -> None:
    context.configure(
        url=database_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_with(connection)
        return
    engine = make_engine(database_url())
    try:
        with engine.connect() as conn:
            run_with(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
