"""A Spark standalone cluster on loopback, from the pyspark wheel (tests and benchmarks).

:class:`SparkStandalone` starts a master and ``workers`` workers with the wheel's
``bin/spark-class`` (``org.apache.spark.deploy.master.Master`` and
``org.apache.spark.deploy.worker.Worker``), each a JVM in a process group of its own, on
127.0.0.1 with free ports; it waits (bounded) until every worker has registered with the
master, and always tears the JVMs down (SIGTERM to each group, then SIGKILL; an ``atexit``
guard covers a crash of the test process). Executors the workers start for an application
are children of the workers and go with them.

A driver joins with ``master=spark://127.0.0.1:PORT`` (:attr:`SparkStandalone.url`);
``SPARK_LOCAL_IP=127.0.0.1`` keeps its own endpoints on loopback too.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from types import TracebackType
from typing import Self

log = logging.getLogger(__name__)

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: The master and each worker get this heap (the daemons are small; executors have their own).
DAEMON_MEMORY = "256m"
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 20.0
LOG_TAIL_LINES = 40

_live: weakref.WeakSet[SparkStandalone] = weakref.WeakSet()


class SparkStartError(RuntimeError):
    """The master or a worker did not start (its log's tail is in the message)."""


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _tail(path: Path) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
    except OSError as e:
        return f"(no log: {e})"


class SparkStandalone:
    """A master and ``workers`` workers of ``worker_cores`` cores and ``worker_memory`` for
    executors each. Use as a context manager."""

    def __init__(
        self,
        *,
        workers: int = 2,
        worker_cores: int = 1,
        worker_memory: str = "1g",
        work_dir: Path | None = None,
    ) -> None:
        self.workers = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self._own_dir = work_dir is None
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="kte-spark-standalone-"))
        self.port = free_port()
        self.webui_port = free_port()
        self._procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- start ----------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE", "PYSPARK_SUBMIT_ARGS")
        }
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
            SPARK_LOG_DIR=str(self.work_dir / "logs"),
            SPARK_WORKER_DIR=str(self.work_dir / "work"),
            SPARK_LOCAL_DIRS=str(self.work_dir / "local"),
            MALLOC_ARENA_MAX="2",
        )
        return env

    def _launch(self, name: str, *args: str) -> None:
        log_path = self.work_dir / f"{name}.log"
        command = [str(spark_home() / "bin" / "spark-class"), *args]
        with log_path.open("wb") as out:
            proc = subprocess.Popen(
                command,
                cwd=self.work_dir,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._procs.append((name, proc, log_path))

    def start(self) -> None:
        """Start the master, then the workers; return once every worker is registered."""
        _live.add(self)
        (self.work_dir / "logs").mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            self._launch(
                "master",
                MASTER_CLASS,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(self.webui_port),
            )
            self._wait(lambda: self._state() is not None, deadline, "the master")
            for i in range(1, self.workers + 1):
                self._launch(
                    f"worker-{i}",
                    WORKER_CLASS,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(self.worker_cores),
                    "--memory",
                    self.worker_memory,
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(self.work_dir / f"work-{i}"),
                    self.url,
                )
            self._wait(lambda: self.alive_workers() >= self.workers, deadline, f"{self.workers} workers")
        except BaseException:
            self.stop()
            raise
        log.info("Spark standalone master %s with %d worker(s) up", self.url, self.workers)

    def _state(self) -> dict[str, object] | None:
        """The master's state (its web UI's JSON), None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=2) as r:
                state: dict[str, object] = json.loads(r.read().decode())
                return state
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def alive_workers(self) -> int:
        state = self._state() or {}
        workers = state.get("workers", [])
        return (
            sum(1 for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE")
            if isinstance(workers, list)
            else 0
        )

    def _wait(self, ready: object, deadline: float, what: str) -> None:
        assert callable(ready)
        while not ready():
            for name, proc, log_path in self._procs:
                if proc.poll() is not None:
                    raise SparkStartError(f"Spark {name} exited with {proc.returncode}:\n{_tail(log_path)}")
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {name}\n{_tail(path)}" for name, _, path in self._procs)
                raise SparkStartError(f"{what} did not start within {START_TIMEOUT_S:.0f} s:\n{logs}")
            time.sleep(0.5)

    # --- stop -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Workers first (their executors with them), then the master; every group ends."""
        for name, proc, _ in reversed(self._procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("Spark %s ignored SIGTERM: killing it", name)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_TIMEOUT_S)
        self._procs.clear()
        _live.discard(self)
        if self._own_dir:
            import shutil

            shutil.rmtree(self.work_dir, ignore_errors=True)

    def log_tails(self) -> str:
        return "\n".join(f"--- {name}\n{_tail(path)}" for name, _, path in self._procs)


@atexit.register
def _stop_live() -> None:
    for cluster in list(_live):
        cluster.stop()
