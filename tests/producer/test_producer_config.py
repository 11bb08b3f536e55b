"""ProducerSettings: safe defaults, the environment, and refusing nonsense early."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlmesh_stream.producer.config import ProducerSettings
from rlmesh_stream.schemas.contract.topics import EventType


def test_the_defaults_are_idempotent_acks_all_zstd_linger_and_javas_partitioner():
    conf = ProducerSettings().kafka_config()

    assert conf["enable.idempotence"] is True and conf["acks"] == "all"
    assert conf["compression.type"] == "zstd" and conf["linger.ms"] > 0
    assert conf["partitioner"] == "murmur2_random"


def test_settings_come_from_rlmesh_stream_variables():
    env = {"RLMESH_STREAM_BOOTSTRAP": "k:1", "RLMESH_STREAM_SPOOL_DIR": "/tmp/s",
           "RLMESH_STREAM_DISABLED_EVENTS": "observation_emitted, action_received",
           "RLMESH_STREAM_LEAVES_MAX_BYTES": "off", "RLMESH_STREAM_MAX_BLOCK_MS": "7.5"}

    settings = ProducerSettings.from_env(env)

    assert settings.stream.bootstrap == "k:1"
    assert settings.spool_dir == Path("/tmp/s") and settings.overflow == "spool"
    assert settings.disabled_events == {EventType.OBSERVATION_EMITTED, EventType.ACTION_RECEIVED}
    assert settings.leaves_max_bytes is None and settings.max_block_ms == 7.5


def test_explicit_arguments_win_over_the_environment():
    settings = ProducerSettings.from_env({"RLMESH_STREAM_FORMAT": "protobuf"}, format="avro")

    assert settings.format == "avro"


def test_the_spool_policy_without_a_directory_is_refused():
    with pytest.raises(ValueError, match="spool_dir"):
        ProducerSettings(overflow="spool")


def test_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="format"):
        ProducerSettings(format="json")  # type: ignore[arg-type]


def test_kafka_overrides_win_over_the_defaults():
    conf = ProducerSettings(kafka_overrides={"linger.ms": 0}).kafka_config()

    assert conf["linger.ms"] == 0


def test_an_explicit_none_switches_the_leaves_cap_off():
    assert ProducerSettings.from_env({}, leaves_max_bytes=None).leaves_max_bytes is None


def test_an_explicit_overflow_wins_over_a_spool_directory():
    settings = ProducerSettings.from_env({"RLMESH_STREAM_SPOOL_DIR": "/tmp/s"}, overflow="drop")

    assert settings.overflow == "drop" and settings.spool_dir == Path("/tmp/s")
