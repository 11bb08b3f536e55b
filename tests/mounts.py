"""Mounts the fault tests make under their own temporary folders: a small tmpfs (a disk
that really fills: ENOSPC), room given back, a folder made read-only. They need root (in
a mount namespace); without it the test is skipped, saying so."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def mount(*args: str) -> None:
    """`mount ARGS`, or skip the test when this process may not mount."""
    done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount ({done.stderr.strip()}): needs root in a mount namespace")


@contextlib.contextmanager
def small_tmpfs(path: Path, size: int) -> Iterator[Path]:
    """A tmpfs of `size` bytes made at `path` (a new folder), unmounted at the end."""
    path.mkdir()
    mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def grow_tmpfs(path: Path, size: str = "1g") -> None:
    """The tmpfs at `path` given room again (its files kept)."""
    mount("-o", f"remount,size={size}", str(path))


@contextlib.contextmanager
def made_read_only(path: Path) -> Iterator[None]:
    """Remount `path` read-only in place (a bind mount over itself)."""
    mount("--bind", str(path), str(path))
    try:
        mount("-o", "remount,bind,ro", str(path))
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
