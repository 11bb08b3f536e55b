"""Fetching the servers' binaries from Maven Central, once, into a cache outside the repo.

Kafka's own jars and the Apicurio Registry distribution are both published on Maven
Central, which every machine of ours (and most corporate networks, via a mirror)
reaches. Maven does the downloading because it verifies each file's checksum and
honours the user's `~/.m2/settings.xml` proxies and mirrors.

Layout under the cache (default `~/.cache/rlmesh-stream`):
    kafka-<version>/libs/*.jar                the broker's classpath
    apicurio-registry-<version>/quarkus-run.jar  the registry's runnable distribution
    fetch.log                                 Maven's output of the last fetch
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rlmesh_stream.infra.errors import ArtifactError

KAFKA_VERSION = "4.1.1"
APICURIO_VERSION = "3.3.3"
APICURIO_ARTIFACT = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"

CACHE_ENV = "RLMESH_STREAM_CACHE"
MIRROR_ENV = "RLMESH_STREAM_MAVEN_MIRROR"
REPO_LOCAL_ENV = "RLMESH_STREAM_MAVEN_REPO_LOCAL"

_COMPLETE = ".complete"  # written last, so a half-finished fetch is never taken as done


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get(CACHE_ENV) or Path.home() / ".cache" / "rlmesh-stream")


@dataclass(frozen=True)
class Artifacts:
    """Where the binaries are cached and how Maven reaches Maven Central.

    `mirror`: a Maven repository URL used instead of Central (for networks that only
    reach an internal mirror). `repo_local`: Maven's local repository, if not ~/.m2.
    """

    cache_dir: Path
    mirror: str | None = None
    repo_local: Path | None = None
    mvn: str = "mvn"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Artifacts:
        env = os.environ if env is None else env
        repo_local = env.get(REPO_LOCAL_ENV)
        return cls(
            cache_dir=default_cache_dir(env),
            mirror=env.get(MIRROR_ENV) or None,
            repo_local=Path(repo_local) if repo_local else None,
        )

    @property
    def kafka_home(self) -> Path:
        return self.cache_dir / f"kafka-{KAFKA_VERSION}"

    @property
    def kafka_libs(self) -> Path:
        return self.kafka_home / "libs"

    @property
    def registry_home(self) -> Path:
        return self.cache_dir / f"apicurio-registry-{APICURIO_VERSION}"

    @property
    def log_file(self) -> Path:
        return self.cache_dir / "fetch.log"

    def is_cached(self) -> bool:
        return (self.kafka_home / _COMPLETE).exists() and (self.registry_home / _COMPLETE).exists()

    def ensure(self) -> None:
        """Fetch whatever is not cached yet; a no-op when both are."""
        if self.is_cached():
            return
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with self._lock():
            if not (self.kafka_home / _COMPLETE).exists():
                self._fetch_kafka()
            if not (self.registry_home / _COMPLETE).exists():
                self._fetch_registry()

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """Serialise fetches: two test runs or CLIs starting at once share one cache."""
        with open(self.cache_dir / ".fetch.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _fetch_kafka(self) -> None:
        home = self.kafka_home
        home.mkdir(parents=True, exist_ok=True)
        pom = (Path(__file__).parent / "kafka-pom.xml").read_text()
        (home / "pom.xml").write_text(pom.replace("${kafka.version}", KAFKA_VERSION))
        staging = home / "libs.partial"
        shutil.rmtree(staging, ignore_errors=True)
        self._mvn(
            f"Kafka {KAFKA_VERSION} jars",
            ["-f", str(home / "pom.xml"), "dependency:copy-dependencies",
             f"-DoutputDirectory={staging}", "-DincludeScope=runtime"],
        )
        shutil.rmtree(self.kafka_libs, ignore_errors=True)
        staging.rename(self.kafka_libs)
        (home / _COMPLETE).write_text(KAFKA_VERSION)

    def _fetch_registry(self) -> None:
        with tempfile.TemporaryDirectory(dir=self.cache_dir) as tmp:
            self._mvn(
                f"Apicurio Registry {APICURIO_VERSION}",
                ["dependency:copy", f"-Dartifact={APICURIO_ARTIFACT}", f"-DoutputDirectory={tmp}"],
            )
            tarballs = list(Path(tmp).glob("*.tar.gz"))
            if not tarballs:
                raise ArtifactError(f"Maven reported success but left no {APICURIO_ARTIFACT} "
                                    f"in {tmp}; see {self.log_file}.")
            extracted = Path(tmp) / "extracted"
            with tarfile.open(tarballs[0]) as tar:
                tar.extractall(extracted, filter="data")
            shutil.rmtree(self.registry_home, ignore_errors=True)
            extracted.rename(self.registry_home)
        (self.registry_home / _COMPLETE).write_text(APICURIO_VERSION)

    def _mvn(self, what: str, goals: list[str]) -> None:
        mvn = shutil.which(self.mvn)
        if mvn is None:
            raise ArtifactError(f"cannot fetch {what}: Maven (`{self.mvn}`) is not installed; "
                                f"install it (e.g. `apt-get install maven`) and retry.")
        cmd = [mvn, "-B", "-q"]
        if self.repo_local is not None:
            cmd.append(f"-Dmaven.repo.local={self.repo_local}")
        settings: Path | None = None
        if self.mirror:
            settings = self.cache_dir / "mirror-settings.xml"
            settings.write_text(_mirror_settings(self.mirror))
            cmd += ["-s", str(settings)]
        with open(self.log_file, "a") as log:
            log.write(f"$ {' '.join(cmd + goals)}\n")
            log.flush()
            done = subprocess.run(cmd + goals, stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, check=False)
        if done.returncode != 0:
            source = f"the Maven mirror {self.mirror}" if self.mirror else "Maven Central"
            raise ArtifactError(
                f"could not fetch {what} from {source} (mvn exit {done.returncode}, "
                f"details in {self.log_file}); check that this machine reaches {source} "
                f"(proxy/mirror in ~/.m2/settings.xml or {MIRROR_ENV}) and retry "
                f"`rlmesh-stream infra fetch`."
            )


def _mirror_settings(url: str) -> str:
    return f"""<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">
  <mirrors>
    <mirror><id>rlmesh-stream-mirror</id><mirrorOf>*</mirrorOf><url>{url}</url></mirror>
  </mirrors>
</settings>
"""
