"""Episode summary per env and model: the numbers an eval run is judged by.

Outcome statistics (success, reward, steps, timings) are taken over completed
episodes only: a running episode has no outcome yet and an abandoned one was
cut off by its session ending, so either would bias the means. Their counts
are shown next to them instead.
"""

from __future__ import annotations

from rlmesh_stream.consumers.analysis.reports.model import Column, Report
from rlmesh_stream.consumers.analysis.reports.store import Store, require_table
from rlmesh_stream.consumers.tables import EPISODES

_SQL = f"""
SELECT env_id, model_component_id,
       COUNT(*) AS episodes,
       COUNT(*) FILTER (WHERE status = 'completed') AS completed,
       COUNT(*) FILTER (WHERE status = 'abandoned') AS abandoned,
       COUNT(*) FILTER (WHERE status = 'running') AS running,
       AVG(CASE WHEN success THEN 1.0 ELSE 0.0 END)
           FILTER (WHERE status = 'completed' AND success IS NOT NULL) AS success_rate,
       COUNT(success) FILTER (WHERE status = 'completed') AS success_reported,
       AVG(cumulative_reward) FILTER (WHERE status = 'completed') AS mean_reward,
       STDDEV_SAMP(cumulative_reward) FILTER (WHERE status = 'completed') AS std_reward,
       AVG(step_count) FILTER (WHERE status = 'completed') AS mean_steps,
       AVG(step_ms) FILTER (WHERE status = 'completed') AS mean_step_ms
FROM {EPISODES.name}
GROUP BY env_id, model_component_id
ORDER BY env_id, model_component_id
"""

COLUMNS = [
    Column("env_id", "Env"),
    Column("model_component_id", "Model"),
    Column("episodes", "Episodes", "right", "int"),
    Column("completed", "Completed", "right", "int"),
    Column("abandoned", "Abandoned", "right", "int"),
    Column("running", "Running", "right", "int"),
    Column("success_rate", "Success", "right", "percent"),
    Column("mean_reward", "Mean reward", "right", "float"),
    Column("std_reward", "Std reward", "right", "float"),
    Column("mean_steps", "Mean steps", "right", "float"),
    Column("mean_step_ms", "Mean step ms", "right", "float"),
]


def episode_report(store: Store) -> Report:
    """One row per (env, model) with episode counts and outcome statistics."""
    require_table(store, EPISODES)
    rows = store.query(_SQL).dicts()
    notes = []
    if any(r["completed"] and not r["success_reported"] for r in rows):
        notes.append("Success is blank where the env reported no `is_success`/`success`/"
                     "`task_success` in its final step info.")
    return Report(
        name="episodes",
        title="Episodes per env and model",
        columns=COLUMNS,
        rows=rows,
        summary={
            "episodes": sum(int(r["episodes"]) for r in rows),
            "completed": sum(int(r["completed"]) for r in rows),
            "env/model pairs": len(rows),
        },
        notes=notes,
        empty_message="No episodes in the store yet.",
    )
