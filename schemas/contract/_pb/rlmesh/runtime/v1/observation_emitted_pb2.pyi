# mypy: ignore-errors
from rlmesh_stream.schemas.contract._pb.rlmesh.runtime.v1 import common_pb2 as _common_pb2
from rlmesh_stream.schemas.contract._pb.rlmesh.spaces.v1 import spaces_pb2 as _spaces_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ObservationEmittedEvent(_message.Message):
    __slots__ = ("session_id", "route", "episode_id", "episode_record_id", "episode_ids", "episode_record_ids", "step", "env_index", "is_reset", "num_envs", "observation_space", "observation", "raw_observation", "infos")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_IDS_FIELD_NUMBER: _ClassVar[int]
    EPISODE_RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ENV_INDEX_FIELD_NUMBER: _ClassVar[int]
    IS_RESET_FIELD_NUMBER: _ClassVar[int]
    NUM_ENVS_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_SPACE_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    RAW_OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    INFOS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    route: _common_pb2.RuntimeEnvContext
    episode_id: str
    episode_record_id: str
    episode_ids: _containers.RepeatedScalarFieldContainer[str]
    episode_record_ids: _containers.RepeatedScalarFieldContainer[str]
    step: int
    env_index: int
    is_reset: bool
    num_envs: int
    observation_space: _spaces_pb2.SpaceSpec
    observation: _common_pb2.Leaves
    raw_observation: _common_pb2.Leaves
    infos: _spaces_pb2.MetaMap
    def __init__(self, session_id: _Optional[str] = ..., route: _Optional[_Union[_common_pb2.RuntimeEnvContext, _Mapping]] = ..., episode_id: _Optional[str] = ..., episode_record_id: _Optional[str] = ..., episode_ids: _Optional[_Iterable[str]] = ..., episode_record_ids: _Optional[_Iterable[str]] = ..., step: _Optional[int] = ..., env_index: _Optional[int] = ..., is_reset: _Optional[bool] = ..., num_envs: _Optional[int] = ..., observation_space: _Optional[_Union[_spaces_pb2.SpaceSpec, _Mapping]] = ..., observation: _Optional[_Union[_common_pb2.Leaves, _Mapping]] = ..., raw_observation: _Optional[_Union[_common_pb2.Leaves, _Mapping]] = ..., infos: _Optional[_Union[_spaces_pb2.MetaMap, _Mapping]] = ...) -> None: ...
