"""One valid instance of every runtime event, for tests that publish "one of each"."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces as gs

from rlmesh_stream.producer.leaves import LeafCodec
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.telemetry import Horizon, Kind, Metric, Row, Snapshot, Source
from rlmesh_stream.schemas.contract.topics import EventType

OBS_CODEC = LeafCodec(gs.Box(-1.0, 1.0, shape=(4,), dtype=np.float32))
ACT_CODEC = LeafCodec(gs.Discrete(2))


def route(lane: int | None = None) -> ev.RuntimeEnvContext:
    return ev.RuntimeEnvContext(env_id="CartPole-v1", env_component_id="env-a",
                                model_component_id="model-a", lane=lane)


def observation(session_id: str, step: int = 0, *, leaves: list[bytes] | None = None
                ) -> ev.ObservationEmittedEvent:
    obs = leaves if leaves is not None else OBS_CODEC.encode(
        np.array([0.5, -0.25, 0.125, 1.0], dtype=np.float32))
    return ev.ObservationEmittedEvent(
        session_id=session_id, route=route(), episode_id="e1", episode_record_id="ep-000001",
        episode_ids=["e1"], episode_record_ids=["ep-000001"], step=step, env_index=0,
        is_reset=step == 0, num_envs=1, observation_space=OBS_CODEC.spec, observation=obs,
        raw_observation=obs, infos={"reset": True} if step == 0 else None)


def action(session_id: str, step: int = 0) -> ev.ActionReceivedEvent:
    act = ACT_CODEC.encode(np.int64(1))
    return ev.ActionReceivedEvent(
        session_id=session_id, route=route(), episode_id="e1", episode_record_id="ep-000001",
        episode_ids=["e1"], episode_record_ids=["ep-000001"], step=step, env_index=0,
        action_space=ACT_CODEC.spec, action=act, raw_action=act)


def step(session_id: str, step: int = 0, lanes: int = 1) -> ev.StepCompletedEvent:
    return ev.StepCompletedEvent(
        session_id=session_id, route=route(), episode_id="e1", episode_record_id="ep-000001",
        step=step, env_index=0, rewards=[1.0] * lanes, infos={"x": 1},
        terminated=[False] * lanes, truncated=[False] * lanes, autoreset_roll=[False] * lanes,
        predict_ms=0.1, step_ms=0.2)


def one_of_each(session_id: str) -> dict[EventType, ev.RuntimeEvent]:
    r = route()
    return {
        EventType.ENV_CONNECTED: ev.EnvConnectedEvent(session_id=session_id, route=r,
                                                      env_id="CartPole-v1"),
        EventType.MODEL_CONNECTED: ev.ModelConnectedEvent(session_id=session_id, route=r),
        EventType.SESSION_STARTED: ev.SessionStartedEvent(session_id=session_id, route=r,
                                                          env_id="CartPole-v1"),
        EventType.LOG: ev.LogEvent(session_id=session_id, route=r, level=ev.LogLevel.WARN,
                                   message="hello", source="test"),
        EventType.EPISODE_STARTED: ev.EpisodeStartedEvent(
            session_id=session_id, route=r, episode_id="e1", episode_record_id="ep-000001",
            episode_index=1, env_index=0, started_from_auto_reset=False, seed=7, trial_index=0),
        EventType.OBSERVATION_EMITTED: observation(session_id),
        EventType.ACTION_RECEIVED: action(session_id),
        EventType.STEP_COMPLETED: step(session_id),
        EventType.EPISODE_COMPLETED: ev.EpisodeCompletedEvent(
            session_id=session_id, route=r, episode_id="e1", episode_record_id="ep-000001",
            episode_index=1, env_index=0, step_count=1, cumulative_reward=1.0, terminated=True,
            truncated=False, duration_ms=3, final_info={"is_success": True}, success=True,
            seed=7, trial_index=0, predict_ms=0.1, step_ms=0.2),
        EventType.RELAY_ADVISORY: ev.RelayAdvisoryEvent(
            session_id=session_id, route=r, leg=ev.Leg.OBSERVATION,
            advisory=ev.Advisory(severity=ev.AdvisorySeverity.CAUTION, message="narrowed")),
        EventType.TELEMETRY_SNAPSHOT: ev.TelemetrySnapshotEvent(
            session_id=session_id, route=r, snapshot=Snapshot(horizon=Horizon.SESSION, rows=[
                Row(source=Source(op="env.step", component="env"),
                    metric=Metric(name="rpc.total", kind=Kind.DURATION),
                    count=3, avg=1.0, p50=1.0, p95=2.0, p99=3.0)])),
        EventType.SESSION_ENDED: ev.SessionEndedEvent(
            session_id=session_id, route=r, reason="completed", total_steps=1,
            total_episodes=1),
        EventType.SESSION_FAILED: ev.SessionFailedEvent(session_id=session_id, route=r,
                                                        reason="boom"),
    }


CALLBACK = {
    EventType.ENV_CONNECTED: "env_connected", EventType.MODEL_CONNECTED: "model_connected",
    EventType.SESSION_STARTED: "session_started", EventType.LOG: "log",
    EventType.EPISODE_STARTED: "episode_started",
    EventType.OBSERVATION_EMITTED: "observation_emitted",
    EventType.ACTION_RECEIVED: "action_received", EventType.STEP_COMPLETED: "step_completed",
    EventType.EPISODE_COMPLETED: "episode_completed",
    EventType.RELAY_ADVISORY: "relay_advisory", EventType.TELEMETRY_SNAPSHOT: "on_telemetry",
    EventType.SESSION_ENDED: "session_ended", EventType.SESSION_FAILED: "session_failed",
}
