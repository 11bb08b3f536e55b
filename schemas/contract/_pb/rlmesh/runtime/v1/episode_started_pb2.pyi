# mypy: ignore-errors
from rlmesh_stream.schemas.contract._pb.rlmesh.runtime.v1 import common_pb2 as _common_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EpisodeStartedEvent(_message.Message):
    __slots__ = ("session_id", "route", "episode_id", "episode_record_id", "episode_index", "env_index", "started_from_auto_reset", "seed", "trial_index")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_INDEX_FIELD_NUMBER: _ClassVar[int]
    ENV_INDEX_FIELD_NUMBER: _ClassVar[int]
    STARTED_FROM_AUTO_RESET_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    TRIAL_INDEX_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    route: _common_pb2.RuntimeEnvContext
    episode_id: str
    episode_record_id: str
    episode_index: int
    env_index: int
    started_from_auto_reset: bool
    seed: int
    trial_index: int
    def __init__(self, session_id: _Optional[str] = ..., route: _Optional[_Union[_common_pb2.RuntimeEnvContext, _Mapping]] = ..., episode_id: _Optional[str] = ..., episode_record_id: _Optional[str] = ..., episode_index: _Optional[int] = ..., env_index: _Optional[int] = ..., started_from_auto_reset: _Optional[bool] = ..., seed: _Optional[int] = ..., trial_index: _Optional[int] = ...) -> None: ...
