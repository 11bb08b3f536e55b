"""The rlmesh runtime's hook events as Python types, one to one with the Rust seed.

`shared/seed/rlmesh-runtime-hook-events.rs.txt` is the source: same class
names, same field names, `None` for `Option`. Rust integer widths are kept in
the field comments (and enforced by the encoders); `MetaMap` is a plain dict;
`SpaceSpec` is the protobuf message of the `rlmesh.spaces.v1` package.
Payload leaves (`observation`, `action`) stay lists of bytes so their
boundaries survive.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, Union

from rlmesh_stream.schemas.contract.telemetry import Snapshot

if TYPE_CHECKING:
    from rlmesh_stream.schemas.contract._pb.rlmesh.spaces.v1.spaces_pb2 import SpaceSpec


def __getattr__(name: str) -> Any:
    """`SpaceSpec`, imported when first asked for: its protobuf module costs ~25 ms, and a
    process that reads no spaces (`consume episodes`) never asks (PEP 562)."""
    if name == "SpaceSpec":
        from rlmesh_stream.schemas.contract._pb.rlmesh.spaces.v1.spaces_pb2 import SpaceSpec

        globals()["SpaceSpec"] = SpaceSpec
        return SpaceSpec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

MetaValue: TypeAlias = Union[  # noqa: UP007 - recursive alias needs Union
    int, float, str, bool, bytes, list["MetaValue"], dict[str, "MetaValue"]
]
MetaMap: TypeAlias = dict[str, MetaValue]
"""rlmesh's `MetaMap`: str keys to int, float, str, bool, bytes, list or nested dict."""

# This project's key in a reset observation's `infos`: the Gymnasium `EnvSpec` the episode
# ran in, as `EnvSpec.to_json()` (docs/contract.md); consumers take it out of the env's infos.
ENV_SPEC_INFO = "rlmesh.env_spec"


def episode_record_id(index: int) -> str:
    """An episode's record id from its 1-based `episode_index` (`ep-000001`, ...; the
    runtime assigns them in order of first sight within a session, runtime-events.md §2)."""
    return f"ep-{index:06d}"


def episode_index_of(record_id: str) -> int | None:
    """The `episode_index` a record id spells (`ep-000002` -> 2); None for an id not of the
    runtime's form."""
    prefix, _, digits = record_id.rpartition("-")
    return int(digits) if prefix == "ep" and digits.isdigit() else None


def next_episode_record_id(record_id: str) -> str | None:
    """The record id that follows `record_id` (`ep-000001` -> `ep-000002`); None for an id
    not of the runtime's form. In the runtime's one-lane sessions it names the episode that
    began next: a NEXT_STEP roll's observation is that episode's reset observation."""
    index = episode_index_of(record_id)
    return None if index is None else episode_record_id(index + 1)


class LogLevel(enum.Enum):
    DEBUG = "Debug"
    INFO = "Info"
    WARN = "Warn"
    ERROR = "Error"


class AdvisorySeverity(enum.Enum):
    """`INFO`: a benign note or a lossy step that was asked for;
    `CAUTION`: data the model sees was substituted or fabricated."""

    INFO = "info"
    CAUTION = "caution"


class Leg(enum.Enum):
    """Which direction of the relay a payload was converted on.

    rlmesh's variants are not public; these are the two directions. Decoders
    must keep room for more: a leg this reader does not know (written by a newer
    producer) decodes as `UNKNOWN` (the Avro enum default; protobuf's open enum).
    """

    UNKNOWN = "unknown"  # a direction this reader's schema does not name
    OBSERVATION = "observation"  # env -> model
    ACTION = "action"  # model -> env


@dataclass(slots=True, kw_only=True)
class Advisory:
    """What a relay policy did to a payload (`rlmesh_spaces::Advisory`)."""

    severity: AdvisorySeverity
    message: str


@dataclass(slots=True, kw_only=True)
class RuntimeEnvContext:
    """A route: which env endpoint talks to which model, and on which lane."""

    env_id: str
    env_component_id: str
    model_component_id: str
    lane: int | None = None  # Option<u32>


@dataclass(slots=True, kw_only=True)
class EnvConnectedEvent:
    session_id: str
    route: RuntimeEnvContext
    env_id: str


@dataclass(slots=True, kw_only=True)
class ModelConnectedEvent:
    session_id: str
    route: RuntimeEnvContext


@dataclass(slots=True, kw_only=True)
class SessionStartedEvent:
    session_id: str
    route: RuntimeEnvContext
    env_id: str


@dataclass(slots=True, kw_only=True)
class SessionEndedEvent:
    session_id: str
    route: RuntimeEnvContext
    reason: str
    total_steps: int  # i64
    total_episodes: int  # i64


@dataclass(slots=True, kw_only=True)
class SessionFailedEvent:
    session_id: str
    route: RuntimeEnvContext
    reason: str


@dataclass(slots=True, kw_only=True)
class LogEvent:
    session_id: str
    route: RuntimeEnvContext
    level: LogLevel
    message: str
    source: str | None = None


@dataclass(slots=True, kw_only=True)
class EpisodeStartedEvent:
    session_id: str
    route: RuntimeEnvContext
    episode_id: str
    episode_record_id: str
    episode_index: int  # i64
    env_index: int  # i32
    started_from_auto_reset: bool
    seed: int | None = None  # Option<i64>
    trial_index: int | None = None  # Option<u64>; None only under NEXT_STEP autoreset


@dataclass(slots=True, kw_only=True)
class EpisodeCompletedEvent:
    session_id: str
    route: RuntimeEnvContext
    episode_id: str
    episode_record_id: str
    episode_index: int  # i64
    env_index: int  # i32
    step_count: int  # i64
    cumulative_reward: float
    terminated: bool
    truncated: bool
    duration_ms: int  # i64
    final_info: MetaMap | None = None
    success: bool | None = None
    seed: int | None = None  # Option<i64>
    trial_index: int | None = None  # Option<u64>
    predict_ms: float | None = None
    step_ms: float | None = None


@dataclass(slots=True, kw_only=True)
class ActionReceivedEvent:
    session_id: str
    route: RuntimeEnvContext
    episode_id: str
    episode_record_id: str
    episode_ids: list[str]
    episode_record_ids: list[str]
    step: int  # i64
    env_index: int  # i32
    action_space: SpaceSpec
    action: list[bytes] | None = None
    raw_action: list[bytes] | None = None


@dataclass(slots=True, kw_only=True)
class StepCompletedEvent:
    session_id: str
    route: RuntimeEnvContext
    episode_id: str
    episode_record_id: str
    step: int  # i64
    env_index: int  # i32
    rewards: list[float]
    infos: MetaMap | None = None  # None when any lane rolled
    terminated: list[bool]  # per lane, aligned with rewards
    truncated: list[bool]
    autoreset_roll: list[bool]  # per lane: a NEXT_STEP autoreset roll, not a real step
    predict_ms: float
    step_ms: float


@dataclass(slots=True, kw_only=True)
class ObservationEmittedEvent:
    session_id: str
    route: RuntimeEnvContext
    episode_id: str
    episode_record_id: str
    episode_ids: list[str]
    episode_record_ids: list[str]
    step: int  # i64
    env_index: int  # i32
    is_reset: bool
    num_envs: int  # u32
    observation_space: SpaceSpec
    observation: list[bytes] | None = None
    raw_observation: list[bytes] | None = None
    infos: MetaMap | None = None  # reset infos when is_reset


@dataclass(slots=True, kw_only=True)
class RelayAdvisoryEvent:
    """A relay policy converted a payload; delivered once per distinct advisory."""

    session_id: str
    route: RuntimeEnvContext
    leg: Leg
    advisory: Advisory


@dataclass(slots=True, kw_only=True)
class TelemetrySnapshotEvent:
    session_id: str
    route: RuntimeEnvContext
    snapshot: Snapshot


RuntimeEvent: TypeAlias = Union[  # noqa: UP007
    EnvConnectedEvent, ModelConnectedEvent, SessionStartedEvent, SessionEndedEvent,
    SessionFailedEvent, LogEvent, EpisodeStartedEvent, EpisodeCompletedEvent,
    ActionReceivedEvent, StepCompletedEvent, ObservationEmittedEvent,
    RelayAdvisoryEvent, TelemetrySnapshotEvent,
]

__all__ = [
    "ActionReceivedEvent", "Advisory", "AdvisorySeverity", "EnvConnectedEvent",
    "EpisodeCompletedEvent", "EpisodeStartedEvent", "Leg", "LogEvent", "LogLevel",
    "MetaMap", "MetaValue", "ModelConnectedEvent", "ObservationEmittedEvent",
    "RelayAdvisoryEvent", "RuntimeEnvContext", "RuntimeEvent", "SessionEndedEvent",
    "SessionFailedEvent", "SessionStartedEvent", "SpaceSpec", "StepCompletedEvent",
    "TelemetrySnapshotEvent",
]
