"""A small parser of the Rust seed (`pub struct` / `pub enum` definitions) and the
expected shape of each Rust type in our three renderings: Python, Avro, Protobuf.

Conformance tests diff the seed against the schemas with `mismatches_*`; a new
seed file is therefore a one-file swap away from a checked diff.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
SEED_PATH = REPO_ROOT.parent / "shared" / "seed" / "rlmesh-runtime-hook-events.rs.txt"


@dataclass(frozen=True)
class RustType:
    name: str  # last path segment: String, Option, Vec, MetaMap, ...
    args: tuple[RustType, ...] = ()

    def __str__(self) -> str:
        return self.name + (f"<{', '.join(map(str, self.args))}>" if self.args else "")


@dataclass(frozen=True)
class RustStruct:
    name: str
    fields: tuple[tuple[str, RustType], ...]


@dataclass(frozen=True)
class RustEnum:
    name: str
    variants: tuple[str, ...]


_ITEM = re.compile(r"pub\s+(struct|enum)\s+(\w+)\s*\{(.*?)\n\}", re.DOTALL)
_FIELD = re.compile(r"pub\s+(\w+)\s*:\s*([^,]+?)\s*,\s*$", re.MULTILINE)


def parse_type(text: str) -> RustType:
    text = text.strip()
    m = re.fullmatch(r"([\w:]+)\s*(?:<(.*)>)?", text, re.DOTALL)
    if m is None:
        raise ValueError(f"cannot parse Rust type {text!r}")
    name = m[1].split("::")[-1]
    args: list[RustType] = []
    if m[2]:
        depth, start = 0, 0
        for i, ch in enumerate(m[2]):
            depth += ch == "<"
            depth -= ch == ">"
            if ch == "," and depth == 0:
                args.append(parse_type(m[2][start:i]))
                start = i + 1
        args.append(parse_type(m[2][start:]))
    return RustType(name, tuple(args))


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", text)


def parse(text: str) -> tuple[dict[str, RustStruct], dict[str, RustEnum]]:
    structs: dict[str, RustStruct] = {}
    enums: dict[str, RustEnum] = {}
    for kind, name, body in _ITEM.findall(_strip_comments(text)):
        if kind == "struct":
            fields = tuple((f, parse_type(t)) for f, t in _FIELD.findall(body))
            structs[name] = RustStruct(name, fields)
        else:
            variants = tuple(v.strip() for v in body.split(",") if v.strip())
            enums[name] = RustEnum(name, variants)
    return structs, enums


def load_seed() -> tuple[dict[str, RustStruct], dict[str, RustEnum]]:
    return parse(SEED_PATH.read_text(encoding="utf-8"))


INTS = {"i32", "i64", "u32", "u64"}


# ---------------------------------------------------------------- Python

def python_annotation(t: RustType) -> str:
    if t.name == "String":
        return "str"
    if t.name in INTS:
        return "int"
    if t.name == "f64":
        return "float"
    if t.name == "bool":
        return "bool"
    if t.name == "Bytes":
        return "bytes"
    if t.name == "Option":
        return f"{python_annotation(t.args[0])} | None"
    if t.name == "Vec":
        return f"list[{python_annotation(t.args[0])}]"
    if t.name == "Arc":
        return python_annotation(t.args[0])
    return t.name


def mismatches_python(struct: RustStruct, cls: Any) -> list[str]:
    if cls is None:
        return [f"{struct.name}: no Python class"]
    out = []
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    want_names = [n for n, _ in struct.fields]
    if names != want_names:
        out.append(f"{struct.name}: Python fields {names} != Rust {want_names}")
    hints = {f.name: f.type for f in fields}
    for name, rtype in struct.fields:
        if name not in hints:
            continue
        want = python_annotation(rtype)
        if hints[name] != want:
            out.append(f"{struct.name}.{name}: Python {hints[name]} != {want} (Rust {rtype})")
        f = next(f for f in fields if f.name == name)
        optional = rtype.name == "Option"
        if optional != (f.default is None):
            out.append(f"{struct.name}.{name}: Python default {f.default!r}, Rust {rtype}")
    return out


# ---------------------------------------------------------------- Avro

def _avro_named(schema: dict[str, Any]) -> dict[str, Any]:
    named: dict[str, Any] = {}

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for n in node:
                walk(n)
        elif isinstance(node, dict):
            if node["type"] in ("record", "enum"):
                named[node["name"]] = node
                for f in node.get("fields", []):
                    walk(f["type"])
            elif node["type"] == "array":
                walk(node["items"])
            elif node["type"] == "map":
                walk(node["values"])

    walk(schema)
    return named


def _avro_matches(t: RustType, avro: Any, field: dict[str, Any], named: dict[str, Any],
                  structs: dict[str, RustStruct], enums: dict[str, RustEnum],
                  where: str, out: list[str]) -> None:
    if isinstance(avro, str) and avro.split(".")[-1] in named:
        avro = named[avro.split(".")[-1]]
    shown = avro if isinstance(avro, str) else avro.get("type") if isinstance(avro, dict) else avro
    if t.name == "Option":
        if not (isinstance(avro, list) and len(avro) == 2 and avro[0] == "null"):
            out.append(f"{where}: Avro {shown} is not a union with null first (Rust {t})")
            return
        if "default" not in field or field["default"] is not None:
            out.append(f"{where}: optional Avro field has no null default")
        _avro_matches(t.args[0], avro[1], field, named, structs, enums, where, out)
        return
    if t.name == "Arc":
        _avro_matches(t.args[0], avro, field, named, structs, enums, where, out)
        return
    if t.name == "Vec":
        if not (isinstance(avro, dict) and avro["type"] == "array"):
            out.append(f"{where}: Avro {shown} is not an array (Rust {t})")
            return
        _avro_matches(t.args[0], avro["items"], {}, named, structs, enums, where + "[]", out)
        return
    prim = {"String": "string", "f64": "double", "bool": "boolean", "Bytes": "bytes"}
    if t.name in prim or t.name in INTS:
        want = prim.get(t.name, "long")
        if avro != want:
            out.append(f"{where}: Avro {shown} != {want} (Rust {t})")
        elif t.name in INTS and field.get("rust_type") != t.name:
            out.append(f"{where}: Avro rust_type {field.get('rust_type')} != {t.name}")
        return
    if not isinstance(avro, dict) or avro.get("name") != t.name:
        out.append(f"{where}: Avro {shown} is not the named type {t.name}")
        return
    if t.name in enums:
        want_symbols = [v.upper() for v in enums[t.name].variants]
        kept = [s for s in avro.get("symbols", []) if s in want_symbols]
        if avro["type"] != "enum" or kept != want_symbols:
            out.append(f"{where}: Avro enum {avro.get('symbols')} lacks Rust variants "
                       f"{enums[t.name].variants}")
    elif t.name in structs:
        out.extend(mismatches_avro(structs[t.name], avro, named, structs, enums))


def mismatches_avro(struct: RustStruct, record: dict[str, Any] | None, named: dict[str, Any],
                    structs: dict[str, RustStruct], enums: dict[str, RustEnum]) -> list[str]:
    if record is None:
        return [f"{struct.name}: no Avro record"]
    named = {**_avro_named(record), **named}
    out = []
    if record.get("name") != struct.name:
        out.append(f"{struct.name}: Avro record is named {record.get('name')}")
    fields = {f["name"]: f for f in record["fields"]}
    names = [f["name"] for f in record["fields"]]
    want = [n for n, _ in struct.fields]
    if names != want:
        out.append(f"{struct.name}: Avro fields {names} != Rust {want}")
    for name, rtype in struct.fields:
        if name not in fields:
            continue
        if not fields[name].get("doc"):
            out.append(f"{struct.name}.{name}: Avro field has no doc")
        _avro_matches(rtype, fields[name]["type"], fields[name], named, structs, enums,
                      f"{struct.name}.{name}", out)
    return out


# ---------------------------------------------------------------- Protobuf

_PROTO_SCALAR = {"String": 9, "i64": 3, "i32": 5, "u32": 13, "u64": 4, "f64": 1, "bool": 8,
                 "Bytes": 12}  # FieldDescriptor.TYPE_*


def _enum_prefix(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def mismatches_proto(struct: RustStruct, md: Any, structs: dict[str, RustStruct],
                     enums: dict[str, RustEnum]) -> list[str]:
    if md is None:
        return [f"{struct.name}: no protobuf message"]
    out = []
    if md.name != struct.name:
        out.append(f"{struct.name}: protobuf message is named {md.name}")
    names = [f.name for f in md.fields]
    want = [n for n, _ in struct.fields]
    if names != want:
        out.append(f"{struct.name}: protobuf fields {names} != Rust {want}")
    numbers = [f.number for f in md.fields]
    if numbers != list(range(1, len(numbers) + 1)):
        out.append(f"{struct.name}: protobuf field numbers {numbers} do not follow Rust order")
    for name, rtype in struct.fields:
        fd = md.fields_by_name.get(name)
        if fd is not None:
            _proto_field(rtype, fd, f"{struct.name}.{name}", structs, enums, out)
    return out


def _proto_field(t: RustType, fd: Any, where: str, structs: dict[str, RustStruct],
                 enums: dict[str, RustEnum], out: list[str]) -> None:
    optional = t.name == "Option"
    inner = t.args[0] if optional else t
    if inner.name == "Arc":
        inner = inner.args[0]
    if inner.name == "Vec" and optional:
        # Option<Vec<Bytes>>: a `Leaves` message keeps absent apart from empty
        if not (fd.message_type is not None and fd.message_type.name == "Leaves"
                and not fd.is_repeated):
            out.append(f"{where}: Option<Vec<..>> must be a Leaves message")
            return
        leaves = fd.message_type.fields_by_name["leaves"]
        _proto_field(inner, leaves, where + ".leaves", structs, enums, out)
        return
    if inner.name == "Vec":
        if not fd.is_repeated:
            out.append(f"{where}: protobuf field is not repeated (Rust {t})")
            return
        inner = inner.args[0]
    elif fd.is_repeated:
        out.append(f"{where}: protobuf field is repeated (Rust {t})")
        return
    if optional and not fd.has_presence:
        out.append(f"{where}: Rust {t} but protobuf field has no presence (use `optional`)")
    if not optional and inner.name in _PROTO_SCALAR and fd.has_presence and not fd.is_repeated:
        out.append(f"{where}: protobuf field is optional but Rust {t} is not")
    if inner.name in _PROTO_SCALAR:
        if fd.type != _PROTO_SCALAR[inner.name]:
            out.append(f"{where}: protobuf type {fd.type} != {_PROTO_SCALAR[inner.name]} "
                       f"(Rust {inner})")
        return
    if inner.name in enums:
        ed = fd.enum_type
        if ed is None or ed.name != inner.name:
            out.append(f"{where}: protobuf field is not enum {inner.name}")
            return
        prefix = _enum_prefix(inner.name)
        for v in enums[inner.name].variants:
            if f"{prefix}_{v.upper()}" not in ed.values_by_name:
                out.append(f"{where}: protobuf enum lacks {prefix}_{v.upper()}")
        return
    if fd.enum_type is not None and fd.enum_type.name == inner.name:
        return  # an enum defined outside the seed (Leg): its name is all we can check
    md = fd.message_type
    if md is None or md.name != inner.name:
        out.append(f"{where}: protobuf field is not message {inner.name}")
        return
    if inner.name in structs:
        out.extend(mismatches_proto(structs[inner.name], md, structs, enums))


__all__ = ["SEED_PATH", "load_seed", "mismatches_avro", "mismatches_proto",
           "mismatches_python", "parse", "parse_type"]
