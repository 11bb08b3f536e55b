"""Regenerate the committed protobuf Python modules under `schemas/contract/_pb/`.

    python -m rlmesh_stream.schemas.contract.generate            # rewrite _pb/ from proto/
    python -m rlmesh_stream.schemas.contract.generate --out DIR  # elsewhere (the staleness test)

protoc writes `from rlmesh.spaces.v1 import spaces_pb2` for an import, which
would resolve to the `rlmesh` SDK package, not ours; every generated import of
one of our proto packages is rewritten to `rlmesh_stream.schemas.contract._pb.<package>` (a plain,
deterministic text substitution, so the output is reproducible byte for byte).
The `.pyi` stubs get a `# mypy: ignore-errors` line because protoc's stubs use
field names (`bool`, `bytes`) that shadow builtins and upset mypy.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

PROTO_ROOT = Path(__file__).parent / "proto"
PB_ROOT = Path(__file__).parent / "_pb"
PB_PACKAGE = "rlmesh_stream.schemas.contract._pb"

_IMPORT = re.compile(r"^from (rlmesh(?:\.\w+)*) import (\w+_pb2)", re.MULTILINE)
_PLAIN_IMPORT = re.compile(r"^import (rlmesh(?:\.\w+)*)\.(\w+_pb2)", re.MULTILINE)
_STUB_HEADER = "# mypy: ignore-errors\n"


def proto_files() -> list[Path]:
    return sorted(PROTO_ROOT.rglob("*.proto"))


def _rewrite(text: str) -> str:
    text = _IMPORT.sub(lambda m: f"from {PB_PACKAGE}.{m[1]} import {m[2]}", text)
    return _PLAIN_IMPORT.sub(lambda m: f"import {PB_PACKAGE}.{m[1]}.{m[2]}", text)


def generate(out: Path) -> list[Path]:
    """Run protoc on every .proto into `out`, post-process, add package `__init__`s."""
    from grpc_tools import protoc  # test extra: only needed to regenerate

    files = [str(p.relative_to(PROTO_ROOT)) for p in proto_files()]
    with tempfile.TemporaryDirectory() as tmp:
        args = ["protoc", f"-I{PROTO_ROOT}", f"--python_out={tmp}", f"--pyi_out={tmp}", *files]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed: {' '.join(args)}")
        written = []
        for src in sorted(Path(tmp).rglob("*_pb2.py*")):
            rel = src.relative_to(tmp)
            dst = out / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            text = _rewrite(src.read_text(encoding="utf-8"))
            if dst.suffix == ".pyi":
                text = _STUB_HEADER + text
            dst.write_text(text, encoding="utf-8")
            written.append(rel)
    for rel in list(written):
        for parent in [out, *[out / p for p in rel.parents if str(p) != "."]]:
            init = parent / "__init__.py"
            if not init.exists():
                init.write_text("", encoding="utf-8")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=PB_ROOT)
    args = parser.parse_args(argv)
    if args.out == PB_ROOT:
        for old in PB_ROOT.rglob("*_pb2.py*"):
            old.unlink()
    written = generate(args.out)
    print(f"wrote {len(written)} files under {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
