"""The `episodes` view: the episodes builder's own projections, merged, then its abandon rule.

The partial rows are the builder's `EpisodesBuilder.projections` (the same column ->
field mapping the builder reads records with), so the two cannot drift. The builder's
abandon rule (`ABANDON_SQL`: an episode still `running` whose session ended or failed
is `abandoned`) follows as a join with the merged `episode_session_ends`.
"""

from __future__ import annotations

from rlmesh_stream.consumers.builders.episodes import EpisodesBuilder
from rlmesh_stream.consumers.flink.render import (
    FlinkView,
    merged_sql,
    partials_of,
    table_view,
)
from rlmesh_stream.consumers.tables import EPISODE_SESSION_ENDS, EPISODE_STATUSES, EPISODES
from rlmesh_stream.schemas.engines.flink import quote


def episodes_view() -> FlinkView:
    if EPISODES.column_by_name["status"].ranks != EPISODE_STATUSES:
        raise ValueError("the abandon rule below assumes the episode statuses")
    view = table_view(EPISODES, partials_of(EpisodesBuilder.projections, EPISODES))
    ends = merged_sql(EPISODE_SESSION_ENDS,
                      partials_of(EpisodesBuilder.projections, EPISODE_SESSION_ENDS))
    final = ",\n  ".join(
        "CASE WHEN m.`status` = 'running' AND e.`session_id` IS NOT NULL THEN 'abandoned' "
        "ELSE m.`status` END AS `status`" if c.name == "status" else f"m.{quote(c.name)}"
        for c in view.columns)
    query = (f"SELECT\n  {final}\nFROM (\n{view.query}\n) AS m\nLEFT JOIN (\n{ends}\n) AS e "
             "ON m.`session_id` = e.`session_id`")
    return FlinkView(view.name, view.columns, view.primary_key, query, view.mirrors,
                     view.differences)
