"""The values an engine should show for a decoded event, in Flink's JSON form.

Walks the reader schema (the contract minus the fields SQL cannot type) over the
project decoder's dataclasses: records by attribute (or protobuf field), enums by
symbol (a Python enum's name, a protobuf enum's number into the symbols), bytes
as base64, which is how Flink's JSON format writes BYTES.
"""

from __future__ import annotations

import base64
import enum
from datetime import UTC, datetime
from typing import Any

from rlmesh_stream.schemas.contract.avro import named_types
from rlmesh_stream.schemas.engines.reader import ReaderSchema


def expected_value(value: Any, node: Any, named: dict[str, Any], base64_bytes: bool = True
                   ) -> Any:
    """`value` as read through the reader-schema `node` (bytes base64 as in Flink's JSON,
    unless `base64_bytes` is false)."""
    def again(v: Any, n: Any) -> Any:
        return expected_value(v, n, named, base64_bytes)

    if isinstance(node, list):
        if value is None:
            return None
        return again(value, next(b for b in node if b != "null"))
    if isinstance(node, str):
        if node in named:
            return again(value, named[node])
        if node == "bytes" and base64_bytes:
            return base64.b64encode(value).decode()
        return value
    kind = node["type"]
    if kind == "record":
        return {f["name"]: again(_field(value, f["name"]), f["type"]) for f in node["fields"]}
    if kind == "enum":
        return value.name if isinstance(value, enum.Enum) else node["symbols"][value]
    if kind == "array":
        return [again(v, node["items"]) for v in value]
    if kind == "map":
        return {k: again(v, node["values"]) for k, v in value.items()}
    return value


def expected_row(reader: ReaderSchema, event: Any, base64_bytes: bool = True
                 ) -> dict[str, Any]:
    named = named_types(reader.schema)
    return {f["name"]: expected_value(getattr(event, f["name"]), f["type"], named,
                                      base64_bytes)
            for f in reader.schema["fields"]}


def flink_timestamp_ms(text: str) -> int:
    """Flink JSON's TIMESTAMP_LTZ text (`2026-12-03 17:12:55.3Z`) as epoch milliseconds."""
    stamp = datetime.strptime(text.rstrip("Z"), "%Y-%m-%d %H:%M:%S.%f" if "." in text
                              else "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    return round(stamp.timestamp() * 1000)


def _field(value: Any, name: str) -> Any:
    if isinstance(value, dict):
        return value[name]
    return getattr(value, name)
