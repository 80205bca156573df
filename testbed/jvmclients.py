"""Kafka's own Java KafkaConsumer as a test-bed client that commits the way Spring does.

``testbed/java/CommitLastPlusOne.java`` is compiled with ``javac`` against the Kafka Streams
jars :func:`testbed.streams.streams_home` fetches (they bring ``kafka-clients``), into
``<cache>/streams-<version>/consumer-classes-<sha of the source>`` (compiled once per change).
:func:`commit_last_plus_one` runs it: a read_committed consumer of one partition that reads N
records and commits ``record.offset() + 1`` with ``commitSync`` after each poll (Spring's
AckMode BATCH, its default).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from testbed.maven import FetchError, _locked, cache_root
from testbed.streams import streams_home

SOURCE = Path(__file__).resolve().parent / "java" / "CommitLastPlusOne.java"
MAIN_CLASS = "CommitLastPlusOne"
JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
COMPILE_TIMEOUT_S = 300.0


class JavaProgramError(RuntimeError):
    """A Java program of the test bed failed; carries its output."""


@dataclass(frozen=True, slots=True)
class JavaClients:
    """The compiled consumer and the classpath to run it."""

    lib: Path
    classes: Path

    @property
    def classpath(self) -> str:
        return os.pathsep.join([str(self.classes), f"{self.lib}/*"])

    def command(self, main: str, *args: object) -> list[str]:
        return ["java", *JVM_OPTIONS, "-cp", self.classpath, main, *(str(a) for a in args)]


def prepare() -> JavaClients:
    """Fetch the jars (testbed.streams) and compile the consumer (both cached)."""
    home = streams_home()
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    classes = home / f"consumer-classes-{digest}"
    with _locked(cache_root() / f".{home.name}-consumer.lock"):
        if not (classes / f"{MAIN_CLASS}.class").is_file():
            if shutil.which("javac") is None:
                raise FetchError("javac is not installed (a JDK, e.g. openjdk-17-jdk-headless, is needed)")
            staging = Path(tempfile.mkdtemp(prefix=".consumer-classes-", dir=home))
            command = ["javac", "-d", str(staging), "-cp", f"{home / 'lib'}/*", str(SOURCE)]
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False
            )
            if done.returncode != 0:
                shutil.rmtree(staging, ignore_errors=True)
                raise JavaProgramError(f"javac failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
            staging.rename(classes)
    return JavaClients(home / "lib", classes)


def commit_last_plus_one(
    clients: JavaClients,
    bootstrap_servers: str,
    group: str,
    topic: str,
    partition: int,
    records: int,
    *,
    timeout_s: float = 60.0,
) -> int:
    """Run ``CommitLastPlusOne``: the offset it committed (the last record read + 1)."""
    command = clients.command(MAIN_CLASS, bootstrap_servers, group, topic, partition, records, int(timeout_s))
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s + 60, check=False)
    if done.returncode != 0:
        raise JavaProgramError(f"{MAIN_CLASS} failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return int(done.stdout.strip().splitlines()[-1])
