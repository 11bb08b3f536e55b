"""Read the scalars of TensorBoard event files into training-log rows.

A path is a TensorBoard log when it is a directory (searched recursively for
`events.out.tfevents.*`, as TensorBoard does) or a single event file. Each
directory holding event files is one run, named by its path relative to the
given directory ("." for the directory itself), exactly as TensorBoard names
runs. Records are read with TensorBoard's own record loader
(`RawEventFileLoader`: TensorFlow's reader when TensorFlow is installed, else
TensorBoard's bundled one) and decoded as TensorBoard's `Event` protos; a
scalar is an old-style `simple_value` (tensorboardX, torch.utils.tensorboard,
SB3) or a tensor of the scalars plugin (tf.summary), as TensorBoard's own
scalar view reads them. A step logged again (a resumed run) keeps its latest
value.

TensorBoard's loader stops silently at a damaged record (it is built to tail
files still being written), so the bytes of the records it yielded are checked
against the file's size in the same pass: a truncated or corrupt file is
refused, naming the file and the offset. It also trusts each record's length
field and allocates that much before reading, so the lengths are walked first
(a seek per record): a length beyond the file's end is refused the same way.

The eval files that `join --to-tensorboard` writes (suffix `.rlmesh-eval`) are
not training logs: a directory scan leaves them out, so joining a log
directory that holds an earlier join's eval curve reads only the training runs.
"""

from __future__ import annotations

import struct
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
SCALARS_PLUGIN = "scalars"
_RECORD_OVERHEAD = 16  # TFRecord framing: length (8), its CRC (4), data CRC (4)
_LENGTH_SIZE = 8


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


def file_points(path: Path, run: str, plugins: dict[str, str]) -> Iterator[Point]:
    """The scalar points of one event file; `plugins` (tag -> plugin name) carries over
    between the files of a run, since a writer sends a tag's metadata once."""
    from google.protobuf.message import DecodeError
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2
    from tensorboard.util import tensor_util

    size = path.stat().st_size
    _check_framing(path, size)
    read = 0
    try:
        for record in RawEventFileLoader(str(path)).Load():
            read += len(record) + _RECORD_OVERHEAD
            event = event_pb2.Event.FromString(record)
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name:
                    plugins[value.tag] = value.metadata.plugin_data.plugin_name
                kind = value.WhichOneof("value")
                if kind == "simple_value":
                    number = value.simple_value
                elif kind == "tensor" and plugins.get(value.tag) == SCALARS_PLUGIN:
                    number = float(tensor_util.make_ndarray(value.tensor))
                else:
                    continue
                yield run, value.tag, int(event.step), float(event.wall_time), number
    except (OSError, DecodeError, ValueError, TypeError) as exc:
        raise TrainingLogError(f"cannot read TensorBoard event file {path} (record at byte "
                               f"{read}): {exc}") from exc
    if read != size:
        raise TrainingLogError(
            f"TensorBoard event file {path} is truncated or corrupt: its records end at "
            f"byte {read} of {size} (a file still being written ends mid-record; "
            "wait for the trainer to flush or close it)")


def _check_framing(path: Path, size: int) -> None:
    """Walk the record lengths, refusing a file whose records do not end at its end.

    TensorBoard's loader trusts a record's length field and allocates that many bytes
    before it reads them: a corrupt length of 2^40 is a MemoryError, 2^64-1 an
    OverflowError. Each length is checked against the bytes left in the file first.
    """
    offset, claimed = records_end(path, size)
    if offset != size:
        claim = f"; the record there claims {claimed} bytes" if claimed is not None else ""
        raise TrainingLogError(
            f"TensorBoard event file {path} is truncated or corrupt: its records end at "
            f"byte {offset} of {size} (a file still being written ends mid-record; "
            f"wait for the trainer to flush or close it){claim}")


def records_end(path: Path, size: int) -> tuple[int, int | None]:
    """The byte offset where the file's whole records end (by their length fields), and
    the length claimed by a record that runs past the file's end (None if none does)."""
    offset = 0
    with open(path, "rb") as file:
        while size - offset >= _LENGTH_SIZE:
            file.seek(offset)
            (length,) = struct.unpack("<Q", file.read(_LENGTH_SIZE))
            if length > size - offset - _RECORD_OVERHEAD:
                return offset, length
            offset += length + _RECORD_OVERHEAD
    return offset, None


def read_tensorboard(path: Path) -> pa.Table:
    """The scalars under `path` as rows (run, step, time, one column per tag)."""
    if not path.exists():
        raise TrainingLogError(f"training log {path} does not exist")
    files = event_files(path)
    if not files:
        raise TrainingLogError(
            f"no TensorBoard event files (events.out.tfevents.*) under {path}")
    runs = {f: f.parent.relative_to(path).as_posix() if path.is_dir() else "." for f in files}

    def points() -> Iterator[Point]:
        plugins: dict[str, dict[str, str]] = {}
        for f in files:
            yield from file_points(f, runs[f], plugins.setdefault(runs[f], {}))

    table = rows_to_table(points(), f"TensorBoard log {path}")
    if table.num_rows == 0:
        raise TrainingLogError(
            f"the TensorBoard event files under {path} hold no scalars "
            f"({len(files)} file(s) read)")
    return table
