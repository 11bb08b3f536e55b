"""Trajectory datasets from the stream: whole episodes as Minari or Parquet, exactly once.

`rlmesh-stream export trajectories` (export_cli.py) runs the consumers' runtime with
the dataset as its sink (export.py). The joiner (episodes.py, its data in
model.py; what it reads of each event, packed, in packed.py) assembles episodes from the
step, action, observation and episode events; a vector-env session's group steps are
split into lanes by groups.py and vector.py. The writers (writers.py for Parquet,
minari_writer.py for Minari with its values in minari_values.py, one dataset per env in
per_env.py) append the episodes in the chosen format, and the
manifest (manifest.py) commits offsets, state and the completeness certificate (certificate.py)
atomically with each batch. offline_rl.py loads a Minari dataset into d3rlpy and
TorchRL (`to_d3rlpy`, `to_torchrl`).
"""

# Here rather than in episodes.py, which uses it: the export command's option shows it as its
# default, and the command module imports nothing heavy before the extras are checked.
DEFAULT_MAX_HELD_STEPS = 1_000_000
"""Steps a running session's pending episodes may hold (episodes.py; a vector-env session's
lane steps, vector.py)."""
