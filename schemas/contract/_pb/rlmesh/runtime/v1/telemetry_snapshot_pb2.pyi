# mypy: ignore-errors
from rlmesh_stream.schemas.contract._pb.rlmesh.runtime.v1 import common_pb2 as _common_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TelemetrySnapshotEvent(_message.Message):
    __slots__ = ("session_id", "route", "snapshot")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    route: _common_pb2.RuntimeEnvContext
    snapshot: _common_pb2.Snapshot
    def __init__(self, session_id: _Optional[str] = ..., route: _Optional[_Union[_common_pb2.RuntimeEnvContext, _Mapping]] = ..., snapshot: _Optional[_Union[_common_pb2.Snapshot, _Mapping]] = ...) -> None: ...
