"""The distribution: one top-level namespace, and a base install that is only the hook.

The wheel is built from a copy of the repository (so the build leaves nothing in the
working tree) and installed, without extras, into a fresh virtual environment: what
`pip install rlmesh-stream` gives a rollout machine. There the hook imports, the
consumers' and analysis' libraries are absent, and a command that needs them says
which extra to install, in one line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

# builds the wheel and installs it into fresh venvs: minutes, so not in `make check`
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("schemas", "producer", "consumers", "infra")
EXTRA_ONLY = ("duckdb", "pyarrow", "psycopg", "matplotlib", "rlmesh", "testcontainers")


def _copy_sources(target: Path) -> Path:
    ignore = shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info", "build",
                                    ".mypy_cache", ".ruff_cache", "*.duckdb")
    for name in (*FOLDERS, "rlmesh_stream", "pyproject.toml", "README.md"):
        source = ROOT / name
        if source.is_dir():  # rlmesh_stream/ holds links to the folders: copied as links
            shutil.copytree(source, target / name, ignore=ignore, symlinks=True)
        else:
            shutil.copy2(source, target / name)
    return target


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = _copy_sources(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--quiet", "--wheel-dir", str(out), str(source)],
                   check=True, capture_output=True, timeout=300)
    (built,) = out.glob("rlmesh_stream-*.whl")
    return built


@pytest.fixture(scope="module")
def base_env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel and its base dependencies only (no extras)."""
    home = tmp_path_factory.mktemp("venv")
    venv.create(home, with_pip=True, clear=True)
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([str(home / "bin" / "python"), "-m", "pip", "install", "--quiet",
                    str(wheel)], check=True, capture_output=True, timeout=600, env=env)
    return home


def _python(home: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(home / "bin" / "python"), "-c", code], capture_output=True,
                          text=True, timeout=120, cwd=home)


def test_the_wheel_installs_only_the_rlmesh_stream_namespace(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top_level = {name.split("/", 1)[0] for name in names}
    name, version = wheel.name.split("-")[:2]
    assert top_level == {"rlmesh_stream", f"{name}-{version}.dist-info"}
    assert not any(name.startswith("rlmesh_stream/__init__") for name in names), (
        "rlmesh_stream is a namespace package: no __init__ of its own")
    for folder in FOLDERS:
        assert f"rlmesh_stream/{folder}/__init__.py" in names


def test_the_wheel_carries_the_schemas_and_the_stack_files(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert any(n.startswith("rlmesh_stream/schemas/contract/avro/") and n.endswith(".avsc")
               for n in names)
    assert any(n.startswith("rlmesh_stream/schemas/contract/proto/") and n.endswith(".proto")
               for n in names)
    assert "rlmesh_stream/infra/kafka-pom.xml" in names


def test_the_wheel_is_pure_python_and_installs_on_every_platform(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    assert not [n for n in names if n.endswith((".so", ".pyd", ".c"))]


def test_the_hook_imports_in_a_base_install(base_env: Path) -> None:
    done = _python(base_env, "from rlmesh_stream.producer import KafkaRuntimeHooks; "
                             "print(KafkaRuntimeHooks.__name__)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "KafkaRuntimeHooks"


@pytest.mark.parametrize("module", EXTRA_ONLY)
def test_a_base_install_has_no_extra_library(base_env: Path, module: str) -> None:
    done = _python(base_env, f"import {module}")
    assert done.returncode != 0
    assert f"No module named '{module}'" in done.stderr


@pytest.mark.parametrize("module", FOLDERS)
def test_a_base_install_puts_no_bare_package_on_the_path(base_env: Path, module: str) -> None:
    done = _python(base_env, f"import {module}")
    assert f"No module named '{module}'" in done.stderr


@pytest.mark.parametrize(("args", "extra"), [
    (["consume", "episodes", "--sink", "duckdb:///tmp/rlmesh-never.duckdb"], "consumers"),
    (["report", "episodes"], "consumers"),
])
def test_a_command_without_its_extra_names_the_extra_in_one_line(
        base_env: Path, args: list[str], extra: str) -> None:
    done = subprocess.run([str(base_env / "bin" / "rlmesh-stream"), *args], capture_output=True,
                          text=True, timeout=120, cwd=base_env)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"Error: `{args[0]}` needs the '{extra}' extra")
    assert lines[0].endswith(f"pip install 'rlmesh-stream[{extra}]'")
