"""Kafka's own Java clients as the test bed's applications: a KafkaConsumer that commits the
way Spring does, and a Kafka Streams exactly-once application.

The programs are the sources in ``testbed/java/``, compiled with ``javac`` against the
``kafka-streams`` jars (which bring ``kafka-clients``) that :func:`testbed.maven.fetch_clients`
fetches, into ``<cache>/<jars>/classes-<sha of the sources>`` (compiled once per change).

* :func:`commit_last_plus_one`: ``CommitLastPlusOne``, a read_committed consumer of one
  partition that reads N records and commits ``record.offset() + 1`` with ``commitSync`` after
  each poll (Spring's AckMode BATCH).
* :class:`StreamsApp`: ``EosPassThrough``, ``processing.guarantee=exactly_once_v2`` copying
  one topic to another, its transactions open for the commit interval; a subprocess started
  and stopped by the ``with`` block.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from testbed.maven import DEFAULT_KAFKA_VERSION, JarSet, _locked, cache_root, fetch_clients

log = logging.getLogger(__name__)

SOURCES = Path(__file__).resolve().parent / "java"
JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
COMPILE_TIMEOUT_S = 300.0


class JavaProgramError(RuntimeError):
    """A Java program of the test bed failed; carries its output."""


@dataclass(frozen=True, slots=True)
class JavaClients:
    """The compiled programs and the classpath to run them."""

    jars: JarSet
    classes: Path

    @property
    def classpath(self) -> str:
        return os.pathsep.join([str(self.classes), self.jars.classpath])

    def command(self, main: str, *args: object) -> list[str]:
        return ["java", *JVM_OPTIONS, "-cp", self.classpath, main, *(str(a) for a in args)]


def prepare(version: str = DEFAULT_KAFKA_VERSION, *, cache: Path | None = None) -> JavaClients:
    """Fetch the client jars and compile the programs (both cached)."""
    jars = fetch_clients(version, cache=cache)
    sources = sorted(SOURCES.glob("*.java"))
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    classes = jars.home / f"classes-{digest.hexdigest()[:16]}"
    with _locked((cache or cache_root()) / f".{jars.name}-classes.lock"):
        if not (classes / ".compiled").is_file():
            staging = Path(tempfile.mkdtemp(prefix=".classes-", dir=jars.home))
            command = ["javac", "-d", str(staging), "-cp", jars.classpath, *(str(s) for s in sources)]
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False
            )
            if done.returncode != 0:
                raise JavaProgramError(f"javac failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
            (staging / ".compiled").write_text("ok\n")
            staging.rename(classes)
    return JavaClients(jars, classes)


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
    command = clients.command(
        "CommitLastPlusOne", bootstrap_servers, group, topic, partition, records, int(timeout_s)
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s + 60, check=False)
    if done.returncode != 0:
        raise JavaProgramError(f"CommitLastPlusOne failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return int(done.stdout.strip().splitlines()[-1])


class StreamsApp:
    """``EosPassThrough`` running as a subprocess while the ``with`` block lasts."""

    def __init__(
        self,
        clients: JavaClients,
        bootstrap_servers: str,
        application_id: str,
        input_topic: str,
        output_topic: str,
        *,
        commit_interval_ms: int = 600_000,
        log_path: Path | None = None,
    ) -> None:
        self.application_id = application_id
        self._state_dir = tempfile.TemporaryDirectory(prefix="kte-streams-")
        self._command = clients.command(
            "EosPassThrough",
            bootstrap_servers,
            application_id,
            input_topic,
            output_topic,
            self._state_dir.name,
            commit_interval_ms,
        )
        self._log_path = log_path or Path(self._state_dir.name) / "streams.log"
        self._log: IO[str] | None = None
        self._process: subprocess.Popen[str] | None = None
        self._running = threading.Event()
        self._reader: threading.Thread | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        self._log = self._log_path.open("w")
        self._process = subprocess.Popen(
            self._command, stdout=subprocess.PIPE, stderr=self._log, text=True, start_new_session=True
        )
        self._reader = threading.Thread(target=self._read, daemon=True, name=f"streams-{self.application_id}")
        self._reader.start()

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            if line.strip() == "RUNNING":
                self._running.set()

    def wait_running(self, timeout_s: float = 120.0) -> None:
        """Until the application reports RUNNING; fails with its log when it exits first."""
        deadline = time.monotonic() + timeout_s
        while not self._running.wait(0.5):
            if self._process is None or self._process.poll() is not None or time.monotonic() > deadline:
                raise JavaProgramError(f"Kafka Streams {self.application_id} is not running:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (the application closes), then SIGKILL; always reaped."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout_s)
        if self._reader is not None:
            self._reader.join(timeout_s)
        if self._log is not None:
            self._log.close()
            self._log = None
        self._state_dir.cleanup()
