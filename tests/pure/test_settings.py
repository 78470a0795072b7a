"""Settings: env parsing, defaults and the documented field list."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from venn.settings import STACK_FILE, Settings, describe, markdown_table


def test_defaults() -> None:
    s = Settings.from_env({})
    assert s.broker == "127.0.0.1:9092"
    assert s.run_dir == "./run"
    assert s.database_url == ""  # the local stack's embedded Postgres
    assert s.broker_kind == "auto"
    assert (s.topic_partitions, s.gateway_port, s.max_event_bytes) == (4, 8080, 65536)
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
    assert [d.name for d in docs] == [f.name for f in dataclasses.fields(Settings)]
    assert all(d.env.startswith("VENN_") and d.doc for d in docs)
    assert len({d.env for d in docs}) == len(docs)
    s = Settings.from_env({"VENN_SPEEDUP": "2.5", "VENN_APP_ID": "x"})
    assert Settings.from_env(s.as_env()) == s
    assert "`VENN_MAX_EVENT_BYTES` | `65536`" in markdown_table()
