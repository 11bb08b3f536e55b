"""Generated artefacts are current: the protobuf modules and the topic catalog."""

from __future__ import annotations

import re
from pathlib import Path

from rlmesh_stream.schemas.contract import catalog, generate


def test_committed_protobuf_modules_match_a_fresh_protoc_run(tmp_path: Path):
    generate.generate(tmp_path)
    fresh = {p.relative_to(tmp_path): p.read_text() for p in tmp_path.rglob("*_pb2.py*")}
    committed = {p.relative_to(generate.PB_ROOT): p.read_text()
                 for p in generate.PB_ROOT.rglob("*_pb2.py*")}
    stale = sorted(str(p) for p in fresh.keys() | committed.keys()
                   if fresh.get(p) != committed.get(p))
    assert stale == [], "run `python -m rlmesh_stream.schemas.contract.generate`"


def test_generated_modules_import_our_package_not_the_rlmesh_sdk():
    sdk_import = re.compile(r"^(from|import) rlmesh[. ]", re.MULTILINE)
    offending = [str(p) for p in generate.PB_ROOT.rglob("*_pb2.py*")
                 if sdk_import.search(p.read_text())]
    assert offending == []


def test_topic_catalog_is_current():
    assert catalog.CATALOG_PATH.read_text(encoding="utf-8") == catalog.render(), (
        "run `python -m rlmesh_stream.schemas.contract.catalog`")


def test_catalog_lists_every_avro_field_with_its_meaning():
    from rlmesh_stream.schemas.contract.avro import load_schema
    from rlmesh_stream.schemas.contract.topics import EVENT_TYPES

    text = catalog.render()
    missing = [f"{et.value}.{f['name']}" for et in EVENT_TYPES
               for f in load_schema(et)["fields"]
               if f"| `{f['name']}` |" not in text or f["doc"].split()[0] not in text]
    assert missing == []
