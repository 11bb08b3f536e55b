# mypy: ignore-errors
from rlmesh_stream.schemas.contract._pb.rlmesh.runtime.v1 import common_pb2 as _common_pb2
from rlmesh_stream.schemas.contract._pb.rlmesh.spaces.v1 import spaces_pb2 as _spaces_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ActionReceivedEvent(_message.Message):
    __slots__ = ("session_id", "route", "episode_id", "episode_record_id", "episode_ids", "episode_record_ids", "step", "env_index", "action_space", "action", "raw_action")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_IDS_FIELD_NUMBER: _ClassVar[int]
    EPISODE_RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ENV_INDEX_FIELD_NUMBER: _ClassVar[int]
    ACTION_SPACE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    RAW_ACTION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    route: _common_pb2.RuntimeEnvContext
    episode_id: str
    episode_record_id: str
    episode_ids: _containers.RepeatedScalarFieldContainer[str]
    episode_record_ids: _containers.RepeatedScalarFieldContainer[str]
    step: int
    env_index: int
    action_space: _spaces_pb2.SpaceSpec
    action: _common_pb2.Leaves
    raw_action: _common_pb2.Leaves
    def __init__(self, session_id: _Optional[str] = ..., route: _Optional[_Union[_common_pb2.RuntimeEnvContext, _Mapping]] = ..., episode_id: _Optional[str] = ..., episode_record_id: _Optional[str] = ..., episode_ids: _Optional[_Iterable[str]] = ..., episode_record_ids: _Optional[_Iterable[str]] = ..., step: _Optional[int] = ..., env_index: _Optional[int] = ..., action_space: _Optional[_Union[_spaces_pb2.SpaceSpec, _Mapping]] = ..., action: _Optional[_Union[_common_pb2.Leaves, _Mapping]] = ..., raw_action: _Optional[_Union[_common_pb2.Leaves, _Mapping]] = ...) -> None: ...
