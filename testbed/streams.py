"""A real Kafka Streams application with exactly-once v2, to kill mid-transaction.

``testbed/java/EosPipe.java`` copies a source topic to a sink topic with
``processing.guarantee=exactly_once_v2`` and commits only every 10 minutes, so its
transaction (transactional id ``<application.id>-<process UUID>-<thread index>``, the shape
Kafka Streams gives EOS v2 producers) is open while it runs. :meth:`StreamsEosApp.kill`
SIGKILLs the JVM: the transaction stays ``Ongoing`` on its coordinator until
``transaction.timeout.ms`` (10 minutes here), and read_committed consumers of the sink wait.

The jars (``org.apache.kafka:kafka-streams`` with its runtime dependencies, RocksDB left
out: the topology has no state store) are fetched with ``mvn`` like the broker's
(:mod:`testbed.maven`) into ``<cache>/streams-<version>/``; the source is compiled there with
``javac`` (a JDK) once.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from testbed.maven import (
    Artifact,
    FetchError,
    _jar_hashes,
    _locked,
    _run_mvn,
    cache_root,
    render_pom,
)

log = logging.getLogger(__name__)

#: The Kafka Streams release (the clients of the test bed's 4.4 brokers).
STREAMS_VERSION = "4.4.0"
SOURCE = Path(__file__).resolve().parent / "java" / "EosPipe.java"
MAIN_CLASS = "EosPipe"


def streams_home(version: str = STREAMS_VERSION) -> Path:
    """The jars and the compiled application, fetched and built once (file-locked)."""
    root = cache_root()
    home = root / f"streams-{version}"
    with _locked(root / f".streams-{version}.lock"):
        manifest = home / "manifest.json"
        classes = home / "classes" / f"{MAIN_CLASS}.class"
        source_stamp = str(SOURCE.stat().st_mtime_ns)
        if manifest.is_file():
            data = json.loads(manifest.read_text())
            if (
                data.get("files") == _jar_hashes(home)
                and data.get("source") == source_stamp
                and classes.is_file()
            ):
                return home
        staging = Path(tempfile.mkdtemp(prefix=f".streams-{version}-", dir=root))
        try:
            pom = staging / "pom-lib.xml"
            artifact = Artifact(
                "org.apache.kafka",
                "kafka-streams",
                version,
                exclusions=(("org.rocksdb", "rocksdbjni"),),
            )
            pom.write_text(render_pom(f"streams-{version}", [artifact]))
            _run_mvn(pom, staging / "lib")
            if shutil.which("javac") is None:
                raise FetchError("javac is not installed (a JDK, e.g. openjdk-17-jdk-headless, is needed)")
            (staging / "classes").mkdir()
            subprocess.run(
                ["javac", "-cp", f"{staging / 'lib'}/*", "-d", str(staging / "classes"), str(SOURCE)],
                check=True,
                capture_output=True,
                timeout=300,
            )
            data = {"version": version, "source": source_stamp, "files": _jar_hashes(staging)}
            (staging / "manifest.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
            if home.exists():
                shutil.rmtree(home)
            staging.rename(home)
        finally:
            if staging.exists():
                shutil.rmtree(staging)
    return home


class StreamsEosApp:
    """The EOS v2 pipe in a JVM of its own; counts the records it processed."""

    def __init__(self, bootstrap_servers: str, application_id: str, *, source: str, sink: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.application_id = application_id
        self.source = source
        self.sink = sink
        self.processed = 0
        self.output: list[str] = []
        self._started = threading.Event()
        self._process: subprocess.Popen[str] | None = None
        self._state_dir = tempfile.mkdtemp(prefix="kte-streams-")
        self._reader: threading.Thread | None = None

    def start(self, timeout_s: float = 120.0) -> Self:
        home = streams_home()
        self._process = subprocess.Popen(
            [
                "java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-cp", f"{home / 'lib'}/*{os.pathsep}{home / 'classes'}", MAIN_CLASS,
                self.bootstrap_servers, self.application_id, self.source, self.sink, self._state_dir,
            ],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, start_new_session=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, name="streams-output", daemon=True)
        self._reader.start()
        if not self._started.wait(timeout_s):
            self.kill()
            raise RuntimeError("Kafka Streams did not start: " + "\n".join(self.output[-30:]))
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for raw in self._process.stdout:
            line = raw.rstrip()
            if line == "PROCESSED":
                self.processed += 1
            else:
                self.output.append(line)
                if line == "STARTED":
                    self._started.set()

    def wait_processed(self, records: int, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.processed < records:
            if time.monotonic() > deadline or (
                self._process is not None and self._process.poll() is not None
            ):
                raise RuntimeError(
                    f"Kafka Streams processed {self.processed} of {records} records: "
                    + "\n".join(self.output[-30:])
                )
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL: no commit, no close; the open transaction stays with its coordinator."""
        proc = self._process
        if proc is not None:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            self._process = None
        if self._reader is not None:
            self._reader.join(timeout=10)
        shutil.rmtree(self._state_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.kill()
