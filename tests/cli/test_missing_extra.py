"""A command whose optional library is missing names the extra to install, in one line.

The library is made unimportable in a child process (`sys.modules[name] = None`, which
makes `import name` fail as if it were not installed); the root command maps it to
its extra (`rlmesh_stream.infra.cli.EXTRAS`). tests/packaging checks the same in a
real install without extras.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlmesh_stream.infra.cli import COMMAND_EXTRAS, EXTRAS


def run_without(module: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    code = (f"import sys; sys.modules[{module!r}] = None; "
            "from rlmesh_stream.infra.cli import main; "
            f"main(args={args!r}, prog_name='rlmesh-stream')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


@pytest.mark.parametrize(("module", "args"), [
    ("duckdb", ["consume", "all", "--sink", "duckdb://store.duckdb"]),
    ("psycopg", ["report", "episodes", "--sink", "postgresql://nobody@127.0.0.1:1/x"]),
    ("duckdb", ["join", "--log", "train.jsonl"]),
    ("matplotlib", ["join", "--log", "train.jsonl", "--plot", "curve"]),
])
def test_a_missing_library_names_its_extra(module: str, args: list[str], tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_text('{"step": 1}\n')
    done = run_without(module, args, tmp_path)
    extra = COMMAND_EXTRAS.get(args[0], EXTRAS[module])
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"Error: `{args[0]}` needs the {extra!r} extra ({module} is not installed): "
        f"pip install 'rlmesh-stream[{extra}]'"]


def test_the_missing_library_leaves_no_store_behind(tmp_path: Path) -> None:
    run_without("duckdb", ["consume", "all", "--sink", "duckdb://store.duckdb"], tmp_path)
    assert not (tmp_path / "store.duckdb").exists()


def test_every_extra_named_is_one_pyproject_defines() -> None:
    import tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    assert set(EXTRAS.values()) | set(COMMAND_EXTRAS.values()) <= set(extras)
    for module, extra in EXTRAS.items():
        assert any(dep.startswith(module) for dep in extras[extra]), (module, extra)
