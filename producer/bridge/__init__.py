"""`rlmesh_bridge`: the rlmesh Python SDK's `RunHooks` turned into runtime events.

`rlmesh.run(model, env, hooks=rlmesh_bridge(hooks, env_id=..., model_component_id=...))`
publishes, for one run, the events the Rust runtime's driver would: the
connect/start events, episode started/completed with the run's seeds and
trial ordinals, per step an action, a step and an observation event with
leaves encoded per runtime-events.md §7 (the SpaceSpec derived once from the env's
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
Step numbers follow runtime-events.md §3: an observation's `step` is the number of
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

Where each part lives: `run_hooks` (`RlmeshBridge`: the callbacks on rlmesh's thread),
`slots` (each episode's lane slot), `env_capture` (the wrappers that see the env as it
ran, and its spec), `publishing` (the publishing thread: the events built, step numbers,
the hooks called), `values` (ids, info maps and leaves as the events carry them).
"""

from __future__ import annotations

from rlmesh_stream.producer.bridge.publishing import ENV_SPEC_INFO, RuntimeHooksLike
from rlmesh_stream.producer.bridge.run_hooks import RlmeshBridge, rlmesh_bridge
from rlmesh_stream.producer.bridge.values import to_meta, uuid7

__all__ = ["ENV_SPEC_INFO", "RlmeshBridge", "RuntimeHooksLike", "rlmesh_bridge", "to_meta", "uuid7"]
