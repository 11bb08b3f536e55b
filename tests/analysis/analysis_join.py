"""A join run over a test store, read back: the joined rows, the per-checkpoint summary
and the result, for the tests of the training-log formats to compare."""

from __future__ import annotations

from typing import Any

from rlmesh_stream.consumers.analysis.join import JoinResult, JoinSpec, aggregate, connect, run_join
from tests.analysis.analysis_training_logs import LOSS, REWARD


def join_rows(sink: str, spec: JoinSpec) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]],
                                               JoinResult]:
    """Joined rows (episode, run, log step, loss, reward) in order, the per-checkpoint
    summary, and the join's result."""
    con = connect(sink)
    try:
        result = run_join(con, spec)
        rows = con.execute(f"""
            SELECT episode_record_id, train_run, train_step, "train_{LOSS}", "train_{REWARD}"
            FROM joined ORDER BY ALL""").fetchall()
        return rows, aggregate(con, spec, result), result
    finally:
        con.close()
