"""Values the contract cannot carry are refused with the event, field and value named.

Both formats enforce the same contract, so every case runs through both encoders.
"""

from __future__ import annotations

import dataclasses

import pytest

from rlmesh_stream.schemas.codec.serde import EventEncoder
from rlmesh_stream.schemas.contract.errors import ContractError
from rlmesh_stream.schemas.contract.events import RuntimeEnvContext
from rlmesh_stream.schemas.contract.topics import EventType
from tests.contract_samples.examples import example

FORMATS = ["avro", "protobuf"]


def _bad(event_type: EventType, **changes):
    return dataclasses.replace(example(event_type), **changes)


def _refusal(fmt: str, event) -> ContractError:
    with pytest.raises(ContractError) as info:
        EventEncoder(fmt).encode(event)
    return info.value


@pytest.mark.parametrize("fmt", FORMATS)
def test_lane_above_u32_is_refused_naming_route_lane(fmt):
    route = RuntimeEnvContext(env_id="e", env_component_id="c", model_component_id="m",
                              lane=2**32)
    err = _refusal(fmt, _bad(EventType.LOG, route=route))
    assert (err.event, err.field, err.value) == ("LogEvent", "route.lane", 2**32)
    assert "u32" in str(err) and "LogEvent.route.lane = 4294967296" in str(err)


@pytest.mark.parametrize("fmt", FORMATS)
def test_negative_lane_is_refused(fmt):
    route = RuntimeEnvContext(env_id="e", env_component_id="c", model_component_id="m", lane=-1)
    assert _refusal(fmt, _bad(EventType.LOG, route=route)).field == "route.lane"


@pytest.mark.parametrize("fmt", FORMATS)
def test_env_index_outside_i32_is_refused(fmt):
    err = _refusal(fmt, _bad(EventType.STEP_COMPLETED, env_index=2**31))
    assert (err.event, err.field, err.value) == ("StepCompletedEvent", "env_index", 2**31)


@pytest.mark.parametrize("fmt", FORMATS)
def test_trial_index_above_i64_max_is_refused_rather_than_wrapped(fmt):
    err = _refusal(fmt, _bad(EventType.EPISODE_STARTED, trial_index=2**63))
    assert (err.field, err.value) == ("trial_index", 2**63)
    assert "2^63-1" in err.reason


@pytest.mark.parametrize("fmt", FORMATS)
def test_negative_trial_index_is_refused(fmt):
    assert _refusal(fmt, _bad(EventType.EPISODE_COMPLETED, trial_index=-1)).field == "trial_index"


@pytest.mark.parametrize("fmt", FORMATS)
def test_telemetry_count_outside_u64_is_refused(fmt):
    event = example(EventType.TELEMETRY_SNAPSHOT)
    event.snapshot.rows[0].count = -5
    err = _refusal(fmt, event)
    assert (err.field, err.value) == ("snapshot.rows[0].count", -5)


@pytest.mark.parametrize("fmt", FORMATS)
def test_i64_overflow_is_refused(fmt):
    err = _refusal(fmt, _bad(EventType.SESSION_ENDED, total_steps=2**63))
    assert err.field == "total_steps"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("field", ["terminated", "truncated", "autoreset_roll"])
def test_lane_vector_shorter_than_rewards_is_refused(fmt, field):
    err = _refusal(fmt, _bad(EventType.STEP_COMPLETED, **{field: [False]}))
    assert (err.field, err.value) == (field, [False])
    assert "rewards" in err.reason


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("event_type", [EventType.ACTION_RECEIVED, EventType.OBSERVATION_EMITTED])
def test_episode_record_ids_misaligned_with_episode_ids_is_refused(fmt, event_type):
    err = _refusal(fmt, _bad(event_type, episode_record_ids=["ep-000001"]))
    assert err.field == "episode_record_ids"


@pytest.mark.parametrize("fmt", FORMATS)
def test_lone_surrogate_in_a_string_is_refused(fmt):
    err = _refusal(fmt, _bad(EventType.LOG, message="bad \udcff text"))
    assert (err.field, err.value) == ("message", "bad \udcff text")
    assert "surrogate" in err.reason


@pytest.mark.parametrize("fmt", FORMATS)
def test_lone_surrogate_in_a_metamap_key_is_refused(fmt):
    err = _refusal(fmt, _bad(EventType.STEP_COMPLETED, infos={"k\ud800": 1}))
    assert err.field.startswith("infos[")


@pytest.mark.parametrize("fmt", FORMATS)
def test_unsupported_metamap_value_type_is_refused_naming_the_entry(fmt):
    err = _refusal(fmt, _bad(EventType.STEP_COMPLETED, infos={"ok": 1, "when": {"t": object}}))
    assert err.field == "infos['when']['t']"
    assert "unsupported MetaMap value type" in err.reason


@pytest.mark.parametrize("fmt", FORMATS)
def test_none_metamap_value_is_refused(fmt):
    assert _refusal(fmt, _bad(EventType.STEP_COMPLETED, infos={"x": None})).field == "infos['x']"


@pytest.mark.parametrize("fmt", FORMATS)
def test_metamap_integer_outside_i64_is_refused(fmt):
    err = _refusal(fmt, _bad(EventType.EPISODE_COMPLETED, final_info={"big": 2**64}))
    assert (err.field, err.value) == ("final_info['big']", 2**64)


@pytest.mark.parametrize("fmt", FORMATS)
def test_non_bool_in_a_lane_flag_vector_is_refused(fmt):
    err = _refusal(fmt, _bad(EventType.STEP_COMPLETED, terminated=[False, 2]))
    assert err.field == "terminated[1]"


@pytest.mark.parametrize("fmt", FORMATS)
def test_wrong_enum_type_is_refused(fmt):
    assert _refusal(fmt, _bad(EventType.LOG, level="INFO")).field == "level"


@pytest.mark.parametrize("fmt", FORMATS)
def test_missing_required_string_is_refused(fmt):
    assert _refusal(fmt, _bad(EventType.SESSION_FAILED, reason=None)).field == "reason"


def test_contract_error_is_a_value_error():
    assert issubclass(ContractError, ValueError)


def test_non_event_is_refused():
    with pytest.raises(ContractError, match="not a runtime event"):
        EventEncoder().encode(object())  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_string_holding_nul_is_refused_naming_the_field(fmt):
    # no event string holds U+0000: PostgreSQL text cannot store it, so consumers would stall
    err = _refusal(fmt, _bad(EventType.LOG, session_id="s\x00"))
    assert (err.event, err.field, "NUL" in err.reason) == ("LogEvent", "session_id", True)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_metamap_key_holding_nul_is_refused_naming_it(fmt):
    err = _refusal(fmt, _bad(EventType.EPISODE_COMPLETED, final_info={"a\x00": 1}))
    assert err.field.startswith("final_info") and "NUL" in err.reason
