"""The as-of join against a brute-force oracle, on generated timelines.

The oracle states the rule directly: an episode belongs to the log row with
the latest time at or before its start (the highest step among rows sharing
that time); an episode before every log row belongs to none.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlmesh_stream.consumers.analysis.join import JoinError, JoinSpec, connect, run_join
from tests.analysis.analysis_stores import at, episode, insert, make_store

_counter = itertools.count()


def oracle(log: list[tuple[int, int]], start: int) -> str | None:
    live = [(t, step) for t, step in log if t <= start]
    return f"c{max(live)[1]}" if live else None


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    log_times=st.lists(st.integers(0, 100), min_size=1, max_size=8),
    starts=st.lists(st.integers(-20, 120), min_size=1, max_size=10),
)
def test_asof_join_matches_the_rule(tmp_path: Path, log_times: list[int],
                                    starts: list[int]) -> None:
    case = tmp_path / f"case{next(_counter)}"
    case.mkdir()
    log = [(t, 100 * (i + 1)) for i, t in enumerate(log_times)]  # steps unique
    con = make_store(case / "s.duckdb")
    insert(con, "episodes", [episode("s", i + 1, started_at=at(t)) for i, t in enumerate(starts)])
    con.close()
    path = case / "log.jsonl"
    path.write_text("".join(json.dumps({"step": step, "time": at(t).isoformat(),
                                        "checkpoint": f"c{step}", "loss": 1.0}) + "\n"
                            for t, step in log))
    expected = {f"ep-{i + 1:06d}": oracle(log, t) for i, t in enumerate(starts)}
    matched = {k: v for k, v in expected.items() if v is not None}
    db = connect(f"duckdb://{case / 's.duckdb'}")
    try:
        if not matched:
            with pytest.raises(JoinError, match="no episode matched"):
                run_join(db, JoinSpec("asof", path))
            return
        result = run_join(db, JoinSpec("asof", path))
        got = dict(db.execute("SELECT episode_record_id, train_checkpoint FROM joined")
                   .fetchall())
    finally:
        db.close()
    assert got == matched
    assert result.episodes - result.matched == len(expected) - len(matched)
