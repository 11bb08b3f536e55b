"""The Avro schemas of the runtime events, one `.avsc` file per event.

The files are the contract. Types several events share (`RuntimeEnvContext`,
`MetaMap`, `SpaceSpec`, `Snapshot`, `Advisory`, `Leg`, `LogLevel`) live in
their own file and events refer to them by full name; `load_schema` inlines
each named type at its first use so the result is self-contained, which is
what the registry stores and what any Avro reader needs without our files.
"""

from __future__ import annotations

import copy
import functools
import json
from importlib import resources
from typing import Any

from rlmesh_stream.schemas.contract.topics import EventType

NAMESPACE = "rlmesh.runtime.v1"
SPACES_NAMESPACE = "rlmesh.spaces.v1"

_PRIMITIVES = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
)


def _read(name: str) -> dict[str, Any]:
    text = resources.files(__name__).joinpath(f"{name}.avsc").read_text(encoding="utf-8")
    return json.loads(text)  # type: ignore[no-any-return]


@functools.cache
def _file_of_name() -> dict[str, str]:
    """Full name of every named type defined at the top of a shared file -> file stem."""
    index: dict[str, str] = {}
    for entry in resources.files(__name__).iterdir():
        if entry.name.endswith(".avsc"):
            stem = entry.name[: -len(".avsc")]
            top = _read(stem)
            index[f"{top['namespace']}.{top['name']}"] = stem
    return index


def _inline(node: Any, defined: set[str], namespace: str) -> Any:
    """Copy of `node` with each not-yet-defined named reference replaced by its definition."""
    if isinstance(node, str):
        if node in _PRIMITIVES:
            return node
        full = node if "." in node else f"{namespace}.{node}"
        if full in defined:
            return full
        stem = _file_of_name().get(full)
        if stem is None:
            raise ValueError(
                f"Avro type {node!r} is defined in no schemas/contract/avro/*.avsc file")
        return _inline(_read(stem), defined, namespace)
    if isinstance(node, list):
        return [_inline(branch, defined, namespace) for branch in node]
    if isinstance(node, dict):
        kind = node["type"]
        out = dict(node)
        if kind in ("record", "enum", "fixed", "error"):
            ns = node.get("namespace", namespace)
            defined.add(f"{ns}.{node['name']}")
            if kind in ("record", "error"):
                out["fields"] = [
                    {**fld, "type": _inline(fld["type"], defined, ns)} for fld in node["fields"]
                ]
            return out
        if kind == "array":
            out["items"] = _inline(node["items"], defined, namespace)
        elif kind == "map":
            out["values"] = _inline(node["values"], defined, namespace)
        else:
            out["type"] = _inline(kind, defined, namespace)
        return out
    raise TypeError(f"not an Avro schema node: {node!r}")


@functools.cache
def _load(event_type: EventType) -> dict[str, Any]:
    return _inline(_read(event_type.event_class.__name__), set(), NAMESPACE)  # type: ignore[no-any-return]


def load_schema(event_type: EventType) -> dict[str, Any]:
    """The event's Avro schema, parsed and self-contained (a fresh copy: mutate freely)."""
    return copy.deepcopy(_load(event_type))


@functools.cache
def schema_text(event_type: EventType) -> str:
    """The self-contained schema as compact JSON: the text registered in the registry."""
    return json.dumps(_load(event_type), separators=(",", ":"), ensure_ascii=False)


__all__ = ["NAMESPACE", "SPACES_NAMESPACE", "load_schema", "named_types", "schema_text"]


def named_types(node: Any, into: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every record and enum defined inside a self-contained schema, by full name.

    A `load_schema` result defines each named type once and refers to it by name after;
    readers and writers walking the tree resolve those names through this table.
    """
    named: dict[str, Any] = {} if into is None else into
    if isinstance(node, list):
        for branch in node:
            named_types(branch, named)
    elif isinstance(node, dict):
        kind = node["type"]
        if kind in ("record", "enum"):
            named[f"{node['namespace']}.{node['name']}"] = node
            for fld in node.get("fields", []):
                named_types(fld["type"], named)
        elif kind == "array":
            named_types(node["items"], named)
        elif kind == "map":
            named_types(node["values"], named)
    return named
