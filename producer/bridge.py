"""`rlmesh_bridge`: the rlmesh Python SDK's `RunHooks` turned into runtime events.

`rlmesh.run(model, env, hooks=rlmesh_bridge(hooks, env_id=..., model_component_id=...))`
publishes, for one run, the events the Rust runtime's driver would: the
connect/start events, episode started/completed with the run's seeds and
trial ordinals, per step an action, a step and an observation event with
leaves encoded per spec section 7 (the SpaceSpec derived once from the env's
spaces), the run's telemetry rows as the final `Session` snapshot, its
advisories as relay advisories, then session ended (or failed, if the run
raised).

What the SDK's smaller hook surface cannot give, the bridge says so rather
than invents: `RunHooks.on_step` carries the pre-step observation only, so
each post-step observation is published when the next step reveals it. An
episode's terminal observation is never shown to hooks: run the env wrapped
by `bridge.wrap(env)` (a Gymnasium wrapper that sees what each `step`
returns) and the bridge publishes it (an `observation_emitted` after the last
step, before `episode_completed`), so the episode is published whole (T+1
observations). Without the wrapper it is not published, and consumers mark
such episodes as lacking it.
The wrapped env also tells the bridge the env as it ran: the inner env's
`EnvSpec` (id, kwargs, the TimeLimit's `max_episode_steps`; not the wrapper's
own spec, which `gym.make` could not rebuild) goes out as JSON under the
reset infos' key `rlmesh.env_spec` (`ENV_SPEC_INFO`) of every episode's reset
observation, with the env's reset infos (docs/contract.md); wrappers
`gym.make` cannot rebuild (no recorded constructor arguments) are left out of
it. `env_spec=` gives it for an env that is not wrapped.
Step numbers follow spec section 3: an observation's `step` is the number of
steps its episode had taken (reset 0, the one step t returns t+1, terminal T).
Episodes are attributed to lane slots in start order (a vector env's
`StepEvent` carries no lane), one group step per `StepEvent`.

rlmesh calls hooks inline, on its own threads, and every microsecond there is
the rollout's. So the callbacks only capture (slot bookkeeping; a snapshot of
the leaves where the SDK's values are not already the hooks' own) and hand
over to one publishing thread (`handoff.Handoff`) that builds the events and
calls the runtime hooks in order. `on_run_end` waits for it, so when
`rlmesh.run` returns every event of the run is in the hooks; the Kafka hook's
session-end flush then runs on that thread, off the run's path.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import rlmesh

from rlmesh_stream.producer.handoff import Handoff
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.leaves import LeafCodec, infer_space
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.telemetry import Horizon, Kind, Metric, Row, Snapshot, Source

log = logging.getLogger(__name__)

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


def uuid7() -> str:
    """A UUIDv7 (time-ordered), as the runtime mints episode ids."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


def to_meta(value: Mapping[str, Any] | None) -> ev.MetaMap | None:
    """An env `info` as a `MetaMap`: numpy values made plain, unsupported values as text."""
    if value is None:
        return None
    return {str(k): _meta_value(v) for k, v in value.items() if v is not None}


def _meta_value(value: Any) -> ev.MetaValue:
    if isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, np.generic):
        plain = value.item()
        return plain if isinstance(plain, (bool, int, float, str, bytes)) else str(plain)
    if isinstance(value, np.ndarray):
        return _meta_value(value.tolist())
    if isinstance(value, Mapping):
        return {str(k): _meta_value(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_meta_value(v) for v in value if v is not None]
    return str(value)


_Encoded = tuple[list[bytes], list[bytes], "ev.MetaMap | None"]


def _encode_step(obs_codec: LeafCodec, act_codec: LeafCodec, event: Any) -> _Encoded:
    """A `StepEvent`'s observation and action leaves and its info, as published."""
    info = event.info
    return (obs_codec.encode(event.observation), act_codec.encode(event.action),
            {} if type(info) is dict and not info else to_meta(info))


@dataclass
class _Episode:
    index: int  # 0-based, as the SDK counts
    episode_id: str
    record_id: str
    slot: int
    seed: int | None
    last_info: ev.MetaMap | None = None


@dataclass
class _Capture:
    """What rlmesh's thread keeps for a run: the codecs and the episodes' lane slots."""

    context: Any = None
    values_are_fresh: bool = False  # the SDK's values are the hooks' own: no snapshot needed
    obs_codec: LeafCodec | None = None
    act_codec: LeafCodec | None = None
    slots: dict[int, int] = field(default_factory=dict)  # episode index -> lane slot
    free_slots: list[int] = field(default_factory=list)
    next_slot: int = 0

    def take_slot(self, episode: int) -> int:
        if self.free_slots:
            slot = self.free_slots.pop(0)
        else:
            slot = self.next_slot
            self.next_slot += 1
        self.slots[episode] = slot
        return slot

    def free_slot(self, episode: int) -> int | None:
        slot = self.slots.pop(episode, None)
        if slot is not None:
            self.free_slots.append(slot)
            self.free_slots.sort()
        return slot


@dataclass
class _RunState:
    """What the publishing thread keeps for a run: ids, episodes and totals."""

    session_id: str
    episodes: dict[int, _Episode] = field(default_factory=dict)
    total_steps: int = 0
    total_episodes: int = 0
    logged_first_reset: bool = False


class RlmeshBridge(rlmesh.RunHooks):
    """An `rlmesh.RunHooks` publishing each run as one runtime session (reusable across runs).

    Split in two to cost the rollout little: each callback, on rlmesh's thread,
    only encodes the step's leaves (bytes, a snapshot of the arrays) and hands
    them to one publishing thread (`Handoff`), which builds the events and
    calls the runtime hooks in the callbacks' order. `on_run_end` waits for
    that thread, then publishes the session's end, so when the run returns
    every event is in the hooks (a `flush`/`close` delivers them all).
    """

    def __init__(
        self,
        hooks: RuntimeHooksLike,
        *,
        env_id: str,
        model_component_id: str,
        env_component_id: str | None = None,
        lane: int | None = None,
        observation_space: Any = None,
        action_space: Any = None,
        trial_index_base: int = 0,
        env_spec: Any = None,
    ) -> None:
        self.hooks = hooks
        self.route = ev.RuntimeEnvContext(
            env_id=env_id, env_component_id=env_component_id or env_id,
            model_component_id=model_component_id, lane=lane)
        self.env_id = env_id
        self._observation_space = observation_space
        self._action_space = action_space
        self._trial_base = trial_index_base
        self._capture: _Capture | None = None  # rlmesh's thread
        self._state: _RunState | None = None  # the publishing thread
        self._handoff = Handoff("rlmesh-stream-bridge")
        # The Kafka hook ends a session without waiting for delivery, and that wait (bounded,
        # as the hook's own) happens on the publishing thread, after the run has returned;
        # other hooks end sessions their own way.
        self._kafka = hooks if isinstance(hooks, KafkaRuntimeHooks) else None
        self.session_ids: list[str] = []
        # lane slot -> the terminal observation a wrapped env's `step` returned
        self._terminal: dict[int, Any] = {}
        # lane slot -> the infos a wrapped env's `reset` returned
        self._reset_infos: dict[int, Any] = {}
        self._env_spec_json = _spec_json(env_spec)

    def wrap(self, env: Any) -> Any:
        """`env` (a Gymnasium `Env` or `VectorEnv`) wrapped so that each episode's terminal
        observation is published: `rlmesh.run(model, bridge.wrap(env), hooks=bridge)`."""
        import gymnasium as gym

        if isinstance(env, gym.vector.VectorEnv):
            return _TerminalVectorWrapper(env, self._terminal)
        if self._env_spec_json is None:
            self._env_spec_json = _spec_json(env.spec)  # the inner env's, not the wrapper's
        return _TerminalWrapper(env, self._terminal, self._reset_infos)

    @property
    def session_id(self) -> str | None:
        """The current (or last) run's session id."""
        return self.session_ids[-1] if self.session_ids else None

    # -- RunHooks, on rlmesh's thread: capture and hand over ---------------------------------

    def on_run_start(self, context: Any) -> None:
        # The native loop (`Model.run`) decodes each observation and action afresh for its
        # hooks: they are kept as they are and encoded later. The session loop hands over
        # the env's own objects, which an env may reuse: they are encoded (copied) at once.
        fresh = context is not None and not isinstance(context, rlmesh.Session)
        self._capture = _Capture(context=context, values_are_fresh=fresh)
        session_id = str(uuid.uuid4())
        self.session_ids.append(session_id)
        self._handoff.submit(self._publish_run_start, session_id)

    def on_episode_start(self, *, episode: int, seed: int | None) -> None:
        capture = self._capture or self._implicit_run()
        self._resolve_spaces(capture)
        slot = capture.take_slot(episode)
        self._handoff.submit(self._publish_episode_start, episode, seed, slot)

    def on_step(self, event: Any) -> None:
        # Runs once per rollout step, inline: only what must be a snapshot happens here.
        capture = self._capture or self._implicit_run()
        index = event.episode
        slot = capture.slots.get(index)
        if slot is None:  # a step of an episode we never saw start: attribute it anyway
            self.on_episode_start(episode=index, seed=event.seed)
            slot = capture.slots[index]
        obs_codec, act_codec = capture.obs_codec, capture.act_codec
        if obs_codec is None:
            obs_codec = capture.obs_codec = LeafCodec(infer_space(event.observation))
        if act_codec is None:
            act_codec = capture.act_codec = LeafCodec(infer_space(event.action))
        reset_info = None
        if event.step == 0:  # the wrapped env's reset infos (reset before this step)
            info = self._reset_infos.pop(slot, None)
            reset_info = None if info is None else to_meta(info)
        if capture.values_are_fresh:  # encoded on the publishing thread
            self._handoff.submit(self._publish_step, index, slot, obs_codec, act_codec, event,
                                 None, reset_info)
        else:  # a snapshot now: the env may reuse its arrays
            self._handoff.submit(self._publish_step, index, slot, obs_codec, act_codec, event,
                                 _encode_step(obs_codec, act_codec, event), reset_info)

    def on_episode_end(self, result: Any) -> None:
        capture = self._capture or self._implicit_run()
        slot = capture.free_slot(result.index)
        terminal = self._terminal.pop(0 if slot is None else slot, None)
        spec = leaves = None
        if terminal is not None and result.steps > 0:
            codec = capture.obs_codec
            if codec is None:
                codec = capture.obs_codec = LeafCodec(infer_space(terminal))
            spec, leaves = codec.spec, codec.encode(terminal)
        self._handoff.submit(self._publish_episode_end, result, spec, leaves)

    def on_run_end(self, result: Any) -> None:
        # The SDK calls this from its `except`/`finally`: a run that raised is still raising.
        error = sys.exc_info()[1]
        if self._capture is None:
            self._implicit_run()
        failure: BaseException | None = None
        try:
            self._handoff.barrier()
        except BaseException as exc:  # the publishing thread failed after the last step
            failure = exc
        try:
            self._publish_run_end(result, error or failure)
            kafka = self._kafka
            if kafka is not None:  # the session end's flush, off the run's path
                self._handoff.submit(kafka.flush, kafka.settings.session_end_flush_timeout_s)
        finally:
            self._capture = None
            self._handoff.stop()
        if failure is not None and error is None:
            raise failure

    # -- the publishing thread: build the events, call the hooks --------------------------------

    def _publish_run_start(self, session_id: str) -> None:
        self._state = _RunState(session_id=session_id)
        route = self.route
        self.hooks.env_connected(ev.EnvConnectedEvent(session_id=session_id, route=route,
                                                      env_id=self.env_id))
        self.hooks.model_connected(ev.ModelConnectedEvent(session_id=session_id, route=route))
        self.hooks.session_started(ev.SessionStartedEvent(session_id=session_id, route=route,
                                                          env_id=self.env_id))

    def _publish_episode_start(self, episode: int, seed: int | None, slot: int) -> None:
        state = self._run_state()
        ep = _Episode(index=episode, episode_id=uuid7(), record_id=f"ep-{episode + 1:06d}",
                      slot=slot, seed=seed)
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

    def _publish_step(self, index: int, slot: int, obs_codec: LeafCodec, act_codec: LeafCodec,
                      event: Any, encoded: _Encoded | None,
                      reset_info: ev.MetaMap | None) -> None:
        state = self._run_state()
        ep = state.episodes[index]
        hooks, sid, route = self.hooks, state.session_id, self.route
        observation, action, infos = encoded or _encode_step(obs_codec, act_codec, event)
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

    def _publish_episode_end(self, result: Any, spec: ev.SpaceSpec | None,
                             terminal: list[bytes] | None) -> None:
        state = self._run_state()
        ep = state.episodes.pop(result.index, None)
        if ep is None:
            ep = _Episode(index=result.index, episode_id=uuid7(),
                          record_id=f"ep-{result.index + 1:06d}", slot=0, seed=result.seed)
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

    def _publish_run_end(self, result: Any, error: BaseException | None) -> None:
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
            if self._kafka is not None:
                self._kafka.session_failed(failed, flush=False)
            else:
                self.hooks.session_failed(failed)
        else:
            ended = ev.SessionEndedEvent(
                session_id=sid, route=route, reason="completed",
                total_steps=state.total_steps, total_episodes=state.total_episodes)
            if self._kafka is not None:
                self._kafka.session_ended(ended, flush=False)
            else:
                self.hooks.session_ended(ended)
        self._state = None

    # -- helpers ------------------------------------------------------------------------------

    def _reset_observation_infos(self, reset_info: ev.MetaMap | None) -> ev.MetaMap | None:
        """The reset observation's infos: the env's reset infos and its spec, when known."""
        if reset_info is None and self._env_spec_json is None:
            return None
        infos: ev.MetaMap = dict(reset_info or {})
        if self._env_spec_json is not None:
            infos[ENV_SPEC_INFO] = self._env_spec_json
        return infos

    def _implicit_run(self) -> _Capture:
        """A hook called outside a run: start one implicitly."""
        self.on_run_start(None)
        assert self._capture is not None
        return self._capture

    def _run_state(self) -> _RunState:
        assert self._state is not None, "published before the run's start"
        return self._state

    def _resolve_spaces(self, capture: _Capture) -> None:
        """Compile the codecs once per run, from the caller's spaces or the env contract."""
        if capture.obs_codec is not None and capture.act_codec is not None:
            return
        contract = getattr(capture.context, "contract", None)
        obs_space, act_space = self._observation_space, self._action_space
        if contract is not None:
            if obs_space is None:
                obs_space = _gym_space(getattr(contract, "observation_space", None))
            if act_space is None:
                act_space = _gym_space(getattr(contract, "action_space", None))
        if obs_space is not None and capture.obs_codec is None:
            capture.obs_codec = LeafCodec(obs_space)
        if act_space is not None and capture.act_codec is None:
            capture.act_codec = LeafCodec(act_space)


def _terminal_wrapper_base() -> Any:
    import gymnasium as gym

    return gym.Wrapper


class _TerminalWrapper(_terminal_wrapper_base()):  # type: ignore[misc]
    """Keeps the observation a `step` returned when the episode ended, and the infos a
    `reset` returned (lane slot 0)."""

    def __init__(self, env: Any, stash: dict[int, Any], reset_infos: dict[int, Any]) -> None:
        super().__init__(env)
        self._stash = stash
        self._reset_infos = reset_infos

    def reset(self, **kwargs: Any) -> Any:
        result = self.env.reset(**kwargs)
        self._reset_infos[0] = result[1]
        return result

    def step(self, action: Any) -> Any:
        result = self.env.step(action)
        if result[2] or result[3]:
            self._stash[0] = result[0]
        return result


def _vector_wrapper_base() -> Any:
    import gymnasium as gym

    return gym.vector.VectorWrapper


class _TerminalVectorWrapper(_vector_wrapper_base()):  # type: ignore[misc]
    """Keeps each lane's observation from the `step` that ended its episode (slot = lane)."""

    def __init__(self, env: Any, stash: dict[int, Any]) -> None:
        super().__init__(env)
        self._stash = stash

    def step(self, actions: Any) -> Any:
        result = self.env.step(actions)
        observations, _, terminated, truncated, _ = result
        for lane in np.flatnonzero(np.logical_or(terminated, truncated)):
            self._stash[int(lane)] = _lane(observations, int(lane))
        return result


def _lane(batched: Any, lane: int) -> Any:
    if isinstance(batched, dict):
        return {k: _lane(v, lane) for k, v in batched.items()}
    if isinstance(batched, tuple):
        return tuple(_lane(v, lane) for v in batched)
    return batched[lane]


def _spec_json(spec: Any) -> str | None:
    """A Gymnasium `EnvSpec` as its JSON, as `gym.make` can rebuild it: a wrapper that
    records no constructor arguments (`kwargs` None: `gym.make` refuses it) is left out.
    None: no spec, or one JSON cannot hold."""
    if spec is None:
        return None
    kept = tuple(w for w in spec.additional_wrappers if w.kwargs is not None)
    if len(kept) != len(spec.additional_wrappers):
        log.info("env spec %s: wrappers gym.make cannot rebuild left out: %s", spec.id,
                 [w.name for w in spec.additional_wrappers if w.kwargs is None])
        spec = dataclasses.replace(spec, additional_wrappers=kept)
    try:
        return str(spec.to_json())
    except Exception:  # kwargs JSON cannot hold (a callable): the spec is not published
        log.warning("the env's spec cannot be published (not JSON): %s", spec.id)
        return None


def _gym_space(spec: Any) -> Any:
    if spec is None:
        return None
    try:
        return spec.to_gym_space()
    except Exception:  # an rlmesh spec Gymnasium cannot express: infer from values instead
        log.debug("cannot convert %r to a Gymnasium space", spec, exc_info=True)
        return None


def _leg_of(advisory: Any) -> ev.Leg:
    leg = getattr(advisory, "leg", None)
    try:
        return ev.Leg(str(leg)) if leg is not None else ev.Leg.OBSERVATION
    except ValueError:
        return ev.Leg.OBSERVATION


def rlmesh_bridge(
    hooks: RuntimeHooksLike,
    *,
    env_id: str,
    model_component_id: str,
    env_component_id: str | None = None,
    lane: int | None = None,
    **options: Any,
) -> RlmeshBridge:
    """An `rlmesh.RunHooks` for `rlmesh.run(model, env, hooks=...)` publishing through `hooks`.

    `options`: `observation_space` / `action_space` (Gymnasium spaces, when the
    run context cannot provide them), `trial_index_base` (the run's) and `env_spec`
    (the Gymnasium `EnvSpec` the env was made from, for an env not run through `wrap`).
    """
    return RlmeshBridge(hooks, env_id=env_id, model_component_id=model_component_id,
                        env_component_id=env_component_id, lane=lane, **options)
