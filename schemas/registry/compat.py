"""Which fields make our schema unable to read what the registry holds (BACKWARD).

The registry answers compatible or not; an operator needs to know *which*
fields are the problem. These functions name them: for Avro by the
resolution rules (our schema reading data written with the registered one),
for Protobuf by field number (a number reused with another type or label).
"""

from __future__ import annotations

import re
from typing import Any

_PROMOTIONS = {
    ("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"),
    ("long", "double"), ("float", "double"), ("string", "bytes"), ("bytes", "string"),
}
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


class _Named:
    def __init__(self) -> None:
        self.types: dict[str, Any] = {}

    def collect(self, node: Any, namespace: str = "") -> None:
        if isinstance(node, list):
            for n in node:
                self.collect(n, namespace)
        elif isinstance(node, dict):
            kind = node.get("type")
            if kind in ("record", "enum", "fixed", "error"):
                ns = node.get("namespace", namespace)
                full = node["name"] if "." in node["name"] else f"{ns}.{node['name']}".strip(".")
                self.types[full] = node
                self.types.setdefault(node["name"].split(".")[-1], node)
                for f in node.get("fields", []):
                    self.collect(f["type"], ns)
            elif kind == "array":
                self.collect(node["items"], namespace)
            elif kind == "map":
                self.collect(node["values"], namespace)

    def resolve(self, node: Any) -> Any:
        if isinstance(node, str) and node not in _PRIMITIVES:
            return self.types.get(node, self.types.get(node.split(".")[-1], node))
        if isinstance(node, dict) and node.get("type") in _PRIMITIVES and len(node) == 1:
            return node["type"]
        return node


def _kind(node: Any) -> str:
    if isinstance(node, list):
        return "union"
    if isinstance(node, str):
        return node
    return str(node["type"])


def _show(node: Any) -> str:
    if isinstance(node, list):
        return "[" + ", ".join(_show(b) for b in node) + "]"
    if isinstance(node, dict):
        return str(node.get("name", node["type"]))
    return str(node)


def avro_incompatibilities(reader: dict[str, Any], writer: dict[str, Any]) -> list[str]:
    """Problems reading data written with `writer` using `reader`, by field path."""
    rn, wn = _Named(), _Named()
    rn.collect(reader)
    wn.collect(writer)
    out: list[str] = []
    _check(reader, writer, rn, wn, reader.get("name", ""), out, set())
    return out


def _check(r: Any, w: Any, rn: _Named, wn: _Named, path: str, out: list[str],
           seen: set[tuple[str, str]]) -> None:
    r, w = rn.resolve(r), wn.resolve(w)
    rk, wk = _kind(r), _kind(w)
    if wk == "union":
        for branch in w:
            _check(r, branch, rn, wn, path, out, seen)
        return
    if rk == "union":
        if not any(_fits(b, w, rn, wn) for b in r):
            out.append(f"{path}: registered type {_show(w)} is not one of {_show(r)}")
        else:
            match = next(b for b in r if _fits(b, w, rn, wn))
            _check(match, w, rn, wn, path, out, seen)
        return
    if rk != wk and (wk, rk) not in _PROMOTIONS:
        out.append(f"{path}: type changed from {_show(w)} (registered) to {_show(r)} (ours)")
        return
    if rk == "record":
        key = (r["name"], w["name"])
        if key in seen:
            return
        seen.add(key)
        wfields = {f["name"]: f for f in w["fields"]}
        for f in w["fields"]:
            for alias in f.get("aliases", []):
                wfields.setdefault(alias, f)
        for f in r["fields"]:
            src = wfields.get(f["name"]) or next(
                (wfields[a] for a in f.get("aliases", []) if a in wfields), None)
            sub = f"{path}.{f['name']}"
            if src is None:
                if "default" not in f:
                    out.append(f"{sub}: our field is not in the registered schema and has "
                               "no default")
                continue
            _check(f["type"], src["type"], rn, wn, sub, out, seen)
    elif rk == "enum":
        missing = [s for s in w["symbols"] if s not in r["symbols"]]
        if missing and "default" not in r:
            out.append(f"{path}: registered enum symbols {missing} are not in ours "
                       "(and ours has no default)")
    elif rk == "array":
        _check(r["items"], w["items"], rn, wn, f"{path}[]", out, seen)
    elif rk == "map":
        _check(r["values"], w["values"], rn, wn, f"{path}{{}}", out, seen)
    elif rk == "fixed" and r.get("size") != w.get("size"):
        out.append(f"{path}: fixed size changed from {w.get('size')} to {r.get('size')}")


def _fits(r: Any, w: Any, rn: _Named, wn: _Named) -> bool:
    r, w = rn.resolve(r), wn.resolve(w)
    rk, wk = _kind(r), _kind(w)
    if rk in ("record", "enum", "fixed") and rk == wk:
        return bool(r["name"].split(".")[-1] == w["name"].split(".")[-1])
    return rk == wk or (wk, rk) in _PROMOTIONS


_FIELD = re.compile(
    r"^\s*(?P<label>repeated\s+|optional\s+)?(?P<type>[\w.]+(?:\s*<[^>]+>)?)\s+(?P<name>\w+)"
    r"\s*=\s*(?P<num>\d+)", re.MULTILINE)


def _proto_fields(text: str, message: str) -> dict[int, tuple[str, str, str]]:
    m = re.search(r"\bmessage\s+" + re.escape(message) + r"\s*\{", text)
    if m is None:
        return {}
    depth, i = 1, m.end()
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    body = text[m.end():i - 1]
    body = re.sub(r"//[^\n]*", "", body)
    fields: dict[int, tuple[str, str, str]] = {}
    for f in _FIELD.finditer(body):
        if f["type"] in ("message", "enum", "oneof", "reserved"):
            continue
        fields[int(f["num"])] = ((f["label"] or "").strip(), f["type"], f["name"])
    return fields


def proto_incompatibilities(ours: str, registered: str, message: str) -> list[str]:
    """Field numbers of `message` whose type or label changed between the two texts."""
    mine, theirs = _proto_fields(ours, message), _proto_fields(registered, message)
    out = []
    for num, (label, typ, name) in sorted(mine.items()):
        old = theirs.get(num)
        if old is None:
            continue
        if old[1].split(".")[-1] != typ.split(".")[-1] or (old[0] == "repeated") != (
                label == "repeated"):
            out.append(f"{message}.{name} (field {num}): {' '.join(filter(None, old[:2]))} "
                       f"{old[2]} registered, {' '.join(filter(None, (label, typ)))} ours")
    return out
