"""What a join is asked (`JoinSpec`, `LogColumns`), what it answers (`JoinResult`), and
its one error (`JoinError`): the values every step of the join passes around."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rlmesh_stream.schemas.errors import RlmeshStreamError

Mode = Literal["key", "asof"]
EpisodeTime = Literal["started_at", "completed_at"]
LOG_FORMATS = ("jsonl", "csv", "parquet")
TRAIN_PREFIX = "train_"
"""Log columns appear in the joined table as `train_<name>`, so they cannot
collide with an episode column of the same name."""


class JoinError(RlmeshStreamError):
    """The join cannot be done as asked; the message says why and what to change."""


@dataclass(frozen=True)
class LogColumns:
    """Names of the training log's columns the join needs (configurable per log)."""

    step: str = "step"
    time: str = "time"
    checkpoint: str = "checkpoint"
    metric: str | None = "loss"


@dataclass(frozen=True)
class JoinSpec:
    mode: Mode
    log: Path | None  # None: the log is the MLflow run(s) below
    columns: LogColumns = LogColumns()
    log_format: str | None = None  # inferred from the file suffix when None
    episode_key: str = "model_component_id"
    episode_time: EpisodeTime = "started_at"
    log_timezone: str | None = None
    epoch_unit: str = "s"
    # as-of only: (episode column, log column) that must be equal, e.g. each actor
    # follows its own training run: ("model_component_id", "run")
    asof_match: tuple[str, str] | None = None
    # key only: a regex whose first group (or group named `step`) is the training step
    # in the episode key, for logs indexed by step rather than by checkpoint name
    checkpoint_step: str | None = None
    mlflow_runs: tuple[str, ...] = ()
    mlflow_tracking_uri: str | None = None

    @property
    def log_name(self) -> str:
        """How messages name the log."""
        if self.log is not None:
            return self.log.name
        return "MLflow run " + ", ".join(self.mlflow_runs)


@dataclass
class JoinResult:
    """Counts of the join and, for the episodes left out, why."""

    mode: Mode
    episodes: int
    matched: int
    unmatched: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    group_column: str = ""  # the joined column the aggregate groups by
    step_column: str = ""  # the joined column with each checkpoint's training step
    group_run: str = ""  # with a step group: the joined run column that also tells them apart
    log_columns: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = f"{self.matched} of {self.episodes} episodes matched a training-log row"
        why = "; ".join(f"{n} {reason}" for reason, n in self.unmatched.items() if n)
        if why:
            text += f" ({why})"
        return text
