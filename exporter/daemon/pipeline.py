"""The Spark session of the daemon, started once and kept warm, and the pipeline entry point."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from exporter.config import SparkConfig
from exporter.model import ClusterSnapshot, CycleResult, PipelineMemory, PipelineSettings

log = logging.getLogger(__name__)


class PipelineRunner:
    """The Spark session, started once and kept warm, and the one pipeline entry point."""

    def __init__(self, spark_config: SparkConfig, settings: PipelineSettings, *,
                 session: Any = None) -> None:
        """``session``: an existing SparkSession to use and leave running (tests, the CLI)."""
        self._spark_config = spark_config
        self.settings = settings
        self._spark: Any = session
        self._owns_session = session is None
        self._stopped = threading.Event()  # set without the lock: stop() must not wait twice
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start Spark and run the pipeline once on a tiny snapshot, so that the first real
        cycle does not pay for code generation."""
        with self._lock:
            self._start_locked()

    def _start_locked(self) -> None:
        if self._stopped.is_set():
            raise RuntimeError("the pipeline is stopped")
        if self._spark is not None:
            return
        from exporter.pipeline.compute import compute
        from exporter.pipeline.session import spark_session
        from exporter.pipeline.warmup import warmup_snapshot

        started = time.monotonic()
        self._spark = spark_session(self._spark_config)
        if self._stopped.is_set():  # stopping while the JVM started: no warm-up run
            return
        snapshot = warmup_snapshot()
        compute(self._spark, snapshot, self.settings, None, snapshot.taken_at_ms)
        log.info("Spark session ready and warm in %.1f s (%s)", time.monotonic() - started,
                 self._spark_config.redacted_connect_url or self._spark_config.master)

    def compute(self, snapshot: ClusterSnapshot, memory: PipelineMemory | None,
                now_ms: int) -> CycleResult:
        from exporter.pipeline.compute import compute

        with self._lock:  # one pipeline run at a time: clusters share the session
            self._start_locked()
            return compute(self._spark, snapshot, self.settings, memory, now_ms)

    def stop(self) -> None:
        """Stop Spark for good (after a pipeline run in flight, or the JVM's start)."""
        self._stopped.set()
        with self._lock:
            if self._spark is not None and self._owns_session:
                from exporter.pipeline.session import stop as stop_spark

                stop_spark(self._spark)
            self._spark = None
