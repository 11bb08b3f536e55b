# mypy: ignore-errors
from rlmesh_stream.schemas.contract._pb.rlmesh.runtime.v1 import common_pb2 as _common_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SessionEndedEvent(_message.Message):
    __slots__ = ("session_id", "route", "reason", "total_steps", "total_episodes")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_EPISODES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    route: _common_pb2.RuntimeEnvContext
    reason: str
    total_steps: int
    total_episodes: int
    def __init__(self, session_id: _Optional[str] = ..., route: _Optional[_Union[_common_pb2.RuntimeEnvContext, _Mapping]] = ..., reason: _Optional[str] = ..., total_steps: _Optional[int] = ..., total_episodes: _Optional[int] = ...) -> None: ...
