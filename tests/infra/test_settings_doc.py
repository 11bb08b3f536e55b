"""docs/settings.md is the code's: generated from the settings classes, and naming every
`RLMESH_STREAM_*` variable the sources read."""

from __future__ import annotations

import re
from pathlib import Path

from rlmesh_stream.infra import settings_doc

ROOT = Path(__file__).resolve().parents[2]


def test_the_settings_page_is_what_the_code_generates() -> None:
    assert settings_doc.DOC.read_text(encoding="utf-8") == settings_doc.render(), (
        "docs/settings.md is stale: run python -m rlmesh_stream.infra.settings_doc")


def test_every_variable_the_sources_name_is_on_the_settings_page() -> None:
    sources = [p for folder in ("schemas", "producer", "consumers", "infra", "tests",
                                "benchmarks") for p in (ROOT / folder).rglob("*.py")
               if "_pb" not in p.parts]
    named = {name for path in [*sources, ROOT / ".ci" / "run", ROOT / "Makefile"]
             for name in re.findall(r"RLMESH_STREAM_[A-Z0-9_]*[A-Z0-9]",
                                    path.read_text(encoding="utf-8"))}
    page = settings_doc.render()
    missing = sorted(name for name in named if f"`{name}`" not in page)
    assert not missing, f"variables read but not on docs/settings.md: {missing}"
