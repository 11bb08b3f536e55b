"""Runtime events for the tail tests, built field by field as the runtime would."""

from __future__ import annotations

from rlmesh_stream.schemas.contract.events import EpisodeCompletedEvent, RuntimeEnvContext

ROUTE = RuntimeEnvContext(env_id="CartPole-v1", env_component_id="env-0",
                          model_component_id="ppo", lane=None)


def completed(session: str, index: int, reward: float = 1.5) -> EpisodeCompletedEvent:
    return EpisodeCompletedEvent(
        session_id=session, route=ROUTE, episode_id=f"{session}-{index}",
        episode_record_id=f"ep-{index:06d}", episode_index=index, env_index=0,
        step_count=12, cumulative_reward=reward, terminated=True, truncated=False,
        duration_ms=40, final_info={"is_success": True}, success=True, seed=7,
        trial_index=index - 1, predict_ms=0.25, step_ms=0.5)
