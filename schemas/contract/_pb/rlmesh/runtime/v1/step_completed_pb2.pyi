# mypy: ignore-errors
from rlmesh_stream.schemas.contract._pb.rlmesh.runtime.v1 import common_pb2 as _common_pb2
from rlmesh_stream.schemas.contract._pb.rlmesh.spaces.v1 import spaces_pb2 as _spaces_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StepCompletedEvent(_message.Message):
    __slots__ = ("session_id", "route", "episode_id", "episode_record_id", "step", "env_index", "rewards", "infos", "terminated", "truncated", "autoreset_roll", "predict_ms", "step_ms")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ENV_INDEX_FIELD_NUMBER: _ClassVar[int]
    REWARDS_FIELD_NUMBER: _ClassVar[int]
    INFOS_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    AUTORESET_ROLL_FIELD_NUMBER: _ClassVar[int]
    PREDICT_MS_FIELD_NUMBER: _ClassVar[int]
    STEP_MS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    route: _common_pb2.RuntimeEnvContext
    episode_id: str
    episode_record_id: str
    step: int
    env_index: int
    rewards: _containers.RepeatedScalarFieldContainer[float]
    infos: _spaces_pb2.MetaMap
    terminated: _containers.RepeatedScalarFieldContainer[bool]
    truncated: _containers.RepeatedScalarFieldContainer[bool]
    autoreset_roll: _containers.RepeatedScalarFieldContainer[bool]
    predict_ms: float
    step_ms: float
    def __init__(self, session_id: _Optional[str] = ..., route: _Optional[_Union[_common_pb2.RuntimeEnvContext, _Mapping]] = ..., episode_id: _Optional[str] = ..., episode_record_id: _Optional[str] = ..., step: _Optional[int] = ..., env_index: _Optional[int] = ..., rewards: _Optional[_Iterable[float]] = ..., infos: _Optional[_Union[_spaces_pb2.MetaMap, _Mapping]] = ..., terminated: _Optional[_Iterable[bool]] = ..., truncated: _Optional[_Iterable[bool]] = ..., autoreset_roll: _Optional[_Iterable[bool]] = ..., predict_ms: _Optional[float] = ..., step_ms: _Optional[float] = ...) -> None: ...
