"""A deterministic fleet simulator: runtime event streams that follow the runtime's semantics.

`simulate_fleet(hooks, sessions=..., lanes=..., episodes=..., seed=...)` drives
any object with the runtime callbacks (normally `KafkaRuntimeHooks`) with
the events N sessions of an L-lane vector env would produce (runtime-events.md §§
2-5), and returns a `Manifest` of what it emitted. The same seed gives
the same events and manifest (ids included); nothing depends on the clock.

Per session: connect/start events; a log after the first reset; each lane's
first `episode_started`; the reset observation; then per group step an
action, a step and an observation event, with per-lane vectors. Step numbers
follow runtime-events.md §3: an observation's `step` is the steps its (primary
lane's) episode had taken. About half the vector sessions use `NEXT_STEP`
autoreset (a lane that ended at step t rolls at t+1: `autoreset_roll`, no
trial ordinal, infos None; the roll's observation is the next episode's
reset observation); the others, and every lane-driven session, reset ended
lanes in place: the new episodes' `episode_started`, then a reset
observation (`is_reset`, step 0) naming only the lanes reset, "" elsewhere.
Window telemetry every `window_every` group steps, distinct relay advisories
once each, exactly one Session snapshot on every exit path, then
`session_ended`, or `session_failed` for the sessions picked to fail (their
open episodes are "aborted": never completed).

`episodes` is each session's budget of episode starts, as in rlmesh.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlmesh_stream.producer.bridge import RuntimeHooksLike
from rlmesh_stream.producer.leaves import LeafCodec
from rlmesh_stream.producer.manifest import (
    AdvisoryManifest,
    EpisodeManifest,
    Manifest,
    SessionManifest,
)
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.telemetry import Horizon, Kind, Metric, Row, Snapshot, Source

_ADVISORIES = [
    (ev.Leg.OBSERVATION, ev.AdvisorySeverity.CAUTION,
     "observation float64 -> float32: values were narrowed for the model"),
    (ev.Leg.ACTION, ev.AdvisorySeverity.INFO,
     "action int64 -> int32: lossless for this space"),
    (ev.Leg.OBSERVATION, ev.AdvisorySeverity.CAUTION,
     "observation key 'depth' missing; zeros were substituted"),
]
_WINDOW_SERIES = [
    ("env.step", "env", "rpc.total", Kind.DURATION),
    ("model.predict", "model", "rpc.total", Kind.DURATION),
    ("runner.round", "runner", "rpc.total", Kind.DURATION),
    ("env.step", "env", "response.bytes", Kind.BYTES),
]
_SESSION_SERIES = [
    *_WINDOW_SERIES,
    ("env.reset", "env", "rpc.total", Kind.DURATION),
    ("model.predict", "model", "held.episodes", Kind.COUNT),
]


def _uuid7_like(rng: random.Random) -> str:
    """A UUID with v7's version and variant bits, drawn from `rng` (deterministic)."""
    value = rng.getrandbits(128)
    value = (value & ~(0xF << 76)) | (0x7 << 76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    return str(uuid.UUID(int=value))


def _obs_space() -> Any:
    from gymnasium import spaces as gs

    high = np.array([4.8, np.inf, 0.42, np.inf], dtype=np.float32)
    return gs.Box(-high, high, dtype=np.float32)


def _act_space() -> Any:
    from gymnasium import spaces as gs

    return gs.Discrete(2)


@dataclass
class _Episode:
    manifest: EpisodeManifest
    target: int  # real steps before it ends
    truncate: bool  # ends by the step cap rather than a terminal state


class _Session:
    """One simulated route: an L-lane vector env driven to its episode budget (or a failure)."""

    def __init__(self, sim: _Fleet, index: int, lane: int | None = None) -> None:
        self.sim = sim
        rng = random.Random(sim.rng.getrandbits(64))
        self.rng = rng
        # A lane-driven session is one lane of a shared endpoint: a 1-lane env, route.lane set.
        lanes = self.n_lanes = sim.lanes if lane is None else 1
        self.np_rng = np.random.default_rng(rng.getrandbits(32))
        self.sid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        self.route = ev.RuntimeEnvContext(
            env_id=sim.env_id,
            env_component_id=f"env-{index % 3}" if lane is None else "env-shared",
            model_component_id=f"model-{index % 2}", lane=lane)
        # A lane-driven session's driver resets its one lane itself: no NEXT_STEP rolls.
        self.next_step = rng.random() < sim.next_step_fraction and lane is None
        self.fail_at: int | None = None
        # Some sessions fail midway; with three or more, the second always does.
        if rng.random() < sim.failure_rate or (index == 1 and sim.failure_rate > 0):
            self.fail_at = rng.randint(2, max(3, sim.episodes * 20 // lanes))
        n_adv = rng.choice((0, 0, 1, 2))
        self.advisories = rng.sample(_ADVISORIES, n_adv)
        self.advisory_at = rng.randint(1, 5)
        self.lanes: list[_Episode | None] = [None] * lanes
        self.rolling: list[_Episode | None] = [None] * lanes  # ended, rolls next step
        self.started = 0
        self.group_step = 0
        self.window_ticks = 0
        self.manifest = SessionManifest(
            session_id=self.sid, env_id=sim.env_id,
            env_component_id=self.route.env_component_id,
            model_component_id=self.route.model_component_id, lane=lane, num_envs=lanes,
            autoreset="next_step" if self.next_step else "driver", status="running", reason="",
            total_steps=0, group_steps=0, total_episodes=0,
            advisories=[AdvisoryManifest(leg.value, sev.value, msg)
                        for leg, sev, msg in self.advisories])
        self.done = False

    # -- helpers -------------------------------------------------------------------------------

    def _emit(self, name: str, event: Any) -> None:
        self.sim.emit(name, event)

    def _new_episode(self, lane: int, *, auto: bool) -> _Episode:
        rng = self.rng
        self.started += 1
        index = self.started
        seed = None if auto else rng.randint(0, 2**31 - 1)
        trial = None if (auto and self.next_step) else index - 1
        target = rng.randint(2, self.sim.max_episode_steps + 8)
        truncate = target >= self.sim.max_episode_steps
        episode_id = _uuid7_like(rng)
        m = EpisodeManifest(
            session_id=self.sid, episode_record_id=ev.episode_record_id(index),
            episode_id=episode_id,
            episode_index=index, env_index=lane, steps=0, reward=0.0, status="running",
            seed=seed, trial_index=trial, started_from_auto_reset=auto)
        self.sim.manifest.episodes.append(m)
        return _Episode(m, min(target, self.sim.max_episode_steps), truncate)

    def _started_event(self, ep: _Episode) -> ev.EpisodeStartedEvent:
        m = ep.manifest
        return ev.EpisodeStartedEvent(
            session_id=self.sid, route=self.route, episode_id=m.episode_id,
            episode_record_id=m.episode_record_id, episode_index=m.episode_index,
            env_index=m.env_index, started_from_auto_reset=m.started_from_auto_reset,
            seed=m.seed, trial_index=m.trial_index)

    def _ids(self) -> tuple[list[str], list[str]]:
        ids, records = [], []
        for lane, ep in enumerate(self.lanes):
            cur = ep or self.rolling[lane]
            ids.append(cur.manifest.episode_id if cur else "")
            records.append(cur.manifest.episode_record_id if cur else "")
        return ids, records

    def _reset_ids(self, lanes: list[int]) -> tuple[list[str], list[str]]:
        ids, records = [""] * self.n_lanes, [""] * self.n_lanes
        for lane in lanes:
            ep = self.lanes[lane]
            assert ep is not None
            ids[lane], records[lane] = ep.manifest.episode_id, ep.manifest.episode_record_id
        return ids, records

    def _primary(self) -> tuple[str, str, int]:
        ep = self.lanes[0] or self.rolling[0]
        if ep is None:
            return "", "", 0
        return ep.manifest.episode_id, ep.manifest.episode_record_id, ep.manifest.steps

    def _observation(self, is_reset: bool, infos: ev.MetaMap | None,
                     reset_lanes: list[int] | None = None) -> None:
        """A group observation; with `reset_lanes`, the reset observation of those lanes'
        new episodes (driver resets in place): only they are named, the first is primary."""
        sim = self.sim
        lanes = self.n_lanes
        obs = self.np_rng.standard_normal((lanes, 4)).astype(np.float32)
        leaves = [obs.tobytes()]
        if reset_lanes:
            ids, records = self._reset_ids(reset_lanes)
            eid, rid, step = ids[reset_lanes[0]], records[reset_lanes[0]], 0
        else:
            ids, records = self._ids()
            eid, rid, step = self._primary()
        self._emit("observation_emitted", ev.ObservationEmittedEvent(
            session_id=self.sid, route=self.route, episode_id=eid, episode_record_id=rid,
            episode_ids=ids, episode_record_ids=records, step=step,
            env_index=reset_lanes[0] if reset_lanes else 0,
            is_reset=is_reset, num_envs=lanes, observation_space=sim.obs_codec.spec,
            observation=leaves, raw_observation=leaves, infos=infos))

    def _snapshot(self, horizon: Horizon, ticks: int) -> None:
        series = _WINDOW_SERIES if horizon is Horizon.WINDOW else _SESSION_SERIES
        rows = []
        for op, component, metric, kind in series:
            base = self.rng.randint(1, 40) / 8.0
            rows.append(Row(source=Source(op=op, component=component),
                            metric=Metric(name=metric, kind=kind), count=max(ticks, 1),
                            avg=base, p50=base, p95=base * 2, p99=base * 3))
        if horizon is Horizon.WINDOW:
            self.manifest.window_snapshots += 1
            self.manifest.window_rows += len(rows)
        else:
            self.manifest.session_rows += len(rows)
        self._emit("on_telemetry", ev.TelemetrySnapshotEvent(
            session_id=self.sid, route=self.route,
            snapshot=Snapshot(horizon=horizon, rows=rows)))

    def _log(self, level: ev.LogLevel, message: str) -> None:
        self.manifest.logs += 1
        self._emit("log", ev.LogEvent(session_id=self.sid, route=self.route, level=level,
                                      message=message, source="rlmesh_runtime::driver"))

    # -- the session's life --------------------------------------------------------------------

    def start(self) -> None:
        sid, route = self.sid, self.route
        self._emit("env_connected", ev.EnvConnectedEvent(session_id=sid, route=route,
                                                         env_id=self.sim.env_id))
        self._emit("model_connected", ev.ModelConnectedEvent(session_id=sid, route=route))
        self._emit("session_started", ev.SessionStartedEvent(session_id=sid, route=route,
                                                             env_id=self.sim.env_id))
        self._log(ev.LogLevel.INFO, f"reset {self.n_lanes} lanes")
        for lane in range(self.n_lanes):
            if self.started < self.sim.episodes:
                self.lanes[lane] = self._new_episode(lane, auto=False)
        for ep in self.lanes:
            if ep is not None:
                self._emit("episode_started", self._started_event(ep))
        self._observation(True, {"reset": True})
        if all(ep is None for ep in self.lanes):
            self._finish(failed=False)

    def tick(self) -> None:
        """One group step of every lane."""
        if self.fail_at is not None and self.group_step >= self.fail_at:
            self._finish(failed=True)
            return
        sim = self.sim
        lanes = self.n_lanes
        rewards = [0.0] * lanes
        terminated = [False] * lanes
        truncated = [False] * lanes
        rolls = [self.rolling[i] is not None for i in range(lanes)]
        ids, records = self._ids()
        eid, rid, step = self._primary()
        actions = self.np_rng.integers(0, 2, size=lanes, dtype=np.int64)
        leaves = [actions.tobytes()]
        self._emit("action_received", ev.ActionReceivedEvent(
            session_id=self.sid, route=self.route, episode_id=eid, episode_record_id=rid,
            episode_ids=ids, episode_record_ids=records, step=step, env_index=0,
            action_space=sim.act_codec.spec, action=leaves, raw_action=leaves))
        ended: list[int] = []
        for lane, ep in enumerate(self.lanes):
            if ep is None or rolls[lane]:
                continue
            reward = self.rng.randint(0, 4) / 4.0
            rewards[lane] = reward
            ep.manifest.steps += 1
            ep.manifest.reward += reward
            self.manifest.total_steps += 1
            if ep.manifest.steps >= ep.target:
                terminated[lane] = not ep.truncate
                truncated[lane] = ep.truncate
                ended.append(lane)
        any_roll = any(rolls)
        self._emit("step_completed", ev.StepCompletedEvent(
            session_id=self.sid, route=self.route, episode_id=eid, episode_record_id=rid,
            step=step, env_index=0, rewards=rewards,
            infos=None if any_roll else {"group_step": self.group_step},
            terminated=terminated, truncated=truncated, autoreset_roll=rolls,
            predict_ms=0.125 * (1 + self.group_step % 4), step_ms=0.25))
        self.group_step += 1
        self.manifest.group_steps += 1
        self.window_ticks += 1
        self._observation(False, None)
        reset = [lane for lane in ended if self._complete(lane)]
        if reset:
            self._observation(True, {"reset": True}, reset)
        for lane in range(lanes):
            if rolls[lane]:  # the roll was the new episode's reset observation
                self.rolling[lane] = None
                if self.started < sim.episodes:
                    ep = self._new_episode(lane, auto=True)
                    self.lanes[lane] = ep
                    self._emit("episode_started", self._started_event(ep))
        if self.advisories and self.group_step == self.advisory_at:
            for leg, severity, message in self.advisories:
                self._emit("relay_advisory", ev.RelayAdvisoryEvent(
                    session_id=self.sid, route=self.route, leg=leg,
                    advisory=ev.Advisory(severity=severity, message=message)))
        if self.window_ticks >= sim.window_every:
            self._snapshot(Horizon.WINDOW, self.window_ticks)
            self.window_ticks = 0
        if all(ep is None for ep in self.lanes) and all(r is None for r in self.rolling):
            self._finish(failed=False)

    def _complete(self, lane: int) -> bool:
        """End the lane's episode; True when the driver reset the lane in place."""
        ep = self.lanes[lane]
        assert ep is not None
        m = ep.manifest
        m.status = "truncated" if ep.truncate else "terminated"
        success = self.rng.choice((True, False, None))
        m.success = success
        self.manifest.total_episodes += 1
        self._emit("episode_completed", ev.EpisodeCompletedEvent(
            session_id=self.sid, route=self.route, episode_id=m.episode_id,
            episode_record_id=m.episode_record_id, episode_index=m.episode_index,
            env_index=lane, step_count=m.steps, cumulative_reward=m.reward,
            terminated=not ep.truncate, truncated=ep.truncate, duration_ms=3 * m.steps,
            final_info=None if success is None else {"is_success": success},
            success=success, seed=m.seed, trial_index=m.trial_index,
            predict_ms=0.25, step_ms=0.25))
        self.lanes[lane] = None
        if self.next_step:
            self.rolling[lane] = ep
        elif self.started < self.sim.episodes:
            new = self._new_episode(lane, auto=False)
            self.lanes[lane] = new
            self._emit("episode_started", self._started_event(new))
            return True
        return False

    def _finish(self, *, failed: bool) -> None:
        if self.window_ticks and not failed:
            self._snapshot(Horizon.WINDOW, self.window_ticks)
        self._snapshot(Horizon.SESSION, self.group_step)
        if failed:
            for ep in self.lanes:
                if ep is not None:
                    ep.manifest.status = "aborted"
            self._log(ev.LogLevel.ERROR, "env step failed: simulated crash")
            reason = "EnvironmentException: simulated env crash"
            self.manifest.status, self.manifest.reason = "failed", reason
            self._emit("session_failed", ev.SessionFailedEvent(
                session_id=self.sid, route=self.route, reason=reason))
        else:
            self.manifest.status, self.manifest.reason = "ended", "completed"
            self._emit("session_ended", ev.SessionEndedEvent(
                session_id=self.sid, route=self.route, reason="completed",
                total_steps=self.manifest.total_steps,
                total_episodes=self.manifest.total_episodes))
        self.done = True


class _Fleet:
    def __init__(self, hooks: RuntimeHooksLike, *, sessions: int, lanes: int, episodes: int,
                 seed: int, rate: float | None, failure_rate: float, next_step_fraction: float,
                 window_every: int, max_episode_steps: int, env_id: str,
                 lane_driven: int = 0) -> None:
        if sessions < 0 or lanes < 1 or episodes < 0 or lane_driven < 0:
            raise ValueError("sessions >= 0, lanes >= 1, episodes >= 0 and lane_driven >= 0 "
                             "are required")
        self.hooks = hooks
        self.rng = random.Random(seed)
        self.lanes = lanes
        self.episodes = episodes
        self.rate = rate
        self.failure_rate = failure_rate
        self.next_step_fraction = next_step_fraction
        self.window_every = window_every
        self.max_episode_steps = max_episode_steps
        self.env_id = env_id
        self.obs_codec = LeafCodec(_obs_space())  # SpaceSpecs built once, shared
        self.act_codec = LeafCodec(_act_space())
        self.manifest = Manifest(seed=seed)
        self.sessions = [_Session(self, i) for i in range(sessions)]
        self.sessions += [_Session(self, sessions + k, lane=k) for k in range(lane_driven)]
        self.manifest.sessions = [s.manifest for s in self.sessions]
        self._emitted = 0
        self._t0 = time.monotonic()

    def emit(self, name: str, event: Any) -> None:
        getattr(self.hooks, name)(event)
        key = "telemetry_snapshot" if name == "on_telemetry" else name
        counts = self.manifest.event_counts
        counts[key] = counts.get(key, 0) + 1
        self._emitted += 1
        if self.rate:
            ahead = self._emitted / self.rate - (time.monotonic() - self._t0)
            if ahead > 0.002:
                time.sleep(ahead)

    def run(self) -> Manifest:
        for session in self.sessions:
            session.start()
        active = [s for s in self.sessions if not s.done]
        while active:
            for session in active:
                session.tick()
            active = [s for s in active if not s.done]
        return self.manifest


def simulate_fleet(
    hooks: RuntimeHooksLike,
    *,
    sessions: int = 4,
    lanes: int = 2,
    episodes: int = 3,
    seed: int = 0,
    rate: float | None = None,
    failure_rate: float = 0.15,
    next_step_fraction: float = 0.5,
    window_every: int = 25,
    max_episode_steps: int = 40,
    env_id: str = "sim/CartPole-v1",
    lane_driven: int = 0,
) -> Manifest:
    """Drive `hooks` with a simulated fleet; return the manifest of what was emitted.

    Deterministic for a seed. `rate` (events/s) paces emission; None runs flat out.
    `lane_driven` adds that many lane-driven sessions after the `sessions` vector-env
    ones: one session per lane of one shared endpoint (`route.lane` 0, 1, ...; one lane
    each), as the runtime runs a lane-driven env (runtime-events.md §2).
    """
    return _Fleet(hooks, sessions=sessions, lanes=lanes, episodes=episodes, seed=seed,
                  rate=rate, failure_rate=failure_rate, next_step_fraction=next_step_fraction,
                  window_every=window_every, max_episode_steps=max_episode_steps,
                  env_id=env_id, lane_driven=lane_driven).run()


class WaitingForRoom:
    """Hooks that wait while the hook's backlog is half full: a load generator's (`simulate`,
    the tests' fleets).

    The backlog holds records Kafka cannot take yet (topics still being created on a fresh
    prefix, an outage) up to `held_max_events` (10 000), then a hook drops: a rollout must
    not stall. A load generator can: every `CHECK_EVERY` events it waits for the backlog to
    drain below half (a fresh prefix under 155 000 events dropped 3 573 before), until the
    hook's own topic wait delivers or fails what it holds.
    """

    CHECK_EVERY = 256  # stats() takes the ledger's lock: not on every event

    def __init__(self, hooks: Any) -> None:
        self._hooks = hooks
        self._room = max(hooks.settings.held_max_events // 2, 1)
        self._calls: dict[str, Any] = {}
        self._count = 0

    def __getattr__(self, name: str) -> Any:
        call = self._calls.get(name)
        if call is None:
            target = getattr(self._hooks, name)

            def call(event: Any) -> Any:
                self._count += 1
                if not self._count % self.CHECK_EVERY:
                    while self._hooks.stats().spooled > self._room:
                        time.sleep(0.01)
                return target(event)

            self._calls[name] = call
        return call
