"""`venn report` as a user runs it (a subprocess) on real Postgres and on SQLite: the
figures it writes equal what the audit rows say, and a missing database is one clear line."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests import report_rows as rows
from tests.environment import clean_env
from tests.report_checks import check_report, venn_report, write_rows
from venn.audit import create_database, drop_database, upgrade_database


@pytest.fixture
def audit_pg(pg_admin_url: str) -> Iterator[str]:
    """A migrated Postgres database of this test's own, holding the hand-made rows."""
    url = create_database(pg_admin_url, f"venn_report_{uuid.uuid4().hex[:10]}")
    try:
        upgrade_database(url)
        write_rows(url, rows.job_rows(), rows.round_rows())
        yield url
    finally:
        drop_database(url)


def test_report_on_postgres_matches_the_audit_rows(audit_pg: str, tmp_path: Path) -> None:
    done = venn_report(
        ["--database-url", audit_pg, "--out", "out"], clean_env(tmp_path / "run"), tmp_path
    )
    assert done.returncode == 0, done.stderr
    summary = check_report(tmp_path / "out", audit_pg)
    # And what the hand-made rows were made to give.
    assert summary["failed_by_reason"] == rows.EXPECTED_FAILED_BY_REASON
    assert summary["jct"]["mean"] == rows.EXPECTED_MEAN_JCT
    assert {j["job_id"]: j["tier"] for j in summary["jobs"]} == rows.EXPECTED_TIERS
    password = make_url(audit_pg).password
    assert not password or str(password) not in summary["database"]
    assert "4 jobs (2 finished), 9 rounds (4 failed)" in done.stdout


def test_report_defaults_to_venn_database_url_then_the_running_stack(
    audit_pg: str, tmp_path: Path
) -> None:
    # VENN_DATABASE_URL, into ./report.
    done = venn_report([], clean_env(tmp_path / "run", VENN_DATABASE_URL=audit_pg), tmp_path)
    assert done.returncode == 0, done.stderr
    check_report(tmp_path / "report", audit_pg)
    # The database `venn up` recorded in the run dir.
    stack_dir = tmp_path / "stack"
    stack_dir.mkdir()
    (stack_dir / "stack.json").write_text(json.dumps({"database_url": audit_pg}))
    done = venn_report(["--out", "from-stack", "--json"], clean_env(stack_dir), tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["failed_by_reason"] == rows.EXPECTED_FAILED_BY_REASON
    check_report(tmp_path / "from-stack", audit_pg)


def test_report_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    upgrade_database(url)
    write_rows(url, rows.job_rows(), rows.round_rows())
    done = venn_report(["--database-url", url, "--out", "out"], clean_env(tmp_path), tmp_path)
    assert done.returncode == 0, done.stderr
    summary = check_report(tmp_path / "out", url)
    assert summary["jobs_cancelled"] == 1 and summary["jobs_unfinished"] == 1


def test_an_empty_audit_database_gives_a_report_of_nothing(
    pg_admin_url: str, tmp_path: Path
) -> None:
    url = create_database(pg_admin_url, f"venn_report_{uuid.uuid4().hex[:10]}")
    try:
        upgrade_database(url)
        done = venn_report(["--database-url", url, "--out", "out"], clean_env(tmp_path), tmp_path)
        assert done.returncode == 0, done.stderr
        summary = check_report(tmp_path / "out", url)
        assert (summary["jobs_total"], summary["rounds_total"]) == (0, 0)
    finally:
        drop_database(url)


def assert_one_line_error(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for word in words:
        assert word in lines[0]


def test_no_database_is_one_clear_line(pg_admin_url: str, tmp_path: Path) -> None:
    env = clean_env(tmp_path / "run")  # no VENN_DATABASE_URL, no stack in the run dir
    assert_one_line_error(venn_report([], env, tmp_path), "no audit database", "--database-url")
    missing = tmp_path / "missing.db"
    done = venn_report(["--database-url", f"sqlite:///{missing}"], env, tmp_path)
    assert_one_line_error(done, str(missing))
    assert not missing.exists()  # not created by asking
    gone = f"venn_report_missing_{uuid.uuid4().hex[:8]}"
    absent = make_url(pg_admin_url).set(database=gone).render_as_string(hide_password=False)
    done = venn_report(["--database-url", absent], env, tmp_path)
    assert_one_line_error(done, "cannot read", gone)
    assert not (tmp_path / "report").exists()


def test_a_database_without_audit_tables_is_one_clear_line(
    pg_admin_url: str, tmp_path: Path
) -> None:
    url = create_database(pg_admin_url, f"venn_report_{uuid.uuid4().hex[:10]}")
    try:
        done = venn_report(["--database-url", url], clean_env(tmp_path), tmp_path)
        assert_one_line_error(done, "has no audit tables", "job_audit", "round_audit")
        assert not (tmp_path / "report").exists()
    finally:
        drop_database(url)
