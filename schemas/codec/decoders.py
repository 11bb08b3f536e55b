"""Which reader decodes an Avro record of one of our events, and why: the one place the
choice is made (docs/contract.md, "Decoding").

Four readers, one per case:

- `GENERATED`: the writer schema is ours (same parsing canonical form): Python generated
  from our `.avsc` reads the bytes straight into the dataclasses (`avro_fastread`).
- `C_PROJECTION`: as GENERATED, for a packed builder that wants a few fields of each
  record, and the C extension `_avro_project` was built at install (`avro_native`).
- `PYTHON_PROJECTION`: the same projection, generated in Python (`avro_fastread`): where
  the extension was not built (no C compiler), or `RLMESH_STREAM_PURE_PYTHON=1`.
- `FASTAVRO`: any other writer schema (another version, another producer): fastavro
  resolves it to ours (`avro_reader`), once `avro_guard` has checked the payload.

The C extension is optional, so installed copies differ: `decoder_for` says which reader
runs and why, and the pure-Python readers stay complete (tested against the C one).
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import Any

import fastavro

from rlmesh_stream.schemas.contract.avro import load_schema
from rlmesh_stream.schemas.contract.topics import EventType

PURE_PYTHON_ENV = "RLMESH_STREAM_PURE_PYTHON"


class Reader(enum.Enum):
    GENERATED = "generated reader"
    C_PROJECTION = "C projection"
    PYTHON_PROJECTION = "Python projection"
    FASTAVRO = "fastavro"


@dataclass(frozen=True)
class DecoderChoice:
    reader: Reader
    why: str

    def __str__(self) -> str:
        return f"{self.reader.value}: {self.why}"


def decoder_for(event_type: EventType, writer_schema: Any = None, *,
                named_schemas: dict[str, Any] | None = None, projection: bool = False,
                generated: bool = True) -> DecoderChoice:
    """The reader of records of `event_type` written with `writer_schema` (raw or parsed
    by fastavro; None: ours), whole events or, `projection`, a packed builder's fields.
    `generated=False` asks for fastavro whatever the writer (the benchmarks' baseline)."""
    if not generated:
        return DecoderChoice(Reader.FASTAVRO, "asked for (generated=False)")
    if writer_schema is not None and not _is_ours(event_type, writer_schema, named_schemas):
        return DecoderChoice(Reader.FASTAVRO, "the writer schema is not ours (another "
                             "version or producer): fastavro resolves it to ours, after "
                             "avro_guard checks the payload")
    if not projection:
        return DecoderChoice(Reader.GENERATED, "the writer schema is ours")
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return DecoderChoice(Reader.PYTHON_PROJECTION, f"{PURE_PYTHON_ENV}=1")
    from rlmesh_stream.schemas.codec import avro_native

    if avro_native.available():
        return DecoderChoice(Reader.C_PROJECTION, "the writer schema is ours and the C "
                             "extension is built")
    return DecoderChoice(Reader.PYTHON_PROJECTION, "the C extension was not built at "
                         "install (no C compiler)")


def _canonical(parsed: Any) -> str:
    return str(fastavro.schema.to_parsing_canonical_form(parsed))


_OURS: dict[EventType, str] = {}


def _is_ours(event_type: EventType, writer: Any, named: dict[str, Any] | None) -> bool:
    ours = _OURS.get(event_type)
    if ours is None:
        ours = _OURS[event_type] = _canonical(fastavro.parse_schema(load_schema(event_type)))
    return _canonical(fastavro.parse_schema(writer, named_schemas=named)) == ours
