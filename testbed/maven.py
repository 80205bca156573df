"""Fetch a pinned Apache Kafka release from Maven Central with ``mvn``.

No tarball: the broker (``kafka_2.13``: ``kafka.Kafka``, ``kafka.tools.StorageTool``) and the
command-line tools (``kafka-tools``: ``TransactionsCommand``, ``JmxTool``) are resolved as
Maven artifacts with their runtime dependencies, plus the logging runtime the POMs leave out
(log4j2 for 4.x, reload4j for 3.x). Each classpath lives in its own directory, so the tools
can come from another release than the broker (see :data:`TOOLS_VERSION_FALLBACK`).

Layout under ``${KTE_CACHE:-~/.cache/kafka-txn-exporter}/kafka-<version>/``::

    lib/            broker classpath
    tools-lib/      kafka-tools classpath
    manifest.json   file name -> sha256 of every jar, written after a complete download

The manifest is checked before each use; a missing or corrupt jar triggers a re-download.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: Newest Apache Kafka release of ``kafka_2.13`` on Maven Central.
DEFAULT_KAFKA_VERSION = "4.4.0"
#: The previous major line, selectable with ``KAFKA_VERSION=3.9.2``.
KAFKA_3_VERSION = "3.9.2"
#: Releases whose ``kafka-tools`` / ``kafka-tools-api`` artifacts are not on Maven Central
#: (``kafka_2.13`` 4.4.0 is, its ``kafka-tools-api`` dependency is not): their tools come
#: from this release instead. The tools are plain clients, so a close release is harmless.
TOOLS_VERSION_FALLBACK = {"4.4.0": "4.3.1"}

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
LOG4J2_VERSION = "2.24.3"
RELOAD4J_VERSION = "1.2.25"
SLF4J_1_VERSION = "1.7.36"
MANIFEST = "manifest.json"
MVN_TIMEOUT_S = 900.0


class FetchError(RuntimeError):
    """Maven could not resolve the Kafka artifacts."""


@dataclass(frozen=True, slots=True)
class Artifact:
    group_id: str
    artifact_id: str
    version: str
    exclusions: tuple[tuple[str, str], ...] = ()

    def to_xml(self) -> str:
        excl = "".join(
            f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>"
            for g, a in self.exclusions
        )
        excl_xml = f"<exclusions>{excl}</exclusions>" if excl else ""
        return (
            f"<dependency><groupId>{self.group_id}</groupId>"
            f"<artifactId>{self.artifact_id}</artifactId>"
            f"<version>{self.version}</version>{excl_xml}</dependency>"
        )


@dataclass(frozen=True, slots=True)
class KafkaDistribution:
    """A fetched and verified Kafka release: where its jars are and how to run them."""

    version: str
    tools_version: str
    home: Path

    @property
    def broker_lib(self) -> Path:
        return self.home / "lib"

    @property
    def tools_lib(self) -> Path:
        return self.home / "tools-lib"

    @property
    def major(self) -> int:
        return major_version(self.version)

    @property
    def broker_classpath(self) -> str:
        return _classpath(self.broker_lib)

    @property
    def tools_classpath(self) -> str:
        return _classpath(self.tools_lib)

    @property
    def uses_log4j2(self) -> bool:
        """Kafka 4.x logs through log4j2; 3.x through reload4j (log4j 1.2 API)."""
        return self.major >= 4

    def logging_jvm_args(self, config_file: Path) -> list[str]:
        """The system property that points the logging backend at ``config_file``."""
        if self.uses_log4j2:
            return [f"-Dlog4j2.configurationFile={config_file}"]
        return [f"-Dlog4j.configuration=file:{config_file}"]


def major_version(version: str) -> int:
    return int(version.split(".", 1)[0])


def cache_root() -> Path:
    env = os.environ.get("KTE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "kafka-txn-exporter"


def selected_version(version: str | None = None) -> str:
    """The version to use: the argument, else ``$KAFKA_VERSION``, else the default."""
    return version or os.environ.get("KAFKA_VERSION") or DEFAULT_KAFKA_VERSION


def tools_version_for(version: str) -> str:
    return os.environ.get("KAFKA_TOOLS_VERSION") or TOOLS_VERSION_FALLBACK.get(version, version)


def _classpath(lib: Path) -> str:
    return os.pathsep.join(str(p) for p in sorted(lib.glob("*.jar")))


def _logging_artifacts(version: str) -> list[Artifact]:
    """The logging runtime the Kafka POMs leave out (slf4j 1.7 bindings in both lines)."""
    if major_version(version) >= 4:
        group = "org.apache.logging.log4j"
        return [
            Artifact(group, "log4j-api", LOG4J2_VERSION),
            Artifact(group, "log4j-core", LOG4J2_VERSION),
            Artifact(group, "log4j-slf4j-impl", LOG4J2_VERSION),
        ]
    return [
        Artifact("ch.qos.reload4j", "reload4j", RELOAD4J_VERSION),
        Artifact("org.slf4j", "slf4j-reload4j", SLF4J_1_VERSION),
    ]


def broker_artifacts(version: str, tools_version: str) -> list[Artifact]:
    kafka = "org.apache.kafka"
    if tools_version == version:
        broker = Artifact(kafka, "kafka_2.13", version)
        return [broker, *_logging_artifacts(version)]
    broker = Artifact(kafka, "kafka_2.13", version, exclusions=((kafka, "kafka-tools-api"),))
    return [broker, Artifact(kafka, "kafka-tools-api", tools_version), *_logging_artifacts(version)]


def tools_artifacts(tools_version: str) -> list[Artifact]:
    return [
        Artifact("org.apache.kafka", "kafka-tools", tools_version),
        *_logging_artifacts(tools_version),
    ]


def render_pom(name: str, artifacts: list[Artifact]) -> str:
    deps = "\n    ".join(a.to_xml() for a in artifacts)
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kafka-txn-testbed</groupId>
  <artifactId>{name}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    {deps}
  </dependencies>
</project>
"""


def _run_mvn(pom: Path, out_dir: Path) -> None:
    cmd = [
        "mvn", "-q", "-B", "-f", str(pom),
        f"{DEPENDENCY_PLUGIN}:copy-dependencies",
        f"-DoutputDirectory={out_dir}",
        "-DincludeScope=runtime",
    ]  # fmt: skip
    log.info("running %s", " ".join(cmd))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=MVN_TIMEOUT_S, check=False)
    except FileNotFoundError as exc:
        raise FetchError("mvn is not installed (Maven 3.8+ is needed)") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise FetchError(f"mvn failed (exit {proc.returncode}) for {pom}:\n{tail}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _jar_hashes(home: Path) -> dict[str, str]:
    jars = sorted([*home.glob("lib/*.jar"), *home.glob("tools-lib/*.jar")])
    return {str(j.relative_to(home)): _sha256(j) for j in jars}


def verify(home: Path, version: str, tools_version: str) -> bool:
    """True when ``home`` holds exactly the jars its manifest lists, unchanged."""
    manifest = home / MANIFEST
    if not manifest.is_file():
        return False
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError) as exc:
        log.warning("unreadable manifest %s: %s", manifest, exc)
        return False
    if data.get("version") != version or data.get("tools_version") != tools_version:
        return False
    files = data.get("files", {})
    if not files or _jar_hashes(home) != files:
        log.warning("Kafka jars under %s do not match %s", home, manifest)
        return False
    return True


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialize fetches of one version across processes (pytest workers, setup.sh)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _download(home: Path, version: str, tools_version: str) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".kafka-{version}-", dir=home.parent))
    try:
        for name, artifacts in (
            ("lib", broker_artifacts(version, tools_version)),
            ("tools-lib", tools_artifacts(tools_version)),
        ):
            pom = staging / f"pom-{name}.xml"
            pom.write_text(render_pom(f"kafka-{version}-{name}", artifacts))
            _run_mvn(pom, staging / name)
        manifest = {
            "version": version,
            "tools_version": tools_version,
            "files": _jar_hashes(staging),
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        if home.exists():
            shutil.rmtree(home)
        staging.rename(home)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def fetch(version: str | None = None, *, cache: Path | None = None) -> KafkaDistribution:
    """Return the verified distribution of ``version``, downloading it when needed."""
    version = selected_version(version)
    tools_version = tools_version_for(version)
    root = cache or cache_root()
    home = root / f"kafka-{version}"
    with _locked(root / f".kafka-{version}.lock"):
        if not verify(home, version, tools_version):
            log.info("fetching Kafka %s (tools %s) into %s", version, tools_version, home)
            started = time.monotonic()
            _download(home, version, tools_version)
            log.info("fetched Kafka %s in %.1f s", version, time.monotonic() - started)
            if not verify(home, version, tools_version):
                raise FetchError(f"Kafka {version} under {home} fails verification after download")
    return KafkaDistribution(version=version, tools_version=tools_version, home=home)
