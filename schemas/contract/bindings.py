"""Which Python type stands for each named Avro type of the contract.

Both Avro codecs (writer and reader) and the validator are derived from the
`.avsc` files; this table is the only hand-kept link between a schema name and
the Python class that carries it. Records not listed here (`MetaMap`,
`MetaList`, the `rlmesh.spaces.v1` space records) have dedicated converters
because their Python form is a plain dict/list or a protobuf message.
"""

from __future__ import annotations

import enum

from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract import telemetry as tm
from rlmesh_stream.schemas.contract.avro import NAMESPACE, SPACES_NAMESPACE

RECORD_CLASSES: dict[str, type] = {
    f"{NAMESPACE}.{cls.__name__}": cls
    for cls in (
        ev.RuntimeEnvContext, ev.Advisory, tm.Snapshot, tm.Row, tm.Source, tm.Metric,
        ev.EnvConnectedEvent, ev.ModelConnectedEvent, ev.SessionStartedEvent,
        ev.SessionEndedEvent, ev.SessionFailedEvent, ev.LogEvent, ev.EpisodeStartedEvent,
        ev.EpisodeCompletedEvent, ev.ActionReceivedEvent, ev.StepCompletedEvent,
        ev.ObservationEmittedEvent, ev.RelayAdvisoryEvent, ev.TelemetrySnapshotEvent,
    )
}

ENUM_CLASSES: dict[str, type[enum.Enum]] = {
    f"{NAMESPACE}.{cls.__name__}": cls
    for cls in (ev.LogLevel, ev.Leg, ev.AdvisorySeverity, tm.Horizon, tm.Kind)
}

META_MAP = f"{SPACES_NAMESPACE}.MetaMap"
META_LIST = f"{SPACES_NAMESPACE}.MetaList"
SPACE_SPEC = f"{SPACES_NAMESPACE}.SpaceSpec"

RUST_INT_RANGES: dict[str, tuple[int, int]] = {
    "i32": (-(2**31), 2**31 - 1),
    "u32": (0, 2**32 - 1),
    "i64": (-(2**63), 2**63 - 1),
    # u64 above 2^63-1 cannot be an Avro long: rejected rather than wrapped.
    "u64": (0, 2**63 - 1),
}
