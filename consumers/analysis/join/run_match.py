"""`--match EPISODE_COL=LOG_COL`: each episode only looks at the log rows of its own run,
as an equality condition of the ASOF join; shared by the as-of join and the step join."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from rlmesh_stream.consumers.analysis.join.spec import JoinResult
from rlmesh_stream.consumers.analysis.join.store import scalar
from rlmesh_stream.consumers.analysis.sql import q


@dataclass(frozen=True)
class RunMatch:
    """An episode column that must equal a log column (compared as text)."""

    episode_col: str
    log_col: str

    @property
    def episode_sql(self) -> str:
        return f"CAST(e.{q(self.episode_col)} AS VARCHAR)"

    @property
    def log_sql(self) -> str:
        return f"CAST(l.{q(self.log_col)} AS VARCHAR)"

    @property
    def on(self) -> str:
        """The ASOF join's equality, ahead of its inequality."""
        return f"{self.episode_sql} = {self.log_sql} AND "

    @property
    def partition(self) -> str:
        """The timeline's partition: one timeline per run."""
        return f"CAST({q(self.log_col)} AS VARCHAR), "

    def unknown(self, con: duckdb.DuckDBPyConnection, episodes: str, joinable: str,
                timeline: str) -> tuple[str, int]:
        """Why and how many `joinable` episodes name a run the timeline does not hold."""
        count = scalar(con, f"""
            SELECT COUNT(*) FROM {episodes} e WHERE {joinable} AND
                ({self.episode_sql} IS NULL OR {self.episode_sql} NOT IN
                    (SELECT {self.log_sql} FROM {timeline} l))""")
        return f"have a {self.episode_col} that is not in the log's {self.log_col!r} column", count


def count_early(con: duckdb.DuckDBPyConnection, result: JoinResult, match: RunMatch | None,
                early: int, *, episodes: str, joinable: str, timeline: str, before: str,
                first_row: str) -> None:
    """Say why `early` joinable episodes matched no row: with `match`, first those naming a
    run the timeline lacks, the rest `before` their run's first row; without, all of them
    `before` the timeline's first row (`first_row`)."""
    if match is None:
        result.unmatched[f"{before} ({first_row})"] = early
        return
    why, unknown = match.unknown(con, episodes, joinable, timeline)
    result.unmatched[why] = unknown
    result.unmatched[f"{before} of their {match.log_col}"] = early - unknown
