"""Trajectory datasets from the stream: whole episodes as Minari or Parquet, exactly once.

`rlmesh-stream export trajectories` (cli.py) runs the consumers' runtime with
the dataset as its sink (export.py): the joiner (episodes.py) assembles
episodes from the step, action, observation and episode events, the writers
(writers.py) append them in the chosen format, and the manifest (manifest.py)
commits offsets, state and the completeness certificate with each batch.
"""
