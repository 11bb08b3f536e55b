"""`RlmeshBridge`, the `rlmesh.RunHooks` side of the bridge: each callback, on rlmesh's
own thread, only captures (lane slots; a snapshot of the leaves where the SDK's values
are not already the hooks' own) and hands over to the publishing thread
(`publishing.SessionPublisher`), which builds the events.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

import rlmesh

from rlmesh_stream.producer.bridge.env_capture import (
    TerminalVectorWrapper,
    TerminalWrapper,
    spec_json,
)
from rlmesh_stream.producer.bridge.publishing import RuntimeHooksLike, SessionPublisher
from rlmesh_stream.producer.bridge.slots import Capture
from rlmesh_stream.producer.bridge.values import encode_step, gym_space, to_meta
from rlmesh_stream.producer.handoff import Handoff
from rlmesh_stream.producer.leaves import LeafCodec, infer_space
from rlmesh_stream.schemas.contract import events as ev


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
        self._capture: Capture | None = None  # rlmesh's thread
        self._publisher = SessionPublisher(hooks, self.route, env_id, trial_index_base,
                                           spec_json(env_spec))  # the publishing thread
        self._handoff = Handoff("rlmesh-stream-bridge")
        self.session_ids: list[str] = []
        # lane slot -> the terminal observation a wrapped env's `step` returned
        self._terminal: dict[int, Any] = {}
        # lane slot -> the infos a wrapped env's `reset` returned
        self._reset_infos: dict[int, Any] = {}

    def wrap(self, env: Any) -> Any:
        """`env` (a Gymnasium `Env` or `VectorEnv`) wrapped so that each episode's terminal
        observation is published: `rlmesh.run(model, bridge.wrap(env), hooks=bridge)`."""
        import gymnasium as gym

        if isinstance(env, gym.vector.VectorEnv):
            return TerminalVectorWrapper(env, self._terminal)
        if self._publisher.env_spec_json is None:
            # the inner env's spec, not the wrapper's
            self._publisher.env_spec_json = spec_json(env.spec)
        return TerminalWrapper(env, self._terminal, self._reset_infos)

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
        self._capture = Capture(context=context, values_are_fresh=fresh)
        session_id = str(uuid.uuid4())
        self.session_ids.append(session_id)
        self._handoff.submit(self._publisher.run_start, session_id)

    def on_episode_start(self, *, episode: int, seed: int | None) -> None:
        capture = self._capture or self._implicit_run()
        self._resolve_spaces(capture)
        slot = capture.take_slot(episode)
        self._handoff.submit(self._publisher.episode_start, episode, seed, slot)

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
            self._handoff.submit(self._publisher.step, index, slot, obs_codec, act_codec, event,
                                 None, reset_info)
        else:  # a snapshot now: the env may reuse its arrays
            self._handoff.submit(self._publisher.step, index, slot, obs_codec, act_codec, event,
                                 encode_step(obs_codec, act_codec, event), reset_info)

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
        self._handoff.submit(self._publisher.episode_end, result, spec, leaves)

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
            self._publisher.run_end(result, error or failure)
            kafka = self._publisher.kafka
            if kafka is not None:  # the session end's flush, off the run's path
                self._handoff.submit(kafka.flush, kafka.settings.session_end_flush_timeout_s)
        finally:
            self._capture = None
            self._handoff.stop()
        if failure is not None and error is None:
            raise failure

    def _implicit_run(self) -> Capture:
        """A hook called outside a run: start one implicitly."""
        self.on_run_start(None)
        assert self._capture is not None
        return self._capture

    def _resolve_spaces(self, capture: Capture) -> None:
        """Compile the codecs once per run, from the caller's spaces or the env contract."""
        if capture.obs_codec is not None and capture.act_codec is not None:
            return
        contract = getattr(capture.context, "contract", None)
        obs_space, act_space = self._observation_space, self._action_space
        if contract is not None:
            if obs_space is None:
                obs_space = gym_space(getattr(contract, "observation_space", None))
            if act_space is None:
                act_space = gym_space(getattr(contract, "action_space", None))
        if obs_space is not None and capture.obs_codec is None:
            capture.obs_codec = LeafCodec(obs_space)
        if act_space is not None and capture.act_codec is None:
            capture.act_codec = LeafCodec(act_space)


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
