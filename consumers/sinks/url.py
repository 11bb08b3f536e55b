"""Every `--sink` URL is read and opened here: by `consume`, `report`, `join` and the demo.

One set of rules for everyone, so a URL that one command accepts the others accept
too, and every way a URL can be wrong becomes one `SinkError` whose message names
the URL and what to change (the CLIs print it as one `Error:` line):

- `duckdb:///abs/path.duckdb` or `duckdb://relative/path.duckdb`: a DuckDB file.
  A missing path (`duckdb://`), `:memory:`, a path no file system takes or inside an
  export's `.rlmesh-export`, a directory, a missing folder, a file that is not a DuckDB
  database (an empty one too), a file another process holds the write lock on, and a
  file that cannot be written are refused before anything is consumed into them.
- `postgresql://user@host/db` (or `postgres://`): a PostgreSQL database; a server
  that cannot be reached is one line naming the URL without its password.
- anything else (`mysql://...`, a bare path) is refused, naming the two forms, as is a
  URL that is no text (empty, a control character, not UTF-8, over 4 KiB).

The drivers are imported only when a URL of their kind is opened, so the module
costs nothing where neither DuckDB nor psycopg is installed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import click

from rlmesh_stream.schemas.cli_values import MAX_PATH_BYTES, STATE_DIR, path_problem, text_problem
from rlmesh_stream.schemas.cli_values import shown as quoted
from rlmesh_stream.schemas.connection.redact import redact_secrets, redact_url
from rlmesh_stream.schemas.errors import RlmeshStreamError

if TYPE_CHECKING:
    import duckdb
    import psycopg

DEFAULT_SINK = f"duckdb://{Path.cwd() / 'rlmesh.duckdb'}"
"""The store every command uses unless told otherwise: `rlmesh.duckdb` in the working
directory (spelled out absolute, since `duckdb:///x` names the absolute path `/x`)."""

FORMS = "duckdb:///abs/path.duckdb, duckdb://relative/path.duckdb or postgresql://user@host/db"
_DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of every DuckDB database file
_POSTGRES_SCHEMES = ("postgresql", "postgres")


class SinkError(RlmeshStreamError):
    """A sink URL that cannot be used; the message names it and says what to change."""


class SinkUnavailable(SinkError):
    """A store that answered before is away (a server restarting, a failover): the writer
    retries with back-off (`transient`), then stops saying so."""

    transient = True


@dataclass(frozen=True)
class SinkURL:
    """A parsed `--sink`: a DuckDB file (`path`) or a PostgreSQL DSN (`url`)."""

    url: str
    kind: Literal["duckdb", "postgresql"]
    path: Path | None = None

    @property
    def shown(self) -> str:
        """The URL as it may appear in a message: without its password."""
        return redact_url(self.url)

    @property
    def is_postgres(self) -> bool:
        return self.kind == "postgresql"


def parse_sink_url(url: str) -> SinkURL:
    """The sink `url` names; SinkError for anything but the two forms (see module doc)."""
    shown = redact_url(url)
    problem = text_problem(url, max_chars=MAX_PATH_BYTES + len("duckdb://"))
    if problem is not None:
        raise SinkError(f"sink {quoted(shown)} {problem}")
    if url.startswith("duckdb://"):
        rest = url[len("duckdb://"):]
        if not rest:
            raise SinkError(f"sink {shown!r} names no file: write duckdb:///abs/path.duckdb "
                            "(an in-memory store would lose everything it was given)")
        if rest == ":memory:":
            raise SinkError(f"sink {shown!r}: an in-memory store would lose everything it "
                            "was given; name a file (duckdb:///abs/path.duckdb)")
        problem = path_problem(rest)
        if problem is not None:
            raise SinkError(f"sink {quoted(shown)}: the path {problem}")
        if STATE_DIR in Path(rest).parts:
            raise SinkError(f"sink {shown!r} is inside an export's state directory "
                            f"({STATE_DIR}), which only its exporter writes: name a file "
                            "elsewhere")
        return SinkURL(url, "duckdb", Path(rest))
    scheme = urlsplit(url).scheme if "://" in url else ""
    if scheme in _POSTGRES_SCHEMES:
        return SinkURL(url, "postgresql")
    if scheme:
        raise SinkError(f"sink {shown!r}: {scheme}:// is not supported; use {FORMS}")
    raise SinkError(f"sink {shown!r} is not a URL; use {FORMS}")


def as_sink_url(sink: SinkURL | str) -> SinkURL:
    """`sink` as a SinkURL: a URL string is parsed (SinkError if it is neither form)."""
    return sink if isinstance(sink, SinkURL) else parse_sink_url(sink)


class SinkURLType(click.ParamType):
    """`--sink` as a click type: the URL is parsed once, on the command line, into a SinkURL.

    A URL of neither form fails the command like a store that cannot be opened (one `Error:`
    line naming the URL, exit 1), so every bad `--sink` looks the same to a user and a script.
    """

    name = "url"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> SinkURL:
        try:
            return as_sink_url(value)
        except SinkError as exc:
            raise click.ClickException(str(exc)) from None


def check_duckdb_file(path: Path, *, must_exist: bool) -> None:
    """Refuse, before DuckDB sees it, a path that cannot be (or become) a DuckDB store."""
    if path.is_dir():
        raise SinkError(f"{path} is a directory, not a DuckDB file: name a file inside it")
    if not path.exists():
        if must_exist:
            raise SinkError(f"no DuckDB store at {path} (has `rlmesh-stream consume` run?)")
        if not path.parent.is_dir():
            raise SinkError(f"cannot create {path}: folder {path.parent} does not exist")
        return
    try:
        with open(path, "rb") as file:
            head = file.read(12)
    except OSError as exc:
        raise SinkError(f"cannot read {path}: {exc.strerror}") from exc
    if not head:
        raise SinkError(f"{path} is an empty file, not a DuckDB database: remove it, or "
                        "name a new file for the store to be created")
    if head[8:12] != _DUCKDB_MAGIC:
        raise SinkError(f"{path} is not a DuckDB database file: name a new file, or an "
                        "existing store")


def duckdb_error(path: Path, exc: Exception, *, read_only: bool) -> SinkError:
    """One line for DuckDB's refusal to open or attach `path`."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "Could not set lock" in text or "Conflicting lock" in text:
        holder = text.split("Conflicting lock is held in", 1)[-1].split(". See also")[0]
        return SinkError(
            f"{path} is in use by another process ({holder.strip()}): DuckDB allows one "
            "writing process per file; stop it, point this command at a copy, or use "
            "PostgreSQL for several processes")
    if "not a valid DuckDB database" in text:
        return SinkError(f"{path} is not a DuckDB database file")
    if "Permission denied" in text or "Operation not permitted" in text:
        return SinkError(f"cannot {'read' if read_only else 'write'} {path}: permission "
                         "denied (a read-only or immutable file?)")
    if "Read-only file system" in text:
        return SinkError(f"cannot write {path}: it is on a read-only file system")
    return SinkError(f"cannot open {path}: {text}")


def connect_duckdb(path: Path, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A connection to the DuckDB file `path`, after `check_duckdb_file`."""
    import duckdb

    check_duckdb_file(path, must_exist=read_only)
    try:
        return duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as exc:
        raise duckdb_error(path, exc, read_only=read_only) from exc


def attach_duckdb(con: duckdb.DuckDBPyConnection, path: Path, alias: str, *,
                  read_only: bool) -> None:
    """ATTACH the DuckDB file `path` (which must exist) to `con` as `alias`."""
    import duckdb

    check_duckdb_file(path, must_exist=True)
    options = " (READ_ONLY)" if read_only else ""
    literal = str(path).replace("'", "''")
    try:
        con.execute(f"ATTACH '{literal}' AS {alias}{options}")
    except duckdb.Error as exc:
        raise duckdb_error(path, exc, read_only=read_only) from exc


def connect_postgres(url: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """A connection to the PostgreSQL database `url` names; SinkError if it cannot be had."""
    import psycopg

    kwargs.setdefault("connect_timeout", 10)
    try:
        return psycopg.connect(url, **kwargs)
    except psycopg.Error as exc:
        reason = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
        raise SinkError(redact_secrets(f"cannot connect to {url}: {reason}", url)) from exc


def sink_option(help_text: str = f"Store URL: {FORMS}.") -> Callable[[Any], Any]:
    """The `--sink` option every command that reads or writes the tables takes: a SinkURL."""
    return click.option("--sink", type=SinkURLType(), envvar="RLMESH_STREAM_SINK",
                        default=DEFAULT_SINK, show_default=True, show_envvar=True,
                        help=help_text)
