# mypy: ignore-errors
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LogLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOG_LEVEL_UNSPECIFIED: _ClassVar[LogLevel]
    LOG_LEVEL_DEBUG: _ClassVar[LogLevel]
    LOG_LEVEL_INFO: _ClassVar[LogLevel]
    LOG_LEVEL_WARN: _ClassVar[LogLevel]
    LOG_LEVEL_ERROR: _ClassVar[LogLevel]

class Leg(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEG_UNSPECIFIED: _ClassVar[Leg]
    LEG_OBSERVATION: _ClassVar[Leg]
    LEG_ACTION: _ClassVar[Leg]

class AdvisorySeverity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ADVISORY_SEVERITY_UNSPECIFIED: _ClassVar[AdvisorySeverity]
    ADVISORY_SEVERITY_INFO: _ClassVar[AdvisorySeverity]
    ADVISORY_SEVERITY_CAUTION: _ClassVar[AdvisorySeverity]

class Horizon(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HORIZON_UNSPECIFIED: _ClassVar[Horizon]
    HORIZON_WINDOW: _ClassVar[Horizon]
    HORIZON_SESSION: _ClassVar[Horizon]

class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KIND_UNSPECIFIED: _ClassVar[Kind]
    KIND_DURATION: _ClassVar[Kind]
    KIND_BYTES: _ClassVar[Kind]
    KIND_COUNT: _ClassVar[Kind]
LOG_LEVEL_UNSPECIFIED: LogLevel
LOG_LEVEL_DEBUG: LogLevel
LOG_LEVEL_INFO: LogLevel
LOG_LEVEL_WARN: LogLevel
LOG_LEVEL_ERROR: LogLevel
LEG_UNSPECIFIED: Leg
LEG_OBSERVATION: Leg
LEG_ACTION: Leg
ADVISORY_SEVERITY_UNSPECIFIED: AdvisorySeverity
ADVISORY_SEVERITY_INFO: AdvisorySeverity
ADVISORY_SEVERITY_CAUTION: AdvisorySeverity
HORIZON_UNSPECIFIED: Horizon
HORIZON_WINDOW: Horizon
HORIZON_SESSION: Horizon
KIND_UNSPECIFIED: Kind
KIND_DURATION: Kind
KIND_BYTES: Kind
KIND_COUNT: Kind

class RuntimeEnvContext(_message.Message):
    __slots__ = ("env_id", "env_component_id", "model_component_id", "lane")
    ENV_ID_FIELD_NUMBER: _ClassVar[int]
    ENV_COMPONENT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_COMPONENT_ID_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    env_id: str
    env_component_id: str
    model_component_id: str
    lane: int
    def __init__(self, env_id: _Optional[str] = ..., env_component_id: _Optional[str] = ..., model_component_id: _Optional[str] = ..., lane: _Optional[int] = ...) -> None: ...

class Leaves(_message.Message):
    __slots__ = ("leaves",)
    LEAVES_FIELD_NUMBER: _ClassVar[int]
    leaves: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, leaves: _Optional[_Iterable[bytes]] = ...) -> None: ...

class Advisory(_message.Message):
    __slots__ = ("severity", "message")
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    severity: AdvisorySeverity
    message: str
    def __init__(self, severity: _Optional[_Union[AdvisorySeverity, str]] = ..., message: _Optional[str] = ...) -> None: ...

class Source(_message.Message):
    __slots__ = ("op", "component")
    OP_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    op: str
    component: str
    def __init__(self, op: _Optional[str] = ..., component: _Optional[str] = ...) -> None: ...

class Metric(_message.Message):
    __slots__ = ("name", "kind")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: Kind
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[Kind, str]] = ...) -> None: ...

class Row(_message.Message):
    __slots__ = ("source", "metric", "count", "avg", "p50", "p95", "p99")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    AVG_FIELD_NUMBER: _ClassVar[int]
    P50_FIELD_NUMBER: _ClassVar[int]
    P95_FIELD_NUMBER: _ClassVar[int]
    P99_FIELD_NUMBER: _ClassVar[int]
    source: Source
    metric: Metric
    count: int
    avg: float
    p50: float
    p95: float
    p99: float
    def __init__(self, source: _Optional[_Union[Source, _Mapping]] = ..., metric: _Optional[_Union[Metric, _Mapping]] = ..., count: _Optional[int] = ..., avg: _Optional[float] = ..., p50: _Optional[float] = ..., p95: _Optional[float] = ..., p99: _Optional[float] = ...) -> None: ...

class Snapshot(_message.Message):
    __slots__ = ("horizon", "rows")
    HORIZON_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    horizon: Horizon
    rows: _containers.RepeatedCompositeFieldContainer[Row]
    def __init__(self, horizon: _Optional[_Union[Horizon, str]] = ..., rows: _Optional[_Iterable[_Union[Row, _Mapping]]] = ...) -> None: ...
