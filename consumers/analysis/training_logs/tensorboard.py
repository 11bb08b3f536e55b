"""Read the scalars of TensorBoard event files into training-log rows.

A path is a TensorBoard log when it is a directory (searched recursively for
`events.out.tfevents.*`, as TensorBoard does) or a single event file. Each
directory holding event files is one run, named by its path relative to the
given directory ("." for the directory itself), exactly as TensorBoard names
runs. Scalars are read with TensorBoard's own `EventAccumulator` (which also
drops points orphaned by a restarted trainer, as TensorBoard does), both
old-style `simple_value` summaries (tensorboardX, torch.utils.tensorboard,
SB3) and tensor summaries of the scalars plugin (tf.summary).

TensorBoard's reader stops silently at a damaged record (it is built to tail
files still being written), so every file is first read through its record
loader and the bytes of the records it yielded are checked against the file's
size: a truncated or corrupt file is refused, naming the file and the offset.

The eval files that `join --to-tensorboard` writes (suffix `.rlmesh-eval`) are
not training logs: a directory scan leaves them out, so joining a log
directory that holds an earlier join's eval curve reads only the training runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from rlmesh_stream.consumers.analysis.training_logs.table import (
    Point,
    TrainingLogError,
    rows_to_table,
)

EVENT_FILE_MARK = "tfevents"
EVAL_SUFFIX = ".rlmesh-eval"  # join's own eval files (writeback.TB_SUFFIX)
_RECORD_OVERHEAD = 16  # TFRecord framing: length (8), its CRC (4), data CRC (4)


def is_event_file(path: Path) -> bool:
    return path.is_file() and EVENT_FILE_MARK in path.name


def is_tensorboard_log(path: Path) -> bool:
    """True for a directory or an event file: what `--log` reads as TensorBoard."""
    return path.is_dir() or is_event_file(path)


def event_files(path: Path) -> list[Path]:
    """The event files of a log directory (recursively, without join's own eval files),
    or the one file given."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob(f"*{EVENT_FILE_MARK}*")
                  if p.is_file() and not p.name.endswith(EVAL_SUFFIX))


def check_complete(path: Path) -> None:
    """Refuse an event file that TensorBoard's record loader cannot read to its end."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader

    size = path.stat().st_size
    read = 0
    try:
        for record in RawEventFileLoader(str(path)).Load():
            read += len(record) + _RECORD_OVERHEAD
    except Exception as exc:  # the loader's own errors: unreadable file, bad framing
        raise TrainingLogError(f"cannot read TensorBoard event file {path}: {exc}") from exc
    if read != size:
        raise TrainingLogError(
            f"TensorBoard event file {path} is truncated or corrupt: its records end at "
            f"byte {read} of {size} (a file still being written ends mid-record; "
            "wait for the trainer to flush or close it)")


def _run_points(source: Path, run: str) -> Iterator[Point]:
    """The scalar points of a run directory (or of one event file) via EventAccumulator."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    acc = ea.EventAccumulator(str(source), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    for tag in tags[ea.SCALARS]:
        for e in acc.Scalars(tag):
            yield run, tag, int(e.step), float(e.wall_time), float(e.value)
    for tag in tags[ea.TENSORS]:
        if acc.SummaryMetadata(tag).plugin_data.plugin_name != "scalars":
            continue
        for t in acc.Tensors(tag):
            value = tensor_util.make_ndarray(t.tensor_proto)
            yield run, tag, int(t.step), float(t.wall_time), float(value.item())


def read_tensorboard(path: Path) -> pa.Table:
    """The scalars under `path` as rows (run, step, time, one column per tag)."""
    if not path.exists():
        raise TrainingLogError(f"training log {path} does not exist")
    files = event_files(path)
    if not files:
        raise TrainingLogError(
            f"no TensorBoard event files (events.out.tfevents.*) under {path}")
    for f in files:
        check_complete(f)
    sources: list[tuple[Path, str]] = []
    if path.is_file():
        sources.append((path, "."))
    for d in sorted({f.parent for f in files} if path.is_dir() else ()):
        run = d.relative_to(path).as_posix()
        if any(d.glob(f"*{EVENT_FILE_MARK}*{EVAL_SUFFIX}")):
            # an eval curve written into the training run's own directory: read the
            # training files one by one, leaving ours out
            sources.extend((f, run) for f in files if f.parent == d)
        else:
            sources.append((d, run))

    def points() -> Iterator[Point]:
        for source, run in sources:
            yield from _run_points(source, run)

    table = rows_to_table(points(), f"TensorBoard log {path}")
    if table.num_rows == 0:
        raise TrainingLogError(
            f"the TensorBoard event files under {path} hold no scalars "
            f"({len(files)} file(s) read)")
    return table
