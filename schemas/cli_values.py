"""The click types of the values typed on every command line: text, paths, numbers.

A command line can hold anything: an empty string, 5 000 characters, bytes that are not
UTF-8 (Python hands them on as lone surrogates), a newline or a NUL, a number past every
range (NaN, infinity, 10^20), a file where a directory is meant, a folder nobody may
write, or the path of a consumer's own state (a DuckDB store, an exported dataset, its
`.rlmesh-export` state). Each type here refuses what cannot work when the command line
is parsed, in one line naming the option (click's `Invalid value for '--x': ...`), before
anything is read, written or connected to, and without quoting a secret it was given
(the value of a `secret` option is never shown). Every option of every command takes one
of these types, a `click.Choice`, a flag, or a type of its own that checks as much
(`tests/cli/test_option_sweep.py` walks them all).

Light on purpose (click and the standard library): every command imports it before it
can print its help.
"""

from __future__ import annotations

import math
import os
import tempfile
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

MAX_TEXT_CHARS = 1000
"""The longest free-text value (an id, a name, a column, a filter, metadata): longer is
a pasting accident, and each is quoted in messages, keys and file names."""

MAX_NAME_BYTES = 255  # one path component (NAME_MAX of every Linux file system)
MAX_PATH_BYTES = 4095  # a whole path (PATH_MAX, without its NUL)

MAX_SECONDS = 1_000_000.0
"""The longest interval, timeout or window (11.6 days), and the highest rate per second:
past it a value is a typo, and near 10^10 s Python's own waits overflow."""

MAX_COUNT = 2**31 - 1
"""The largest count (episodes, sessions, lines, records): what an int32 reader holds."""

STATE_DIR = ".rlmesh-export"
"""An exported dataset's state directory (its manifest and lock: consumers/datasets/
manifest.py), defined here where the options that must stay out of it are checked."""

_DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of every DuckDB database file


def shown(value: str, limit: int = 60) -> str:
    """`value` as a message may quote it: repr'd (a control character or an undecodable
    byte escaped, so the message stays one line), cut to `limit` characters with its
    length said."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


def text_problem(value: str, *, allow_empty: bool = False, multiline: bool = False,
                 max_chars: int = MAX_TEXT_CHARS) -> str | None:
    """What makes `value` unusable as text, worded to follow the value; None if nothing."""
    if not value:
        return None if allow_empty else "is empty"
    if len(value) > max_chars:
        return f"is {len(value)} characters long (at most {max_chars})"
    if "\x00" in value:
        return "holds a NUL byte"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    for char in value:
        if unicodedata.category(char) == "Cc" and not (multiline and char in "\n\t"):
            return f"holds the control character {char!r}"
    return None


class Text(click.ParamType):
    """Free text: not empty (unless `allow_empty`), valid UTF-8, no control characters
    (newlines and tabs with `multiline`), at most `max_chars`; then `check`, whose
    ValueError is the message. A `secret`'s value is never quoted."""

    name = "text"

    def __init__(self, *, allow_empty: bool = False, multiline: bool = False,
                 max_chars: int = MAX_TEXT_CHARS, secret: bool = False,
                 check: Callable[[str], object] | None = None) -> None:
        self.allow_empty = allow_empty
        self.multiline = multiline
        self.max_chars = max_chars
        self.secret = secret
        self.check = check

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        problem = text_problem(value, allow_empty=self.allow_empty, multiline=self.multiline,
                               max_chars=self.max_chars)
        if problem is not None:
            self.fail(f"{'the value' if self.secret else shown(value)} {problem}", param, ctx)
        if self.check is not None and value:
            try:
                self.check(value)
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        return value


def path_problem(value: str) -> str | None:
    """What makes `value` a path no file system takes, worded to follow it; None if nothing."""
    problem = text_problem(value, max_chars=MAX_PATH_BYTES)
    if problem is not None:
        return problem
    if len(os.fsencode(value)) > MAX_PATH_BYTES:
        return f"is longer than a path may be ({MAX_PATH_BYTES} bytes)"
    longest = max(value.split(os.sep), key=lambda part: len(os.fsencode(part)))
    if len(os.fsencode(longest)) > MAX_NAME_BYTES:
        return (f"has a name of {len(os.fsencode(longest))} bytes (a file system allows "
                f"{MAX_NAME_BYTES})")
    return None


def is_duckdb_file(path: Path) -> bool:
    """Whether `path` is an existing DuckDB database file (by its magic bytes)."""
    try:
        with open(path, "rb") as file:
            return file.read(12)[8:12] == _DUCKDB_MAGIC
    except OSError:
        return False


def dataset_holding(path: Path) -> Path | None:
    """The exported dataset directory `path` is in or is (one holding `STATE_DIR`), if any."""
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop: no dataset found through it
        return None
    for folder in (resolved, *resolved.parents):
        if folder.name == STATE_DIR:
            return folder.parent
        if (folder / STATE_DIR).is_dir():
            return folder
    return None


def state_problem(path: Path, *, dataset: bool = False) -> str | None:
    """Whether writing `path` could destroy a consumer's state: a DuckDB store, anything in
    an exported dataset (its data files are its exporter's, its state the exporter's
    resume point). `dataset`: `path` is an export's own `--out`, which may be the dataset
    it resumes, but not inside another one. Worded to follow the path; None if nothing."""
    if STATE_DIR in path.parts:
        return (f"is inside an export's state directory ({STATE_DIR}), which only its "
                "exporter writes")
    if path.is_file() and is_duckdb_file(path):
        return ("is a DuckDB store (the consumers' tables): writing it would destroy them; "
                "name another file")
    holder = dataset_holding(path.parent if dataset else path)
    if holder is not None:
        return (f"is inside the exported dataset {str(holder)!r}, whose files are its "
                "exporter's: name a path outside it")
    return None


def _folder_problem(path: Path, *, directory: bool, parents: bool) -> str | None:
    """Whether `path` (a file, or a `directory`) can be created or written: its folder
    exists (or, for a directory or with `parents`, its nearest existing ancestor) and is a
    folder this process may write."""
    start = path if directory else path.parent
    existing = next((p for p in (start, *start.parents) if p.exists()), None)
    if existing is None:  # a relative path from a removed working directory
        return "cannot be created (no folder of it exists)"
    if not existing.is_dir():
        return f"cannot be created: {str(existing)!r} is a file, not a folder"
    if not (directory or parents) and existing != path.parent:
        return f"cannot be written: folder {str(path.parent)!r} does not exist"
    if path.exists() and not os.access(path, os.W_OK):
        return "cannot be written (permission denied)"
    try:  # permissions do not tell all (root; sysfs, read-only mounts): try it
        with tempfile.TemporaryFile(dir=existing):  # unnamed where the system can
            pass
    except OSError as exc:
        return f"cannot be written ({(exc.strerror or str(exc)).lower()} in {str(existing)!r})"
    return None


class PathValue(click.Path):
    """A `click.Path` (to a `pathlib.Path` unless `path_type` says otherwise) that first
    refuses what no file system takes (`path_problem`). An `output` is also checked before
    anything runs: its folder can be written (`parents`: a file's missing folders are
    created by the command), and it is not a consumer's state (`state_problem`;
    `dataset`: an export's own `--out`)."""

    def __init__(self, *, output: bool = False, dataset: bool = False, parents: bool = False,
                 path_type: type[Any] = Path, **kwargs: Any) -> None:
        super().__init__(path_type=path_type, **kwargs)
        self.output = output
        self.dataset = dataset
        self.parents = parents

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            problem = path_problem(value)
            if problem is not None:
                self.fail(f"{shown(value)} {problem}", param, ctx)
        converted = super().convert(value, param, ctx)
        if self.output:
            path = Path(os.fsdecode(converted))
            problem = (state_problem(path, dataset=self.dataset)
                       or _folder_problem(path, directory=not self.file_okay,
                                          parents=self.parents))
            if problem is not None:
                self.fail(f"{shown(str(path))} {problem}", param, ctx)
        return converted


def output_file(**kwargs: Any) -> PathValue:
    """A file a command writes (a report, an export, a manifest)."""
    return PathValue(output=True, dir_okay=False, **kwargs)


def output_dir(**kwargs: Any) -> PathValue:
    """A folder a command writes into (created if missing)."""
    return PathValue(output=True, file_okay=False, **kwargs)


class FiniteFloatRange(click.FloatRange):
    """A `click.FloatRange` that also refuses NaN and the infinities.

    A plain range lets them through: every comparison with NaN is false, and a range
    with no maximum has no bound for infinity to break. No interval, rate, timeout or
    score of ours can work with either.
    """

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


# The shared number types: a duration (or rate) that must be more than 0, or may be 0;
# a count from 1 or 0.
POSITIVE = FiniteFloatRange(min=0, min_open=True, max=MAX_SECONDS)
NON_NEGATIVE = FiniteFloatRange(min=0, max=MAX_SECONDS)
COUNT = click.IntRange(1, MAX_COUNT)
COUNT_OR_ZERO = click.IntRange(0, MAX_COUNT)
