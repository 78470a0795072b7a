"""The embedded PostgreSQL of `venn up` against local users (issue 26, item 5): every
connection needs the password (no trust), the server process has dropped root's group,
and the run dir around its data stays unlistable by others."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from devtools.postgres import EmbeddedPostgres
from devtools.process import private_dir
from devtools.stack.local import POSTGRES_DIR, prepare_run_dir


def _connects(url: str) -> bool:
    engine = create_engine(url, connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        return True
    except OperationalError:
        return False
    finally:
        engine.dispose()


def test_the_embedded_database_wants_its_password_and_drops_root(tmp_path: Path) -> None:
    run = private_dir(tmp_path / "run")
    server = EmbeddedPostgres(run / "postgres", password="s3cret-pw").start()
    try:
        assert _connects(server.admin_url)
        assert ":s3cret-pw@" in server.admin_url
        no_password = server.admin_url.replace(":s3cret-pw@", "@")
        wrong = server.admin_url.replace(":s3cret-pw@", ":guess@")
        assert not _connects(no_password)
        assert not _connects(wrong)
        hba = (run / "postgres" / "pg_hba.conf").read_text()
        rules = [line for line in hba.splitlines() if line.strip() and not line.startswith("#")]
        assert rules and not any(line.split()[-1] == "trust" for line in rules), rules
        # Others may pass through the run dir to reach the data (the server's user), never
        # list or read it.
        assert not stat.S_IMODE(run.stat().st_mode) & (stat.S_IROTH | stat.S_IWOTH)
        if os.geteuid() == 0:
            pid = server.pid()
            assert pid is not None
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            fields = {line.split(":")[0]: line.split(":")[1].split() for line in status}
            assert "0" not in fields["Uid"] and "0" not in fields["Gid"], fields
            assert "0" not in fields["Groups"], fields["Groups"]
    finally:
        server.stop()


def test_a_trusting_data_directory_gets_the_password(tmp_path: Path) -> None:
    """A run dir made by an earlier version (initdb --auth=trust) is closed at its next
    start."""
    data = private_dir(tmp_path / "run") / "postgres"
    first = EmbeddedPostgres(data, password="first").start()
    first.stop()
    hba = data / "pg_hba.conf"
    owner = hba.stat()
    hba.write_text(hba.read_text().replace("scram-sha-256", "trust"))
    os.chown(hba, owner.st_uid, owner.st_gid)
    again = EmbeddedPostgres(data, password="first").start()
    try:
        assert _connects(again.admin_url)
        assert not _connects(again.admin_url.replace(":first@", "@"))
    finally:
        again.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as its own user only as root")
def test_venn_up_on_a_running_stack_keeps_the_database_running(tmp_path: Path) -> None:
    """Issue 34, item 1: `venn up` on a running stack made the run dir 0700 again and gave
    back the passage its server's user needs only when it started the server itself; at its
    next checkpoint PostgreSQL panicked (`could not open file .../global/pg_control:
    Permission denied`) and shut down. The run dir is prepared as `up` does, a checkpoint
    forced, and the server still answers."""
    run = prepare_run_dir(private_dir(tmp_path / "run"))
    server = EmbeddedPostgres(run / POSTGRES_DIR, password="pw-of-the-run").start()
    try:
        prepare_run_dir(run)  # a second `venn up`
        EmbeddedPostgres(run / POSTGRES_DIR, password="pw-of-the-run").start()
        mode = stat.S_IMODE(run.stat().st_mode)
        assert mode == 0o701, oct(mode)  # passage only: not listable, not readable
        engine = create_engine(server.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(text("CHECKPOINT"))
        finally:
            engine.dispose()
        assert server.pid() is not None
        assert _connects(server.admin_url)
    finally:
        server.stop()
