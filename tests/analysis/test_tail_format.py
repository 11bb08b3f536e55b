"""`rlmesh-stream tail` line formatting: one readable line per event, whatever its type."""

from __future__ import annotations

import pytest

from rlmesh_stream.consumers.analysis.tail import TailError, describe, format_line, run_tail
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.events import ObservationEmittedEvent, SpaceSpec
from rlmesh_stream.schemas.contract.topics import EventType
from tests.analysis.analysis_events import ROUTE, completed


def test_a_line_shows_payload_leaves_as_sizes_not_bytes() -> None:
    event = ObservationEmittedEvent(
        session_id="s", route=ROUTE, episode_id="e", episode_record_id="ep-000001",
        episode_ids=["e"], episode_record_ids=["ep-000001"], step=3, env_index=0,
        is_reset=False, num_envs=1, observation_space=SpaceSpec(shape=[4]),
        observation=[b"\x00" * 16], raw_observation=[b"\x00" * 16])
    text = describe(event)
    assert "observation=<1 leaves, 16 B>" in text
    assert "\\x00" not in text


def test_a_line_shows_the_episode_outcome_fields() -> None:
    text = describe(completed("s", 2, reward=3.25))
    assert "episode_record_id=ep-000002" in text
    assert "cumulative_reward=3.25" in text
    assert 'final_info={"is_success":true}' in text




def test_a_line_starts_with_time_session_and_route() -> None:
    line = format_line(completed("sess-9", 1), timestamp_ms=1_767_225_600_250)
    assert line.startswith("00:00:00.250 sess-9 [env=CartPole-v1 model=ppo] episode_id=")


def test_a_record_time_past_the_year_9999_shows_as_unknown() -> None:
    line = format_line(completed("sess-9", 1), timestamp_ms=253_402_300_800_000)
    assert line.startswith("- sess-9 [env=CartPole-v1 model=ppo]")


def test_no_kafka_is_one_clear_error() -> None:
    config = StreamConfig(bootstrap="127.0.0.1:1", registry_url="http://127.0.0.1:1",
                          connect_timeout=1.0)
    with pytest.raises(TailError, match=r"^Kafka at 127.0.0.1:1: .*transport failure"):
        run_tail(config, EventType.EPISODE_COMPLETED, print)
