"""The reader schema an engine can declare: the contract's Avro schema minus what SQL cannot type.

SQL engines type a column once and for all, so two shapes of our contract have no
SQL type: a recursive record (`MetaMap`, whose values may be maps; `SpaceSpec`,
whose dict and tuple children are spaces) and a union of several non-null branches
(`SpaceSpec.spec`, a MetaMap value). Such a field is left out of the reader schema
and recorded as an `Omission` with its reason, so the DDL says so in a comment;
Avro schema resolution then skips it in every record, so no other column is
touched (never read as null). A record keeps every field it can type (`SpaceSpec`
keeps `shape` and `dtype`).

The pruned schema keeps the contract's record and enum names, so Avro resolution
matches it against the writer schema the registry holds by name and field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rlmesh_stream.schemas.contract.avro import load_schema, named_types
from rlmesh_stream.schemas.contract.topics import EventType
from rlmesh_stream.schemas.errors import RlmeshStreamError

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


@dataclass(frozen=True)
class Omission:
    """A field left out of the reader schema: its dotted path and why."""

    path: str
    reason: str


class Unrepresentable(RlmeshStreamError):
    """A type no SQL engine can declare; the message is the reason."""


@dataclass(frozen=True)
class ReaderSchema:
    """One event's pruned Avro schema and what was left out of it."""

    event_type: EventType
    schema: dict[str, Any]
    omitted: tuple[Omission, ...]

    def compact_json(self) -> str:
        """The schema as compact JSON without docs or our own properties (for DDL text)."""
        return json.dumps(_bare(self.schema), separators=(",", ":"), ensure_ascii=False)


_AVRO_KEYS = frozenset({"type", "name", "namespace", "fields", "items", "values", "symbols",
                        "default"})


def _bare(node: Any) -> Any:
    if isinstance(node, list):
        return [_bare(n) for n in node]
    if isinstance(node, dict):
        return {k: _bare(v) for k, v in node.items() if k in _AVRO_KEYS}
    return node


def reader_schema(event_type: EventType) -> ReaderSchema:
    """The event's schema with every field SQL cannot type left out (see the module doc)."""
    full = load_schema(event_type)
    pruner = _Pruner(named_types(full))
    pruned = pruner.record(full, path="", stack=())
    return ReaderSchema(event_type, pruned, tuple(pruner.omitted))


class _Pruner:
    def __init__(self, named: dict[str, Any]) -> None:
        self.named = named
        self.omitted: list[Omission] = []
        self.emitted: set[str] = set()  # named types already defined in the output

    def record(self, node: dict[str, Any], path: str, stack: tuple[str, ...]) -> dict[str, Any]:
        full = f"{node['namespace']}.{node['name']}"
        stack = (*stack, full)
        fields, omitted = [], []
        for fld in node["fields"]:
            where = f"{path}{fld['name']}"
            mark = len(self.omitted)
            try:
                fields.append({**fld, "type": self.type(fld["type"], f"{where}.", stack)})
            except Unrepresentable as exc:
                del self.omitted[mark:]  # the field's own inner omissions go with it
                omitted.append(Omission(where, str(exc)))
        if not fields:
            if self._reaches(full, node):
                raise Unrepresentable(f"{node['name']} is recursive (it may contain itself), "
                                      "which SQL types cannot declare")
            raise Unrepresentable(f"{node['name']} has no field SQL can type")
        self.omitted.extend(omitted)
        self.emitted.add(full)
        return {**node, "fields": fields}

    def type(self, node: Any, path: str, stack: tuple[str, ...]) -> Any:
        if isinstance(node, str):
            if node in _PRIMITIVES:
                return node
            if node in stack:
                raise Unrepresentable(f"{_short(node)} is recursive (it may contain itself), "
                                      "which SQL types cannot declare")
            if node in self.emitted:
                return node
            return self.type(self.named[node], path, stack)
        if isinstance(node, list):
            branches = [b for b in node if b != "null"]
            if len(branches) != 1:
                names = ", ".join(_type_name(b) for b in branches)
                again = [s for s in stack if self._reaches(s, branches)]
                why = (f" ({', '.join(_short(s) for s in again)} again inside)" if again else "")
                raise Unrepresentable(f"a union of {names}{why}, which no SQL column type "
                                      "can hold")
            return [*(["null"] if "null" in node else []),
                    self.type(branches[0], path, stack)]
        kind = node["type"]
        if kind == "record":
            return self.record(node, path, stack)
        if kind == "enum":
            self.emitted.add(f"{node['namespace']}.{node['name']}")
            return node
        if kind == "array":
            return {**node, "items": self.type(node["items"], path, stack)}
        if kind == "map":
            return {**node, "values": self.type(node["values"], path, stack)}
        raise Unrepresentable(f"Avro type {kind!r} has no SQL mapping here")

    def _reaches(self, target: str, node: Any, seen: frozenset[str] = frozenset()) -> bool:
        """Whether `node` refers to the named type `target` anywhere inside."""
        if isinstance(node, str):
            if node == target:
                return True
            if node in _PRIMITIVES or node in seen:
                return False
            return self._reaches(target, self.named[node], seen | {node})
        if isinstance(node, list):
            return any(self._reaches(target, b, seen) for b in node)
        kind = node["type"]
        if kind == "record":
            full = f"{node['namespace']}.{node['name']}"
            if full == target and seen:
                return True
            return any(self._reaches(target, f["type"], seen | {full}) for f in node["fields"])
        if kind == "array":
            return self._reaches(target, node["items"], seen)
        if kind == "map":
            return self._reaches(target, node["values"], seen)
        return False


def _short(full: str) -> str:
    return full.rsplit(".", 1)[-1]


def _type_name(node: Any) -> str:
    if isinstance(node, str):
        return _short(node)
    if isinstance(node, list):
        return "union"
    if node["type"] in ("record", "enum"):
        return str(node["name"])
    return str(node["type"])
