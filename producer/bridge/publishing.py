"""The bridge's publishing thread: each run's runtime events built in order and handed to
the runtime hooks (session start, episodes, per step an observation, an action and a
step event, the terminal observation, telemetry, advisories, the session's end).

Step numbers follow runtime-events.md §3: an observation's `step` is the number of steps its
episode had taken (reset 0, the one step t returns t+1, terminal T). One group step per
`StepEvent`; an episode's record id and index count from 1 (`ep-000001`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from rlmesh_stream.producer.bridge.values import Encoded, encode_step, uuid7
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.leaves import LeafCodec
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.telemetry import Horizon, Kind, Metric, Row, Snapshot, Source

_UNIT_KIND = {"ms": Kind.DURATION, "bytes": Kind.BYTES, "count": Kind.COUNT}
_ObservationEmitted = ev.ObservationEmittedEvent
_ActionReceived = ev.ActionReceivedEvent
_StepCompleted = ev.StepCompletedEvent
ENV_SPEC_INFO = ev.ENV_SPEC_INFO  # the reset infos' key of the env's `EnvSpec` JSON


class RuntimeHooksLike(Protocol):
    """The runtime callbacks the bridge calls (what `KafkaRuntimeHooks` implements)."""

    def env_connected(self, event: ev.EnvConnectedEvent) -> None: ...
    def model_connected(self, event: ev.ModelConnectedEvent) -> None: ...
    def session_started(self, event: ev.SessionStartedEvent) -> None: ...
    def episode_started(self, event: ev.EpisodeStartedEvent) -> None: ...
    def episode_completed(self, event: ev.EpisodeCompletedEvent) -> None: ...
    def action_received(self, event: ev.ActionReceivedEvent) -> None: ...
    def step_completed(self, event: ev.StepCompletedEvent) -> None: ...
    def observation_emitted(self, event: ev.ObservationEmittedEvent) -> None: ...
    def session_ended(self, event: ev.SessionEndedEvent) -> None: ...
    def on_telemetry(self, event: ev.TelemetrySnapshotEvent) -> None: ...
    def session_failed(self, event: ev.SessionFailedEvent) -> None: ...
    def log(self, event: ev.LogEvent) -> None: ...
    def relay_advisory(self, event: ev.RelayAdvisoryEvent) -> None: ...


@dataclass
class _Episode:
    index: int  # 0-based, as the SDK counts
    episode_id: str
    record_id: str
    slot: int
    seed: int | None
    last_info: ev.MetaMap | None = None


@dataclass
class _RunState:
    """What the publishing thread keeps for a run: ids, episodes and totals."""

    session_id: str
    episodes: dict[int, _Episode] = field(default_factory=dict)
    total_steps: int = 0
    total_episodes: int = 0
    logged_first_reset: bool = False


class SessionPublisher:
    """Builds one run's events and calls the runtime hooks, on the publishing thread.

    `env_spec_json` may be set after construction (`RlmeshBridge.wrap` learns it from the
    env); it is read when each episode's reset observation is published.
    """

    def __init__(self, hooks: RuntimeHooksLike, route: ev.RuntimeEnvContext, env_id: str,
                 trial_index_base: int, env_spec_json: str | None) -> None:
        self.hooks = hooks
        self.route = route
        self.env_id = env_id
        self._trial_base = trial_index_base
        self.env_spec_json = env_spec_json
        self._state: _RunState | None = None
        # The Kafka hook ends a session without waiting for delivery, and that wait (bounded,
        # as the hook's own) happens on the publishing thread, after the run has returned;
        # other hooks end sessions their own way.
        self.kafka = hooks if isinstance(hooks, KafkaRuntimeHooks) else None

    def run_start(self, session_id: str) -> None:
        self._state = _RunState(session_id=session_id)
        route = self.route
        self.hooks.env_connected(ev.EnvConnectedEvent(session_id=session_id, route=route,
                                                      env_id=self.env_id))
        self.hooks.model_connected(ev.ModelConnectedEvent(session_id=session_id, route=route))
        self.hooks.session_started(ev.SessionStartedEvent(session_id=session_id, route=route,
                                                          env_id=self.env_id))

    def episode_start(self, episode: int, seed: int | None, slot: int) -> None:
        state = self._run_state()
        ep = _Episode(index=episode, episode_id=uuid7(),
                      record_id=ev.episode_record_id(episode + 1), slot=slot, seed=seed)
        state.episodes[episode] = ep
        if not state.logged_first_reset:
            state.logged_first_reset = True
            self.hooks.log(ev.LogEvent(
                session_id=state.session_id, route=self.route, level=ev.LogLevel.INFO,
                message=f"env {self.env_id} reset; running episodes",
                source="rlmesh_stream.bridge"))
        self.hooks.episode_started(ev.EpisodeStartedEvent(
            session_id=state.session_id, route=self.route, episode_id=ep.episode_id,
            episode_record_id=ep.record_id, episode_index=episode + 1, env_index=slot,
            started_from_auto_reset=False, seed=seed, trial_index=self._trial_base + episode))

    def step(self, index: int, slot: int, obs_codec: LeafCodec, act_codec: LeafCodec,
                      event: Any, encoded: Encoded | None,
                      reset_info: ev.MetaMap | None) -> None:
        state = self._run_state()
        ep = state.episodes[index]
        hooks, sid, route = self.hooks, state.session_id, self.route
        observation, action, infos = encoded or encode_step(obs_codec, act_codec, event)
        obs_spec, act_spec, step = obs_codec.spec, act_codec.spec, event.step
        episode_id, record_id = ep.episode_id, ep.record_id
        # The pre-step observation: the reset one on step 0, else the previous step's result.
        hooks.observation_emitted(_ObservationEmitted(
            session_id=sid, route=route, episode_id=episode_id, episode_record_id=record_id,
            episode_ids=[episode_id], episode_record_ids=[record_id],
            step=step, env_index=slot, is_reset=step == 0, num_envs=1,
            observation_space=obs_spec, observation=observation, raw_observation=observation,
            infos=self._reset_observation_infos(reset_info) if step == 0 else None))
        hooks.action_received(_ActionReceived(
            session_id=sid, route=route, episode_id=episode_id, episode_record_id=record_id,
            episode_ids=[episode_id], episode_record_ids=[record_id], step=step,
            env_index=slot, action_space=act_spec, action=action, raw_action=action))
        hooks.step_completed(_StepCompleted(
            session_id=sid, route=route, episode_id=episode_id, episode_record_id=record_id,
            step=step, env_index=slot, rewards=[float(event.reward)], infos=infos,
            terminated=[bool(event.terminated)], truncated=[bool(event.truncated)],
            autoreset_roll=[False], predict_ms=float(event.predict_ms),
            step_ms=float(event.step_ms)))
        ep.last_info = infos
        state.total_steps += 1

    def episode_end(self, result: Any, spec: ev.SpaceSpec | None,
                             terminal: list[bytes] | None) -> None:
        state = self._run_state()
        ep = state.episodes.pop(result.index, None)
        if ep is None:
            ep = _Episode(index=result.index, episode_id=uuid7(),
                          record_id=ev.episode_record_id(result.index + 1), slot=0,
                          seed=result.seed)
        state.total_episodes += 1
        if terminal is not None and spec is not None:
            # The observation after the episode's last step (index T), from the wrapped env.
            self.hooks.observation_emitted(_ObservationEmitted(
                session_id=state.session_id, route=self.route, episode_id=ep.episode_id,
                episode_record_id=ep.record_id, episode_ids=[ep.episode_id],
                episode_record_ids=[ep.record_id], step=int(result.steps),
                env_index=ep.slot, is_reset=False, num_envs=1, observation_space=spec,
                observation=terminal, raw_observation=terminal, infos=None))
        self.hooks.episode_completed(ev.EpisodeCompletedEvent(
            session_id=state.session_id, route=self.route, episode_id=ep.episode_id,
            episode_record_id=ep.record_id, episode_index=result.index + 1, env_index=ep.slot,
            step_count=int(result.steps), cumulative_reward=float(result.reward),
            terminated=bool(result.terminated), truncated=bool(result.truncated),
            duration_ms=round(float(result.duration_s) * 1000.0),
            final_info=ep.last_info, success=result.success, seed=result.seed,
            trial_index=result.trial, predict_ms=result.predict_ms, step_ms=result.step_ms))

    def run_end(self, result: Any, error: BaseException | None) -> None:
        state = self._run_state()
        sid, route = state.session_id, self.route
        for advisory in result.advisories:
            self.hooks.relay_advisory(ev.RelayAdvisoryEvent(
                session_id=sid, route=route, leg=_leg_of(advisory),
                advisory=ev.Advisory(severity=ev.AdvisorySeverity(str(advisory.severity)),
                                     message=str(advisory.message))))
        rows = [
            Row(source=Source(op=r.op, component=r.component),
                metric=Metric(name=r.metric, kind=_UNIT_KIND.get(r.unit, Kind.COUNT)),
                count=int(r.count), avg=float(r.avg), p50=float(r.p50), p95=float(r.p95),
                p99=float(r.p99))
            for r in result.telemetry
        ]
        self.hooks.on_telemetry(ev.TelemetrySnapshotEvent(
            session_id=sid, route=route, snapshot=Snapshot(horizon=Horizon.SESSION, rows=rows)))
        if error is not None:
            failed = ev.SessionFailedEvent(
                session_id=sid, route=route, reason=f"{type(error).__name__}: {error}")
            if self.kafka is not None:
                self.kafka.session_failed(failed, flush=False)
            else:
                self.hooks.session_failed(failed)
        else:
            ended = ev.SessionEndedEvent(
                session_id=sid, route=route, reason="completed",
                total_steps=state.total_steps, total_episodes=state.total_episodes)
            if self.kafka is not None:
                self.kafka.session_ended(ended, flush=False)
            else:
                self.hooks.session_ended(ended)
        self._state = None

    def _reset_observation_infos(self, reset_info: ev.MetaMap | None) -> ev.MetaMap | None:
        """The reset observation's infos: the env's reset infos and its spec, when known."""
        if reset_info is None and self.env_spec_json is None:
            return None
        infos: ev.MetaMap = dict(reset_info or {})
        if self.env_spec_json is not None:
            infos[ENV_SPEC_INFO] = self.env_spec_json
        return infos

    def _run_state(self) -> _RunState:
        assert self._state is not None, "published before the run's start"
        return self._state


def _leg_of(advisory: Any) -> ev.Leg:
    leg = getattr(advisory, "leg", None)
    try:
        return ev.Leg(str(leg)) if leg is not None else ev.Leg.OBSERVATION
    except ValueError:
        return ev.Leg.OBSERVATION
