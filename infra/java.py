"""Finding a `java` new enough for each server.

Kafka 4 needs Java 17; Apicurio Registry 3.3 is compiled for Java 21. Many machines
have several JDKs (a distribution's default plus a vendor one under /usr/lib/jvm),
so rather than insisting on the one on PATH we look at the usual places and take
the first that is new enough, and say exactly what we saw when none is.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rlmesh_stream.infra.errors import JavaError

JAVA_HOME_ENV = "RLMESH_STREAM_JAVA_HOME"
DEFAULT_SEARCH_ROOTS: tuple[Path, ...] = (Path("/usr/lib/jvm"), Path("/opt/java"), Path("/opt"))

_VERSION_RE = re.compile(r'version "(\d+)(?:\.(\d+))?')


@dataclass(frozen=True)
class Java:
    path: Path
    major: int


def java_major_version(java: Path) -> int | None:
    """The major version `java -version` reports (8 for "1.8.0_x"), or None if it won't run."""
    try:
        out = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _VERSION_RE.search(out.stderr + out.stdout)
    if not match:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0" style
        major = int(match.group(2))
    return major


def _candidates(
    env: Mapping[str, str], search_roots: Iterable[Path]
) -> list[Path]:
    seen: list[Path] = []

    def add(p: Path | None) -> None:
        if p is not None and p not in seen:
            seen.append(p)

    if env.get("JAVA_HOME"):
        add(Path(env["JAVA_HOME"]) / "bin" / "java")
    on_path = shutil.which("java", path=env.get("PATH", ""))
    add(Path(on_path) if on_path else None)
    for root in search_roots:
        if root.is_dir():
            for home in sorted(root.iterdir(), reverse=True):
                java = home / "bin" / "java"
                if java.is_file():
                    add(java)
    return seen


def find_java(
    min_major: int,
    purpose: str,
    env: Mapping[str, str] | None = None,
    search_roots: Iterable[Path] = DEFAULT_SEARCH_ROOTS,
) -> Java:
    """The first usable `java` with major version >= `min_major`.

    `RLMESH_STREAM_JAVA_HOME`, when set, is the only candidate: someone who names a
    JDK wants that one, and silently using another would hide their mistake.
    """
    env = os.environ if env is None else env
    hint = (
        f"install a JDK >= {min_major} (your distribution's openjdk-{min_major} package or"
        f" Temurin) or point {JAVA_HOME_ENV} at one"
    )
    explicit = env.get(JAVA_HOME_ENV)
    if explicit:
        java = Path(explicit) / "bin" / "java"
        major = java_major_version(java) if java.is_file() else None
        if major is None:
            raise JavaError(f"{purpose} needs java >= {min_major}, but {java} does not exist "
                            f"or does not run ({JAVA_HOME_ENV}={explicit}); {hint}.")
        if major < min_major:
            raise JavaError(f"{purpose} needs java >= {min_major}, but {java} is java {major} "
                            f"({JAVA_HOME_ENV}={explicit}); {hint}.")
        return Java(java, major)

    found: list[str] = []
    for java in _candidates(env, search_roots):
        major = java_major_version(java)
        if major is None:
            continue
        if major >= min_major:
            return Java(java, major)
        found.append(f"{java} is java {major}")
    if not found:
        raise JavaError(f"{purpose} needs java >= {min_major}, but no java was found "
                        f"(PATH, JAVA_HOME, /usr/lib/jvm); {hint}.")
    raise JavaError(f"{purpose} needs java >= {min_major}, but only older ones were found "
                    f"({'; '.join(found)}); {hint}.")
