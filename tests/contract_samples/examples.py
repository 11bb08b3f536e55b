"""One realistic, valid example of every runtime event (importable by any test).

Built the way the runtime fills them for a 2-lane CartPole route, so tests
that need "an event of type X" share one honest instance.
"""

from __future__ import annotations

from collections.abc import Callable

from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract import telemetry as tm
from rlmesh_stream.schemas.contract.events import SpaceSpec
from rlmesh_stream.schemas.contract.topics import EventType

SESSION = "sess-0190a5d2-7c1e-7b3a-9f00-0000000000aa"
ROUTE = ev.RuntimeEnvContext(
    env_id="CartPole-v1", env_component_id="env-0", model_component_id="model-0", lane=None
)
EP1 = "0190a5d2-7c1e-7b3a-9f00-000000000001"
EP2 = "0190a5d2-7c1e-7b3a-9f00-000000000002"


def box_space() -> SpaceSpec:
    spec = SpaceSpec(shape=[4], dtype="DATA_TYPE_FLOAT32")
    spec.box.uniform.low = b"\x00\x00\x80\xff"
    spec.box.uniform.high = b"\x00\x00\x80\x7f"
    return spec


def discrete_space() -> SpaceSpec:
    spec = SpaceSpec(shape=[], dtype="DATA_TYPE_INT64")
    spec.discrete.n = 2
    spec.discrete.start = 0
    return spec


def example(event_type: EventType) -> ev.RuntimeEvent:
    """A fresh valid instance of the event type."""
    event: ev.RuntimeEvent = _EXAMPLES[event_type]()
    return event


_EXAMPLES: dict[EventType, Callable[[], ev.RuntimeEvent]] = {
    EventType.ENV_CONNECTED: lambda: ev.EnvConnectedEvent(
        session_id=SESSION, route=ROUTE, env_id="CartPole-v1"),
    EventType.MODEL_CONNECTED: lambda: ev.ModelConnectedEvent(session_id=SESSION, route=ROUTE),
    EventType.SESSION_STARTED: lambda: ev.SessionStartedEvent(
        session_id=SESSION, route=ROUTE, env_id="CartPole-v1"),
    EventType.SESSION_ENDED: lambda: ev.SessionEndedEvent(
        session_id=SESSION, route=ROUTE, reason="completed", total_steps=412, total_episodes=3),
    EventType.SESSION_FAILED: lambda: ev.SessionFailedEvent(
        session_id=SESSION, route=ROUTE, reason="env endpoint closed"),
    EventType.LOG: lambda: ev.LogEvent(
        session_id=SESSION, route=ROUTE, level=ev.LogLevel.INFO, message="reset done",
        source="runner"),
    EventType.EPISODE_STARTED: lambda: ev.EpisodeStartedEvent(
        session_id=SESSION, route=ROUTE, episode_id=EP1, episode_record_id="ep-000001",
        episode_index=1, env_index=0, started_from_auto_reset=False, seed=42, trial_index=0),
    EventType.EPISODE_COMPLETED: lambda: ev.EpisodeCompletedEvent(
        session_id=SESSION, route=ROUTE, episode_id=EP1, episode_record_id="ep-000001",
        episode_index=1, env_index=0, step_count=23, cumulative_reward=23.0, terminated=True,
        truncated=False, duration_ms=41, final_info={"is_success": False, "x": [1, 2.5]},
        success=False, seed=42, trial_index=0, predict_ms=0.21, step_ms=0.05),
    EventType.ACTION_RECEIVED: lambda: ev.ActionReceivedEvent(
        session_id=SESSION, route=ROUTE, episode_id=EP1, episode_record_id="ep-000001",
        episode_ids=[EP1, EP2], episode_record_ids=["ep-000001", "ep-000002"], step=5,
        env_index=0, action_space=discrete_space(),
        action=[b"\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"],
        raw_action=[b"\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"]),
    EventType.STEP_COMPLETED: lambda: ev.StepCompletedEvent(
        session_id=SESSION, route=ROUTE, episode_id=EP1, episode_record_id="ep-000001", step=5,
        env_index=0, rewards=[1.0, 1.0], infos={"TimeLimit.truncated": False},
        terminated=[False, True], truncated=[False, False], autoreset_roll=[False, False],
        predict_ms=0.2, step_ms=0.04),
    EventType.OBSERVATION_EMITTED: lambda: ev.ObservationEmittedEvent(
        session_id=SESSION, route=ROUTE, episode_id=EP1, episode_record_id="ep-000001",
        episode_ids=[EP1, EP2], episode_record_ids=["ep-000001", "ep-000002"], step=0,
        env_index=0, is_reset=True, num_envs=2, observation_space=box_space(),
        observation=[bytes(32)], raw_observation=[bytes(32)], infos={}),
    EventType.RELAY_ADVISORY: lambda: ev.RelayAdvisoryEvent(
        session_id=SESSION, route=ROUTE, leg=ev.Leg.OBSERVATION,
        advisory=ev.Advisory(severity=ev.AdvisorySeverity.CAUTION,
                             message="float64 observation narrowed to float32")),
    EventType.TELEMETRY_SNAPSHOT: lambda: ev.TelemetrySnapshotEvent(
        session_id=SESSION, route=ROUTE, snapshot=tm.Snapshot(horizon=tm.Horizon.SESSION, rows=[
            tm.Row(source=tm.Source(op="env.step", component="env"),
                   metric=tm.Metric(name="rpc.total", kind=tm.Kind.DURATION),
                   count=412, avg=0.05, p50=0.04, p95=0.09, p99=0.2)])),
}


def step_event(lanes: int) -> ev.StepCompletedEvent:
    """The hot-path event: one `StepCompletedEvent` with `lanes` lanes, rewards 1.0."""
    route = ev.RuntimeEnvContext(env_id="CartPole-v1", env_component_id="env-0",
                                 model_component_id="model-0")
    return ev.StepCompletedEvent(
        session_id="sess-0190a5d2-7c1e-7b3a-9f00-0000000000aa", route=route,
        episode_id="0190a5d2-7c1e-7b3a-9f00-123456789abc", episode_record_id="ep-000001",
        step=17, env_index=0, rewards=[1.0] * lanes, infos=None, terminated=[False] * lanes,
        truncated=[False] * lanes, autoreset_roll=[False] * lanes, predict_ms=0.5, step_ms=0.2)
