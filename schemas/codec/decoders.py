"""Which reader decodes an Avro record of one of our events, and why: the one place the
choice is made (docs/contract.md, "Decoding").

Three readers, one per case:

- `GENERATED`: the writer schema is ours (same parsing canonical form): Python generated
  from our `.avsc` reads the bytes straight into the dataclasses (`avro_fastread`).
- `PYTHON_PROJECTION`: as GENERATED, for a packed builder that wants a few fields of each
  record: a projection generated in Python (`avro_fastread.compile_projection`).
- `FASTAVRO`: any other writer schema (another version, another producer): fastavro
  resolves it to ours (`avro_reader`), once `avro_guard` has checked the payload.

A projection reader in C was tried and dropped: end to end it changed nothing a consumer
run shows (the sink sets the pace: 615 000 events 5.79 s with it, 5.98 s without), and it
needed binary wheels per platform.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import fastavro

from rlmesh_stream.schemas.contract.avro import load_schema
from rlmesh_stream.schemas.contract.topics import EventType


class Reader(enum.Enum):
    GENERATED = "generated reader"
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
    return DecoderChoice(Reader.PYTHON_PROJECTION, "the writer schema is ours, a packed "
                         "builder reads a few fields")


def _canonical(parsed: Any) -> str:
    return str(fastavro.schema.to_parsing_canonical_form(parsed))


_OURS: dict[EventType, str] = {}


def _is_ours(event_type: EventType, writer: Any, named: dict[str, Any] | None) -> bool:
    ours = _OURS.get(event_type)
    if ours is None:
        ours = _OURS[event_type] = _canonical(fastavro.parse_schema(load_schema(event_type)))
    return _canonical(fastavro.parse_schema(writer, named_schemas=named)) == ours
