# mypy: ignore-errors
from rlmesh_stream.schemas.contract._pb.rlmesh.runtime.v1 import common_pb2 as _common_pb2
from rlmesh_stream.schemas.contract._pb.rlmesh.spaces.v1 import spaces_pb2 as _spaces_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EpisodeCompletedEvent(_message.Message):
    __slots__ = ("session_id", "route", "episode_id", "episode_record_id", "episode_index", "env_index", "step_count", "cumulative_reward", "terminated", "truncated", "duration_ms", "final_info", "success", "seed", "trial_index", "predict_ms", "step_ms")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_INDEX_FIELD_NUMBER: _ClassVar[int]
    ENV_INDEX_FIELD_NUMBER: _ClassVar[int]
    STEP_COUNT_FIELD_NUMBER: _ClassVar[int]
    CUMULATIVE_REWARD_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    FINAL_INFO_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    TRIAL_INDEX_FIELD_NUMBER: _ClassVar[int]
    PREDICT_MS_FIELD_NUMBER: _ClassVar[int]
    STEP_MS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    route: _common_pb2.RuntimeEnvContext
    episode_id: str
    episode_record_id: str
    episode_index: int
    env_index: int
    step_count: int
    cumulative_reward: float
    terminated: bool
    truncated: bool
    duration_ms: int
    final_info: _spaces_pb2.MetaMap
    success: bool
    seed: int
    trial_index: int
    predict_ms: float
    step_ms: float
    def __init__(self, session_id: _Optional[str] = ..., route: _Optional[_Union[_common_pb2.RuntimeEnvContext, _Mapping]] = ..., episode_id: _Optional[str] = ..., episode_record_id: _Optional[str] = ..., episode_index: _Optional[int] = ..., env_index: _Optional[int] = ..., step_count: _Optional[int] = ..., cumulative_reward: _Optional[float] = ..., terminated: _Optional[bool] = ..., truncated: _Optional[bool] = ..., duration_ms: _Optional[int] = ..., final_info: _Optional[_Union[_spaces_pb2.MetaMap, _Mapping]] = ..., success: _Optional[bool] = ..., seed: _Optional[int] = ..., trial_index: _Optional[int] = ..., predict_ms: _Optional[float] = ..., step_ms: _Optional[float] = ...) -> None: ...
