"""Hypothesis strategies for every runtime event, valid by the contract (importable).

`events(event_type)` draws events the encoders must carry losslessly: Rust
integer ranges at their edges, NaN and infinities, empty and lane-aligned
vectors, deep MetaMaps, every SpaceSpec kind, non-ASCII text. `exact(value)`
turns an event into a comparable form where floats are their IEEE bit
patterns, so NaN == NaN and -0.0 != 0.0 as the contract demands.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from typing import Any

from google.protobuf.message import Message
from hypothesis import strategies as st

from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract import telemetry as tm
from rlmesh_stream.schemas.contract.events import SpaceSpec
from rlmesh_stream.schemas.contract.topics import EventType

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**63 - 1)  # the contract's u64: Avro long holds at most 2^63-1
F64 = st.floats(allow_nan=True, allow_infinity=True, width=64)

# Any Unicode but lone surrogates (category Cs), which UTF-8 cannot carry, and U+0000,
# which no event string holds (docs/contract.md).
TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
               max_size=40)
IDS = st.one_of(st.uuids().map(str), TEXT)
LEAF = st.binary(max_size=256)


def _meta_values(max_leaves: int = 20) -> st.SearchStrategy[Any]:
    scalars = st.one_of(I64, F64, TEXT, st.booleans(), st.binary(max_size=32))
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(TEXT, children, max_size=4),
        ),
        max_leaves=max_leaves,
    )


META_MAP = st.dictionaries(TEXT, _meta_values(), max_size=6)


def deep_meta_map(levels: int, container: str = "dict") -> dict[str, Any]:
    """A MetaMap with `levels` dicts (or lists) nested below its top level."""
    value: Any = 1.5
    for i in range(levels):
        value = {f"level{i}": value} if container == "dict" else [value, i]
    return {"root": value}


DATA_TYPES = st.integers(0, 12)


@st.composite
def _box(draw: st.DrawFn, spec: SpaceSpec) -> None:
    which = draw(st.sampled_from(["unbounded", "uniform", "elementwise", "unset"]))
    if which == "unbounded":
        spec.box.unbounded = draw(st.booleans())
    elif which == "uniform":
        spec.box.uniform.low = draw(st.binary(max_size=8))
        spec.box.uniform.high = draw(st.binary(max_size=8))
    elif which == "elementwise":
        spec.box.elementwise.low = draw(st.binary(max_size=64))
        spec.box.elementwise.high = draw(st.binary(max_size=64))
    else:
        spec.box.SetInParent()


SPACE_KINDS = ("none", "box", "discrete", "multi_binary", "multi_discrete", "text", "dict",
               "tuple")


@st.composite
def space_specs(draw: st.DrawFn, depth: int = 0, kind: str | None = None) -> SpaceSpec:
    """A SpaceSpec of any kind (Dict and Tuple nest up to two levels)."""
    spec = SpaceSpec(shape=draw(st.lists(I64, max_size=4)))
    spec.dtype = draw(DATA_TYPES)  # type: ignore[assignment]  # the wire value, 0..12
    kinds = SPACE_KINDS if depth < 2 else SPACE_KINDS[:6]
    kind = kind or draw(st.sampled_from(kinds))
    if kind == "box":
        draw(_box(spec))
    elif kind == "discrete":
        spec.discrete.n = draw(I64)
        spec.discrete.start = draw(I64)
    elif kind == "multi_binary":
        spec.multi_binary.SetInParent()
    elif kind == "multi_discrete":
        spec.multi_discrete.nvec.extend(draw(st.lists(I64, max_size=4)))
    elif kind == "text":
        spec.text.min_length = draw(I64)
        spec.text.max_length = draw(I64)
        spec.text.charset = draw(TEXT)
    elif kind == "dict":
        keys = draw(st.lists(TEXT, max_size=3))
        spec.dict.keys.extend(keys)
        spec.dict.spaces.extend(draw(space_specs(depth + 1)) for _ in keys)
        spec.dict.SetInParent()
    elif kind == "tuple":
        spec.tuple.spaces.extend(draw(st.lists(space_specs(depth + 1), max_size=3)))
        spec.tuple.SetInParent()
    return spec


ROUTES = st.builds(
    ev.RuntimeEnvContext, env_id=TEXT, env_component_id=TEXT, model_component_id=TEXT,
    lane=st.none() | U32,
)
LEAVES = st.none() | st.lists(LEAF, max_size=4)


def _common() -> dict[str, Any]:
    return {"session_id": IDS, "route": ROUTES}


@st.composite
def _lanes(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 9))
    return {
        "episode_ids": draw(st.lists(IDS | st.just(""), min_size=n, max_size=n)),
        "episode_record_ids": draw(st.lists(TEXT, min_size=n, max_size=n)),
    }


@st.composite
def _step(draw: st.DrawFn) -> ev.StepCompletedEvent:
    n = draw(st.integers(0, 9))
    flags = st.lists(st.booleans(), min_size=n, max_size=n)
    return ev.StepCompletedEvent(
        session_id=draw(IDS), route=draw(ROUTES), episode_id=draw(IDS),
        episode_record_id=draw(TEXT), step=draw(I64), env_index=draw(I32),
        rewards=draw(st.lists(F64, min_size=n, max_size=n)), infos=draw(st.none() | META_MAP),
        terminated=draw(flags), truncated=draw(flags), autoreset_roll=draw(flags),
        predict_ms=draw(F64), step_ms=draw(F64),
    )


@st.composite
def _action(draw: st.DrawFn) -> ev.ActionReceivedEvent:
    return ev.ActionReceivedEvent(
        session_id=draw(IDS), route=draw(ROUTES), episode_id=draw(IDS),
        episode_record_id=draw(TEXT), **draw(_lanes()), step=draw(I64), env_index=draw(I32),
        action_space=draw(space_specs()), action=draw(LEAVES), raw_action=draw(LEAVES),
    )


@st.composite
def _observation(draw: st.DrawFn) -> ev.ObservationEmittedEvent:
    return ev.ObservationEmittedEvent(
        session_id=draw(IDS), route=draw(ROUTES), episode_id=draw(IDS),
        episode_record_id=draw(TEXT), **draw(_lanes()), step=draw(I64), env_index=draw(I32),
        is_reset=draw(st.booleans()), num_envs=draw(U32), observation_space=draw(space_specs()),
        observation=draw(LEAVES), raw_observation=draw(LEAVES), infos=draw(st.none() | META_MAP),
    )


ROWS = st.builds(
    tm.Row,
    source=st.builds(tm.Source, op=TEXT, component=TEXT),
    metric=st.builds(tm.Metric, name=TEXT, kind=st.sampled_from(tm.Kind)),
    count=U64, avg=F64, p50=F64, p95=F64, p99=F64,
)

_STRATEGIES: dict[EventType, st.SearchStrategy[Any]] = {
    EventType.ENV_CONNECTED: st.builds(ev.EnvConnectedEvent, **_common(), env_id=TEXT),
    EventType.MODEL_CONNECTED: st.builds(ev.ModelConnectedEvent, **_common()),
    EventType.SESSION_STARTED: st.builds(ev.SessionStartedEvent, **_common(), env_id=TEXT),
    EventType.SESSION_ENDED: st.builds(
        ev.SessionEndedEvent, **_common(), reason=TEXT, total_steps=I64, total_episodes=I64),
    EventType.SESSION_FAILED: st.builds(ev.SessionFailedEvent, **_common(), reason=TEXT),
    EventType.LOG: st.builds(
        ev.LogEvent, **_common(), level=st.sampled_from(ev.LogLevel), message=TEXT,
        source=st.none() | TEXT),
    EventType.EPISODE_STARTED: st.builds(
        ev.EpisodeStartedEvent, **_common(), episode_id=IDS, episode_record_id=TEXT,
        episode_index=I64, env_index=I32, started_from_auto_reset=st.booleans(),
        seed=st.none() | I64, trial_index=st.none() | U64),
    EventType.EPISODE_COMPLETED: st.builds(
        ev.EpisodeCompletedEvent, **_common(), episode_id=IDS, episode_record_id=TEXT,
        episode_index=I64, env_index=I32, step_count=I64, cumulative_reward=F64,
        terminated=st.booleans(), truncated=st.booleans(), duration_ms=I64,
        final_info=st.none() | META_MAP, success=st.none() | st.booleans(),
        seed=st.none() | I64, trial_index=st.none() | U64, predict_ms=st.none() | F64,
        step_ms=st.none() | F64),
    EventType.ACTION_RECEIVED: _action(),
    EventType.STEP_COMPLETED: _step(),
    EventType.OBSERVATION_EMITTED: _observation(),
    EventType.RELAY_ADVISORY: st.builds(
        ev.RelayAdvisoryEvent, **_common(),
        leg=st.sampled_from([ev.Leg.OBSERVATION, ev.Leg.ACTION]),
        advisory=st.builds(ev.Advisory, severity=st.sampled_from(ev.AdvisorySeverity),
                           message=TEXT)),
    EventType.TELEMETRY_SNAPSHOT: st.builds(
        ev.TelemetrySnapshotEvent, **_common(),
        snapshot=st.builds(tm.Snapshot, horizon=st.sampled_from(tm.Horizon),
                           rows=st.lists(ROWS, max_size=4))),
}


def events(event_type: EventType) -> st.SearchStrategy[Any]:
    """Valid events of one type."""
    return _STRATEGIES[event_type]


def any_event() -> st.SearchStrategy[Any]:
    return st.one_of(*_STRATEGIES.values())


def exact(value: Any) -> Any:
    """A comparable form: floats as bit patterns, protobuf messages as their bytes."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return ("f64", struct.pack("<d", value))
    if isinstance(value, enum.Enum):
        return (type(value).__name__, value.name)
    if isinstance(value, Message):
        return (type(value).__name__, value.SerializeToString(deterministic=True))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__,
                tuple((f.name, exact(getattr(value, f.name))) for f in dataclasses.fields(value)))
    if isinstance(value, dict):
        # key order is not part of the contract (a protobuf map does not keep it)
        return ("dict", tuple((k, exact(v)) for k, v in sorted(value.items(), key=_key)))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(exact(v) for v in value))
    return (type(value).__name__, value)


def _key(item: tuple[str, Any]) -> str:
    return item[0]
