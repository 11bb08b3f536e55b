"""Training logs where RL trainers keep them: TensorBoard event files and MLflow runs.

Readers turn a source into one Arrow table the join reads like a CSV log (`run`,
`step`, `time`, one column per metric); writers put the join's per-checkpoint eval
summary back into the same tool, next to the training curves. Each module imports
its library lazily, so `join` over CSV needs neither TensorBoard nor MLflow.
"""

from __future__ import annotations

from rlmesh_stream.consumers.analysis.training_logs.table import (
    RESERVED,
    TrainingLogError,
    rows_to_table,
)

__all__ = ["RESERVED", "TrainingLogError", "rows_to_table"]
