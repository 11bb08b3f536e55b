"""The contract's value checks, walked slowly over an event to name what is wrong.

The encoders' fast paths only notice *that* a value cannot be carried; this
module says *which*: event, dotted field path and value, in a `ContractError`.
It is derived from the Avro schema (types, `rust_type` integer widths,
`lane_aligned` vector groups), so both wire formats enforce the same contract:
an event valid here encodes losslessly in Avro and in Protobuf.
"""

from __future__ import annotations

import math
from typing import Any

from rlmesh_stream.schemas.contract import bindings as bd
from rlmesh_stream.schemas.contract import events
from rlmesh_stream.schemas.contract.avro import load_schema, named_types
from rlmesh_stream.schemas.contract.errors import ContractError
from rlmesh_stream.schemas.contract.topics import EventType
from rlmesh_stream.schemas.errors import RlmeshStreamError

MAX_META_DEPTH = 32
"""Dicts/lists nested inside a MetaMap, at most. rlmesh's MetaMap is protobuf, and
protobuf parsers (upb, prost) refuse more than 100 nested messages; each level
costs up to 3 (entry, MetaValue, MetaMap), so deeper maps could be written but
not read back by every consumer. Both formats refuse them."""


class _Bad(RlmeshStreamError):
    def __init__(self, path: str, value: object, reason: str) -> None:
        super().__init__(path, value, reason)
        self.path, self.value, self.reason = path, value, reason


def _check_str(path: str, v: object) -> None:
    if not isinstance(v, str):
        raise _Bad(path, v, f"expected str, got {type(v).__name__}")
    if "\x00" in v:
        raise _Bad(path, v, "contains U+0000 (NUL), which no event string may hold "
                            "(PostgreSQL text cannot store it)")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _Bad(path, v, f"not encodable as UTF-8 ({exc.reason} at index {exc.start}: "
                            "a lone surrogate?)") from None


def _check_meta(path: str, v: object, depth: int = 0) -> None:
    if isinstance(v, (dict, list)) and depth > MAX_META_DEPTH:
        raise _Bad(path, v, f"MetaMap nested deeper than {MAX_META_DEPTH} levels (protobuf "
                            "readers stop at 100 nested messages, 3 per level)")
    if isinstance(v, dict):
        for k, item in v.items():
            if not isinstance(k, str):
                raise _Bad(f"{path}[{k!r}]", k, f"MetaMap key must be str, got {type(k).__name__}")
            _check_str(f"{path}[{k!r}] (key)", k)
            _check_meta(f"{path}[{k!r}]", item, depth + 1)
    elif isinstance(v, list):
        for i, item in enumerate(v):
            _check_meta(f"{path}[{i}]", item, depth + 1)
    elif isinstance(v, str):
        _check_str(path, v)
    elif isinstance(v, bool):
        return
    elif isinstance(v, int):
        if not bd.RUST_INT_RANGES["i64"][0] <= v <= bd.RUST_INT_RANGES["i64"][1]:
            raise _Bad(path, v, "MetaMap integer outside i64 (MetaValue.integer is int64)")
    elif isinstance(v, (float, bytes, bytearray, memoryview)):
        return
    else:
        raise _Bad(path, v, f"unsupported MetaMap value type {type(v).__name__} "
                            "(int, float, str, bool, bytes, list or dict)")


class _Walker:
    def __init__(self) -> None:
        self.named: dict[str, Any] = {}

    def resolve(self, t: Any) -> Any:
        if isinstance(t, dict) and t["type"] in ("record", "enum"):
            self.named[f"{t['namespace']}.{t['name']}"] = t
            return t
        if isinstance(t, str) and t in self.named:
            return self.named[t]
        return t

    def record(self, node: dict[str, Any], obj: object, path: str) -> None:
        full = f"{node['namespace']}.{node['name']}"
        if full == bd.META_MAP:
            if not isinstance(obj, dict):
                raise _Bad(path, obj, f"MetaMap must be a dict, got {type(obj).__name__}")
            _check_meta(path, obj)
            named_types(node, self.named)
            return
        if full == bd.SPACE_SPEC:
            if not isinstance(obj, events.SpaceSpec):  # its protobuf module, when first used
                raise _Bad(path, obj,
                           f"expected rlmesh.spaces.v1.SpaceSpec, got {type(obj).__name__}")
            named_types(node, self.named)
            return
        cls = bd.RECORD_CLASSES.get(full)
        if cls is not None and not isinstance(obj, cls):
            raise _Bad(path, obj, f"expected {cls.__name__}, got {type(obj).__name__}")
        for f in node["fields"]:
            sub = f"{path}.{f['name']}" if path else f["name"]
            self.value(f["type"], getattr(obj, f["name"]), sub, f.get("rust_type"))
        for group in node.get("lane_aligned", []):
            lens = {g: len(getattr(obj, g)) for g in group}
            if len(set(lens.values())) > 1:
                first = group[0]
                for g in group[1:]:
                    if lens[g] != lens[first]:
                        sub = f"{path}.{g}" if path else g
                        raise _Bad(sub, getattr(obj, g),
                                   f"length {lens[g]} disagrees with {first} (length "
                                   f"{lens[first]}): lane-aligned vectors must match")

    def value(self, t: Any, v: object, path: str, rust: str | None) -> None:
        t = self.resolve(t)
        if isinstance(t, list):
            if v is None:
                if "null" not in t:
                    raise _Bad(path, v, "must not be None")
                return
            self.value(next(b for b in t if b != "null"), v, path, rust)
            return
        kind = t if isinstance(t, str) else t["type"]
        if v is None:
            raise _Bad(path, v, "must not be None")
        if kind == "string":
            _check_str(path, v)
        elif kind == "long":
            if isinstance(v, bool) or not isinstance(v, int):
                raise _Bad(path, v, f"expected int, got {type(v).__name__}")
            lo, hi = bd.RUST_INT_RANGES[rust or "i64"]
            if not lo <= v <= hi:
                extra = " (an Avro long holds at most 2^63-1)" if rust == "u64" else ""
                raise _Bad(path, v, f"out of range for Rust {rust or 'i64'}: "
                                    f"must be within {lo}..{hi}{extra}")
        elif kind == "double":
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _Bad(path, v, f"expected float, got {type(v).__name__}")
            if isinstance(v, int) and not math.isfinite(float(v)):
                raise _Bad(path, v, "int too large for a double")
        elif kind == "boolean":
            if not isinstance(v, bool):
                raise _Bad(path, v, f"expected bool, got {type(v).__name__}")
        elif kind == "bytes":
            if not isinstance(v, (bytes, bytearray, memoryview)):
                raise _Bad(path, v, f"expected bytes, got {type(v).__name__}")
        elif kind == "enum":
            cls = bd.ENUM_CLASSES[f"{t['namespace']}.{t['name']}"]
            if not isinstance(v, cls):
                raise _Bad(path, v, f"expected {cls.__name__}, got {type(v).__name__}")
        elif kind == "array":
            if not isinstance(v, (list, tuple)):
                raise _Bad(path, v, f"expected list, got {type(v).__name__}")
            for i, item in enumerate(v):
                self.value(t["items"], item, f"{path}[{i}]", None)
        elif kind == "record":
            self.record(t, v, path)
        else:  # pragma: no cover - the schemas use no other type
            raise _Bad(path, v, f"unsupported Avro type {kind}")


def diagnose(event: object) -> ContractError | None:
    """The first contract violation in `event` as a ContractError, or None if it is valid."""
    name = type(event).__name__
    try:
        et = EventType.of(event)  # type: ignore[arg-type]
    except TypeError:
        return ContractError(name, "<event>", event, "not a runtime event type")
    schema = load_schema(et)
    try:
        _Walker().record(schema, event, "")
    except _Bad as bad:
        return ContractError(name, bad.path, bad.value, bad.reason)
    return None


def validate(event: object) -> None:
    """Raise ContractError naming event, field and value if `event` breaks the contract."""
    err = diagnose(event)
    if err is not None:
        raise err


__all__ = ["diagnose", "validate"]
