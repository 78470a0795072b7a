"""Engine factory and (test/dev) database creation for Postgres and SQLite."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url


def normalize_url(url: str) -> str:
    """Accept plain `postgresql://`/`postgres://` URLs and pin the psycopg 3 driver."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def make_engine(url: str, echo: bool = False) -> Engine:
    """An Engine for `postgresql+psycopg://...` or `sqlite:///path` (parent dir created)."""
    url = normalize_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, echo=echo, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, echo=echo, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_conn: object, _record: object) -> None:
    # WAL lets readers (progress display, tests) run while the recorder writes.
    cursor = dbapi_conn.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def create_database(admin_url: str, name: str) -> str:
    """CREATE DATABASE `name` on the server of `admin_url`; returns the new database's URL."""
    if not name.replace("_", "").isalnum():
        raise ValueError(f"unsafe database name {name!r}")
    admin = create_engine(normalize_url(admin_url), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    return (
        make_url(normalize_url(admin_url)).set(database=name).render_as_string(hide_password=False)
    )


def drop_database(url: str) -> None:
    """DROP DATABASE named in `url` (connecting to the `postgres` maintenance database)."""
    parsed = make_url(normalize_url(url))
    name = parsed.database
    if not name or not name.replace("_", "").isalnum():
        raise ValueError(f"unsafe database name {name!r}")
    admin = create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
