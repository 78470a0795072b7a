"""Settings: env parsing, defaults and the documented field list."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from venn.broker import security
from venn.settings import (
    CONFIGURATION_PAGE,
    STACK_FILE,
    Settings,
    configuration_markdown,
    describe,
    markdown_table,
)

ROOT = Path(__file__).resolve().parents[2]


def test_defaults() -> None:
    s = Settings.from_env({})
    assert s.broker == "127.0.0.1:9092"
    assert s.run_dir == "./run"
    assert s.database_url == ""  # the local stack's embedded Postgres
    assert s.broker_kind == "auto"
    assert (s.topic_partitions, s.gateway.port, s.max_event_bytes) == (4, 8080, 65536)
    assert (s.app_id, s.speedup) == ("venn-scheduler", 1.0)
    assert Settings() == s


def test_env_overrides_and_types() -> None:
    s = Settings.from_env(
        {
            "VENN_BROKER": "10.0.0.1:9093",
            "VENN_RUN_DIR": "/tmp/venn-x",
            "VENN_TOPIC_PARTITIONS": "8",
            "VENN_SPEEDUP": "60",
            "VENN_DATABASE_URL": "postgresql+psycopg://postgres@127.0.0.1/venn",
        }
    )
    assert s.broker == "10.0.0.1:9093"
    assert s.topic_partitions == 8 and isinstance(s.topic_partitions, int)
    assert s.speedup == 60.0 and isinstance(s.speedup, float)
    assert s.database_url == "postgresql+psycopg://postgres@127.0.0.1/venn"


def test_a_running_stack_supplies_what_env_leaves_unset(tmp_path: Path) -> None:
    (tmp_path / STACK_FILE).write_text(
        json.dumps(
            {
                "broker": "127.0.0.1:9500",
                "broker_kind": "kafka",
                "database_url": "postgresql+psycopg://postgres@127.0.0.1:5999/venn",
                "policy": "venn",
            }
        )
    )
    found = Settings.from_env({"VENN_RUN_DIR": str(tmp_path)})
    assert (found.broker, found.broker_kind) == ("127.0.0.1:9500", "kafka")
    assert found.database_url.endswith(":5999/venn")
    explicit = Settings.from_env({"VENN_RUN_DIR": str(tmp_path), "VENN_BROKER": "h:1"})
    assert explicit.broker == "h:1" and explicit.broker_kind == "kafka"
    (tmp_path / STACK_FILE).write_text("not json")
    assert Settings.from_env({"VENN_RUN_DIR": str(tmp_path)}).broker == "127.0.0.1:9092"


def test_bad_value_names_the_variable() -> None:
    with pytest.raises(ValueError, match="VENN_GATEWAY_PORT='http'"):
        Settings.from_env({"VENN_GATEWAY_PORT": "http"})


def test_every_field_is_documented_and_round_trips_through_env() -> None:
    docs = describe()
    top = [f.name for f in dataclasses.fields(Settings) if "section" not in f.metadata]
    assert [d.name for d in docs if not d.section] == top
    sections = [f.name for f in dataclasses.fields(Settings) if "section" in f.metadata]
    assert {"gateway", "scheduler", "loadtest"} <= set(sections)
    for name in sections:
        fields = dataclasses.fields(getattr(Settings(), name))
        assert [d.name for d in docs if d.section == name] == [f.name for f in fields]
    assert all(d.env.startswith("VENN_") and d.doc for d in docs)
    assert len({d.env for d in docs}) == len(docs)
    s = Settings.from_env(
        {
            "VENN_SPEEDUP": "2.5",
            "VENN_APP_ID": "x",
            "VENN_GATEWAY_WAIT_S": "0.5",
            "VENN_GATEWAY_FAST_NO": "0",
            "VENN_SCHEDULER_SESSION_TIMEOUT_MS": "2500",
            "VENN_LOADTEST_KAFKA_ELIGIBLE": "1",
        },
        running=False,
    )
    assert (s.gateway.wait_s, s.gateway.fast_no, s.scheduler_session_timeout) == (0.5, False, 2500)
    assert s.loadtest.kafka_eligible is True
    assert Settings.from_env(s.as_env(), running=False) == s
    assert "`VENN_MAX_EVENT_BYTES` | `65536`" in markdown_table()


def test_a_section_is_read_from_its_variables_and_checked() -> None:
    s = Settings.from_env({"VENN_GATEWAY_PORT": "9000", "VENN_POLICY": "fifo"}, running=False)
    assert s.gateway.port == 9000 and s.gateway.wait_s == 2.0  # the rest: defaults
    assert s.scheduler.policy == "fifo" and s.scheduler_session_timeout == 3000  # Kafka's
    assert s.with_gateway(port=1).gateway.port == 1 and s.with_gateway(port=1).broker == s.broker
    assert s.scheduler.task_url("j", 3) == "http://coordinator.local/jobs/j/rounds/3/task"
    with pytest.raises(ValueError, match="VENN_GATEWAY_WAIT_S must be > 0"):
        Settings.from_env({"VENN_GATEWAY_WAIT_S": "0"}, running=False)
    with pytest.raises(ValueError, match="VENN_GATEWAY_FAST_NO='maybe'"):
        Settings.from_env({"VENN_GATEWAY_FAST_NO": "maybe"}, running=False)


def test_kafka_passwords_name_every_missing_variable() -> None:
    given = Settings.from_env(
        {"VENN_KAFKA_PASSWORD_SCHEDULER": "s", "VENN_KAFKA_PASSWORD_GATEWAY": "g"}, running=False
    )
    assert given.kafka_passwords.of(["scheduler", "gateway"]) == {"scheduler": "s", "gateway": "g"}
    with pytest.raises(ValueError) as missing:
        given.kafka_passwords.of(security.SERVICES)
    named = {security.password_variable(p) for p in security.SERVICES} - {
        "VENN_KAFKA_PASSWORD_SCHEDULER",
        "VENN_KAFKA_PASSWORD_GATEWAY",
    }
    assert all(v in str(missing.value) for v in named)
    envs = {d.env for d in describe() if d.section == "kafka_passwords"}
    assert envs == {security.password_variable(p) for p in security.PRINCIPALS}


def test_secrets_are_marked() -> None:
    secret = {d.env for d in describe() if d.secret}
    assert {"VENN_AUTH_SECRET", "VENN_KAFKA_PASSWORD", "VENN_JOB_TOKEN", "VENN_API_TOKEN"} <= secret
    assert "VENN_BROKER" not in secret


def test_the_configuration_page_is_generated_from_the_settings() -> None:
    """docs/configuration.md is what `venn config --markdown` prints: regenerate it with
    `venn config --markdown > docs/configuration.md` after changing a setting."""
    page = ROOT / CONFIGURATION_PAGE
    assert page.read_text() == configuration_markdown()
    for d in describe():
        assert f"`{d.env}`" in page.read_text()


def test_venn_config_prints_the_values_in_use_with_secrets_masked(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from venn.cli import app

    env = {
        "VENN_RUN_DIR": str(tmp_path),
        "VENN_GATEWAY_PORT": "9123",
        "VENN_AUTH_SECRET": "a-secret-that-must-not-be-printed-0123456789",
    }
    shown = CliRunner().invoke(app, ["config", "--json"], env=env)
    assert shown.exit_code == 0, shown.output
    values = json.loads(shown.output)
    assert values["VENN_GATEWAY_PORT"] == "9123" and values["VENN_AUTH_SECRET"] == "(set)"
    assert values["VENN_GATEWAY_FAST_NO"] == "1" and values["VENN_API_TOKEN"] == ""
    assert set(values) == {d.env for d in describe()}
    table = CliRunner().invoke(app, ["config"], env={**env, "COLUMNS": "200"})
    assert "9123" in table.output and "a-secret" not in table.output + shown.output
    page = CliRunner().invoke(app, ["config", "--markdown"])
    assert page.output == configuration_markdown()


def test_a_negative_gather_time_is_refused() -> None:
    with pytest.raises(ValueError, match="VENN_SCHEDULER_GATHER_MS must be >= 0"):
        Settings.from_env({"VENN_SCHEDULER_GATHER_MS": "-1"}, running=False)


def test_a_quota_lump_under_one_is_refused() -> None:
    with pytest.raises(ValueError, match="VENN_GATEWAY_QUOTA_LUMP must be >= 1"):
        Settings.from_env({"VENN_GATEWAY_QUOTA_LUMP": "0"}, running=False)


def test_deciding_fewer_than_one_batch_together_is_refused() -> None:
    with pytest.raises(ValueError, match="VENN_SCHEDULER_DECIDE_TOGETHER must be >= 1"):
        Settings.from_env({"VENN_SCHEDULER_DECIDE_TOGETHER": "0"}, running=False)
