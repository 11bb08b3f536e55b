"""The check of a payload written with a foreign writer schema, before fastavro reads it.

Why: records whose writer schema is not ours (another version, another producer: see
`decoders.decoder_for`) are read by fastavro, whose compiled reader recurses on the C
stack without a limit. One record of 15 KB nesting 5 000 MetaLists, under a compatible
v2 of a subject, killed every consumer with SIGSEGV, on every restart. Our own readers
refuse such records; this walk gives the foreign path the same bounds: it reads the
payload against the writer schema without building anything, and refuses what no reader
should be handed (nesting deeper than our contract allows, varints outside Avro's 64-bit
`long`, an `int` outside 32 bits, counts, lengths, union branches and enum indexes that
do not fit). Only then does fastavro resolve the record to our schema.
"""

from __future__ import annotations

from typing import Any

from rlmesh_stream.schemas.codec.schema_walk import SchemaWalk, kind
from rlmesh_stream.schemas.codec.zigzag import Malformed, read_long
from rlmesh_stream.schemas.contract.validate import MAX_META_DEPTH

MAX_NESTING = 2 * MAX_META_DEPTH + 16
"""Records, arrays and maps one inside another, at most: each MetaMap or MetaList level
is two (the record and its map or array), and an event's own records a few more."""

MAX_ZERO_WIDTH_ITEMS = 1 << 20  # items of a type that takes no bytes (null), per block
_WIDTH = {"float": 4, "double": 8}
_INT32 = (-(2**31), 2**31 - 1)


class PayloadGuard(SchemaWalk):
    """Checks payloads of one writer schema (as fastavro parses it)."""

    def __init__(self, writer: Any) -> None:
        super().__init__()
        if isinstance(writer, dict):
            self.named.update(writer.get("__named_schemas", {}))
        self.writer = writer

    def end_of(self, b: bytes, p: int) -> int:
        """Where the record at `p` ends; Malformed (or IndexError: cut short) if it is not
        one the readers may be handed."""
        return self._value(self.writer, b, p, 0)

    def _value(self, t: Any, b: bytes, p: int, depth: int) -> int:
        t = self.define(t)
        what = kind(t)
        if what in ("record", "error", "array", "map"):
            if depth >= MAX_NESTING:
                raise Malformed(f"nested deeper than {MAX_NESTING} records, arrays and maps")
            depth += 1
        if what == "union":
            i, p = read_long(b, p)
            if not 0 <= i < len(t):
                raise Malformed(f"union branch {i} of {len(t)}")
            return self._value(t[i], b, p, depth)
        if isinstance(t, dict) and what not in ("record", "error", "array", "map", "enum",
                                                "fixed"):
            return self._value(what, b, p, depth)  # a primitive with a logical type
        if what in ("record", "error"):
            for f in t["fields"]:
                p = self._value(f["type"], b, p, depth)
            return p
        if what in ("array", "map"):
            return self._blocks(t, b, p, depth)
        return self._scalar(t, what, b, p)

    def _blocks(self, t: dict[str, Any], b: bytes, p: int, depth: int) -> int:
        items = t["items"] if t["type"] == "array" else t["values"]
        while True:
            n, p = read_long(b, p)
            if n == 0:
                return p
            if n < 0:
                n = -n
                size, p = read_long(b, p)
                if size < 0:
                    raise Malformed(f"block size {size}")
            limit = MAX_ZERO_WIDTH_ITEMS if self.define(items) == "null" else len(b) - p
            if n > limit:
                raise Malformed(f"block of {n} items with {len(b) - p} bytes left")
            for _ in range(n):
                if t["type"] == "map":
                    p = self._scalar("string", "string", b, p)
                p = self._value(items, b, p, depth)

    def _scalar(self, t: Any, what: str, b: bytes, p: int) -> int:
        if what == "null":
            return p
        if what == "boolean":
            if b[p] > 1:
                raise Malformed("boolean byte not 0/1")
            return p + 1
        if what in ("int", "long", "enum"):
            v, p = read_long(b, p)
            if what == "int" and not _INT32[0] <= v <= _INT32[1]:
                raise Malformed(f"int {v} outside 32 bits")
            if what == "enum" and not 0 <= v < len(t["symbols"]):
                raise Malformed(f"enum index {v} of {len(t['symbols'])}")
            return p
        if what in ("bytes", "string"):
            n, p = read_long(b, p)
            width = n
            if what == "string" and n >= 0 and 0 in b[p:p + n]:
                raise Malformed("NUL in a string (no event string holds U+0000)")
        elif what == "fixed":
            width = t["size"]
        elif what in _WIDTH:
            width = _WIDTH[what]
        else:
            raise Malformed(f"unsupported Avro type {what}")
        if width < 0 or p + width > len(b):
            raise Malformed(f"{what} of {width} bytes with {len(b) - p} left")
        return p + width
