"""A local Flink for running the generated SQL: PyFlink in a venv of its own, connector jars.

PyFlink 2.3 (`apache-flink` on PyPI, Flink itself inside `apache-flink-libraries`)
pins `apache-beam<=2.61`, which pins `protobuf<6`; this project needs protobuf 7.
So PyFlink cannot share the project's environment: it gets a venv of its own in the
cache, and the project talks to it only through text (the generated DDL in, JSON
rows out; `flink_run.py`). The Kafka connector and the Confluent-registry Avro
format come from Maven Central, fetched by Maven like Kafka's own jars.

Layout under the cache (`infra/artifacts.py`, default `~/.cache/rlmesh-stream`):
    flink-<version>/jars/*.jar   flink-sql-connector-kafka, flink-sql-avro-confluent-registry,
                                 flink-connector-jdbc-core/-postgres, the PostgreSQL driver
    flink-<version>/jars/iceberg/  Iceberg's Flink runtime, the SQLite JDBC driver
    flink-<version>/jars/hadoop/   Hadoop's client (Iceberg's catalog needs its classes)
    flink-<version>/pyflink/     the venv with apache-flink==<version>
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlmesh_stream.infra.artifacts import Artifacts
from rlmesh_stream.infra.errors import ArtifactError, JavaError
from rlmesh_stream.infra.java import DEFAULT_SEARCH_ROOTS, _candidates, java_major_version
from rlmesh_stream.schemas.errors import RlmeshStreamError

FLINK_VERSION = "2.3.0"
# The Kafka connector is released apart from Flink; 5.0.0-2.2 is the newest for Flink 2.x
# on Maven Central and runs on 2.3 (tests/engines).
KAFKA_CONNECTOR_VERSION = "5.0.0-2.2"
# The JDBC connector (a streaming view's upserting sink into PostgreSQL, see
# consumers/flink/sink.py): 4.0.0-2.0 is the newest for Flink 2.x on Maven Central and
# runs on 2.3 (tests/engines); it needs the PostgreSQL driver beside it.
JDBC_CONNECTOR_VERSION = "4.0.0-2.0"
POSTGRES_DRIVER_VERSION = "42.7.14"
FLINK_JARS = (
    f"org.apache.flink:flink-sql-connector-kafka:{KAFKA_CONNECTOR_VERSION}",
    f"org.apache.flink:flink-sql-avro-confluent-registry:{FLINK_VERSION}",
    f"org.apache.flink:flink-connector-jdbc-core:{JDBC_CONNECTOR_VERSION}",
    f"org.apache.flink:flink-connector-jdbc-postgres:{JDBC_CONNECTOR_VERSION}",
    f"org.postgresql:postgresql:{POSTGRES_DRIVER_VERSION}",
)
# Reading the exports' Iceberg tables (tests/engines/test_flink_iceberg.py), only in a job
# that asks for them: Iceberg's runtime for Flink 2.0 (Iceberg 1.10's newest; runs on 2.3)
# and the SQLite driver of the embedded catalog in the job's jars; Hadoop's client on
# Flink's own classpath (`HADOOP_CLASSPATH`): Iceberg's catalog and file IO load Hadoop's
# classes from there, not from a job's jars.
ICEBERG_JARS = (
    "org.apache.iceberg:iceberg-flink-runtime-2.0:1.10.0",
    "org.xerial:sqlite-jdbc:3.46.1.3",
)
HADOOP_JARS = (
    "org.apache.hadoop:hadoop-client-api:3.4.1",
    "org.apache.hadoop:hadoop-client-runtime:3.4.1",
)
RUNNER = Path(__file__).with_name("flink_run.py")
_COMPLETE = ".complete"


@dataclass(frozen=True)
class FlinkArtifacts:
    """The cached jars and PyFlink venv of one Flink version."""

    artifacts: Artifacts

    @classmethod
    def from_env(cls) -> FlinkArtifacts:
        return cls(Artifacts.from_env())

    @property
    def home(self) -> Path:
        return self.artifacts.cache_dir / f"flink-{FLINK_VERSION}"

    @property
    def jars_dir(self) -> Path:
        return self.home / "jars"

    @property
    def venv(self) -> Path:
        return self.home / "pyflink"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def jars(self) -> list[Path]:
        return sorted(self.jars_dir.glob("*.jar"))

    def iceberg_jars(self) -> list[Path]:
        return sorted((self.jars_dir / "iceberg").glob("*.jar"))

    def hadoop_jars(self) -> list[Path]:
        return sorted((self.jars_dir / "hadoop").glob("*.jar"))

    def _jars_cached(self) -> bool:
        """The jars of `FLINK_JARS` are there (a cache of an older list is fetched again)."""
        marker = self.jars_dir / _COMPLETE
        return marker.exists() and marker.read_text() == _jars_marker()

    def is_cached(self) -> bool:
        return self._jars_cached() and (self.venv / _COMPLETE).exists()

    def ensure(self) -> None:
        """Fetch the jars and build the PyFlink venv unless cached (minutes the first time)."""
        if self.is_cached():
            return
        self.home.mkdir(parents=True, exist_ok=True)
        with self.artifacts._lock():
            if not self._jars_cached():
                self._fetch_jars()
            if not (self.venv / _COMPLETE).exists():
                self._build_venv()

    def _fetch_jars(self) -> None:
        staging = self.home / "jars.partial"
        shutil.rmtree(staging, ignore_errors=True)
        for folder, coordinates in ((staging, FLINK_JARS), (staging / "iceberg", ICEBERG_JARS),
                                    (staging / "hadoop", HADOOP_JARS)):
            for coordinate in coordinates:
                self.artifacts._mvn(coordinate, ["dependency:copy",
                                                 f"-Dartifact={coordinate}",
                                                 f"-DoutputDirectory={folder}"])
        shutil.rmtree(self.jars_dir, ignore_errors=True)
        staging.rename(self.jars_dir)
        (self.jars_dir / _COMPLETE).write_text(_jars_marker())

    def _build_venv(self) -> None:
        shutil.rmtree(self.venv, ignore_errors=True)
        steps = ([sys.executable, "-m", "venv", str(self.venv)],
                 [str(self.python), "-m", "pip", "install", "--quiet",
                  "--disable-pip-version-check", f"apache-flink=={FLINK_VERSION}"])
        with open(self.artifacts.log_file, "a") as log:
            for cmd in steps:
                log.write(f"$ {' '.join(cmd)}\n")
                log.flush()
                done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, check=False)
                if done.returncode != 0:
                    raise ArtifactError(
                        f"could not install PyFlink {FLINK_VERSION} into {self.venv} "
                        f"(exit {done.returncode}, details in {self.artifacts.log_file}); "
                        "check that pip reaches PyPI and retry `rlmesh-stream infra fetch "
                        "--flink`.")
        (self.venv / _COMPLETE).write_text(FLINK_VERSION)


def _jars_marker() -> str:
    return "\n".join(FLINK_JARS + ICEBERG_JARS + HADOOP_JARS)


# Flink 2.x runs on Java 11, 17 and 21; newer JDKs are not supported by it.
FLINK_JAVA_MAJORS = (17, 21, 11)


def flink_java_home(env: Mapping[str, str] | None = None) -> Path:
    """A JDK Flink supports (17 first), for PyFlink's JAVA_HOME."""
    import os

    env = os.environ if env is None else env
    found: dict[int, Path] = {}
    for java in _candidates(env, DEFAULT_SEARCH_ROOTS):
        major = java_major_version(java)
        if major in FLINK_JAVA_MAJORS:
            found.setdefault(major, java.resolve().parent.parent)
    for major in FLINK_JAVA_MAJORS:
        if major in found:
            return found[major]
    raise JavaError(f"Flink {FLINK_VERSION} needs java 11, 17 or 21 and none was found "
                    "(PATH, JAVA_HOME, /usr/lib/jvm); install openjdk-17.")


class FlinkJobError(RlmeshStreamError):
    """The Flink job failed; the message carries the end of its output."""


def _failure(output: str) -> str:
    """What a failed job printed, shortly: its exception messages (a Java stack's `Caused
    by:` lines name the root cause, its `at` lines do not), else the end of its output."""
    lines = output.strip().splitlines()
    causes = [line.strip() for line in lines
              if "Exception:" in line or "Error:" in line or line.startswith("Caused by:")]
    return "\n".join(causes[-12:] if causes else lines[-30:])


def run_sql(flink: FlinkArtifacts, statements: list[str], queries: Mapping[str, str],
            out_dir: Path, timeout: float = 600, *, inserts: Sequence[str] = (),
            streaming: bool = False, iceberg: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Run DDL `statements`, then every query (and `inserts`) in one job; each query's rows
    as dicts. A batch job unless `streaming` (then only `inserts`: its sinks must take
    updates, which Flink's filesystem sink does not). `iceberg`: with Iceberg's catalog
    (`ICEBERG_JARS`, `HADOOP_JARS`).

    The rows travel as Flink's JSON format (BYTES base64, TIMESTAMP_LTZ as
    `yyyy-MM-dd HH:mm:ss.SSSZ` text), written by Flink's filesystem sink.
    """
    import json
    import os

    out_dir.mkdir(parents=True, exist_ok=True)
    spec = out_dir / "spec.json"
    jars = flink.jars() + (flink.iceberg_jars() if iceberg else [])
    spec.write_text(json.dumps({"jars": [str(j) for j in jars],
                                "statements": statements, "queries": dict(queries),
                                "inserts": list(inserts), "streaming": streaming,
                                "out_dir": str(out_dir)}))
    env = {**os.environ, "JAVA_HOME": str(flink_java_home())}
    if iceberg:
        env["HADOOP_CLASSPATH"] = os.pathsep.join(str(j) for j in flink.hadoop_jars())
    done = subprocess.run([str(flink.python), str(RUNNER), str(spec)], capture_output=True,
                          text=True, env=env, timeout=timeout, check=False)
    if done.returncode != 0:
        raise FlinkJobError(f"the Flink job failed (exit {done.returncode}):\n"
                            f"{_failure(done.stdout + done.stderr)}")
    rows: dict[str, list[dict[str, Any]]] = {}
    for name in queries:
        rows[name] = [json.loads(line) for part in sorted((out_dir / name).rglob("*"))
                      if part.is_file() and not part.name.startswith(".")
                      for line in part.read_text().splitlines() if line.strip()]
    return rows
