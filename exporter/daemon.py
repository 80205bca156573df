"""The long-running exporter: one scheduled cycle per cluster, an HTTP endpoint that only
renders the latest results.

Per cluster, APScheduler runs :meth:`ClusterJob.run_cycle` every interval, never two at
once, misfires coalesced. A cycle collects a snapshot (``exporter.kafka``), computes the
metrics and findings on Spark (``exporter.pipeline``) and publishes an immutable
:class:`ClusterState`. ``/metrics`` renders those states; ``/healthz`` says the process
serves; ``/readyz`` answers 503 until a first complete cycle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    disable_created_metrics,
    generate_latest,
)

from exporter.config import ClusterConfig, Config, SparkConfig
from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.collector import SnapshotCollector
from exporter.kafka.errors import KafkaUnavailable
from exporter.metrics.collector import ExporterMetrics, TransactionHealthCollector
from exporter.metrics.state import ClusterState, StateStore
from exporter.model import ClusterSnapshot, CycleResult, PipelineSettings

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

    def compute(self, snapshot: ClusterSnapshot, previous: CycleResult | None,
                now_ms: int) -> CycleResult:
        from exporter.pipeline.compute import compute

        with self._lock:  # one pipeline run at a time: clusters share the session
            self._start_locked()
            return compute(self._spark, snapshot, self.settings, previous, now_ms)

    def stop(self) -> None:
        """Stop Spark for good (after a pipeline run in flight, or the JVM's start)."""
        self._stopped.set()
        with self._lock:
            if self._spark is not None and self._owns_session:
                from exporter.pipeline.session import stop as stop_spark

                stop_spark(self._spark)
            self._spark = None


class ClusterJob:
    """One cluster's cycle: collect, compute, publish. Never raises into the scheduler."""

    def __init__(self, cluster: ClusterConfig, collector: SnapshotCollector,
                 pipeline: PipelineRunner, store: StateStore, metrics: ExporterMetrics,
                 clock: Callable[[], float] = time.time) -> None:
        self.cluster = cluster
        self._collector = collector
        self._pipeline = pipeline
        self._store = store
        self._metrics = metrics
        self._clock = clock
        self._running = threading.Lock()
        self._stopping = threading.Event()

    @classmethod
    def build(cls, cluster: ClusterConfig, pipeline: PipelineRunner, store: StateStore,
              metrics: ExporterMetrics) -> ClusterJob:
        admin = ClusterAdmin(bootstrap_servers=cluster.bootstrap_servers,
                             properties=cluster.kafka,
                             request_timeout_ms=cluster.request_timeout_ms)
        collector = SnapshotCollector(cluster=cluster.name, admin=admin,
                                      topic_filter=cluster.topics.matcher(),
                                      read_batch_timestamps=cluster.read_batch_timestamps)
        return cls(cluster, collector, pipeline, store, metrics)

    def close(self) -> None:
        """No new cycle; the Kafka clients close, so a cycle in flight fails fast."""
        self._stopping.set()
        self._collector.close()

    def wait_idle(self, wait_s: float = 10.0) -> None:
        if self._running.acquire(timeout=wait_s):
            self._running.release()
        else:
            log.warning("cycle for cluster %s still running after %.0f s", self.cluster.name, wait_s)

    def run_cycle(self) -> None:
        if self._stopping.is_set() or not self._running.acquire(blocking=False):
            return
        try:
            self._run_cycle()
        finally:
            self._running.release()

    def _run_cycle(self) -> None:
        name = self.cluster.name
        started = time.monotonic()
        state = self._store.get(name)
        previous = state.result
        try:
            snapshot = self._collector.collect(
                describe_extra=[w[0] for w in previous.watched_ongoing] if previous else ())
        except KafkaUnavailable as e:
            log.warning("cycle for cluster %s failed: %s", name, e)
            self._metrics.request_errors.labels(name, "Metadata", e.error).inc()
            self._finish(replace(state, up=False, stage_seconds=()), "failed", started)
            return
        except Exception:  # a bug must not stop the schedule: log it, mark the cycle failed
            log.exception("cycle for cluster %s failed unexpectedly", name)
            self._finish(replace(state, up=False), "failed", started)
            return
        for error in snapshot.errors:
            self._metrics.request_errors.labels(name, error.api, error.error).inc()
        if snapshot.errors:
            log.warning("cycle for cluster %s lost %d part(s), first: %s %s on broker %s",
                        name, len(snapshot.errors), snapshot.errors[0].api,
                        snapshot.errors[0].error, snapshot.errors[0].broker_id)
        if self._stopping.is_set():
            return
        pipeline_started = time.monotonic()
        try:
            result = self._pipeline.compute(snapshot, previous, int(self._clock() * 1000))
        except Exception:
            log.exception("pipeline failed for cluster %s", name)
            self._finish(replace(state, up=False), "failed", started)
            return
        stages = (*snapshot.stage_seconds, ("pipeline", time.monotonic() - pipeline_started))
        for coordinator in result.coordinators:  # series exist at 0 before any abort
            self._metrics.timeout_aborts.labels(name, str(coordinator.coordinator_id))
        for abort in result.timeout_aborts:
            self._metrics.timeout_aborts.labels(name, str(abort.coordinator_id)).inc()
        complete = snapshot.complete
        now_ms = int(self._clock() * 1000)
        self._finish(ClusterState(
            cluster=name, result=result, snapshot_taken_at_ms=snapshot.taken_at_ms, up=complete,
            last_success_at_ms=now_ms if complete else state.last_success_at_ms,
            cycles_complete=state.cycles_complete + (1 if complete else 0),
            stage_seconds=stages,
        ), "complete" if complete else "partial", started)

    def _finish(self, state: ClusterState, outcome: str, started: float) -> None:
        if self._stopping.is_set():
            return  # a cycle cut short by stop() publishes nothing
        self._store.put(state)
        seconds = time.monotonic() - started
        self._metrics.cycles.labels(self.cluster.name, outcome).inc()
        self._metrics.cycle_duration.labels(self.cluster.name).observe(seconds)
        log.info("cycle for cluster %s: %s in %.2f s", self.cluster.name, outcome, seconds)


class _Handler(BaseHTTPRequestHandler):
    daemon_ref: Daemon  # set on the subclass built per server

    def do_GET(self) -> None:
        d = self.daemon_ref
        path = self.path.split("?", 1)[0]
        if path == d.config.web.telemetry_path:
            self._reply(200, generate_latest(d.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            self._reply(200, b"ok\n")
        elif path == "/readyz":
            if d.store.ready:
                self._reply(200, b"ready\n")
            else:
                self._reply(503, b"not ready: no complete collection cycle yet\n")
        elif path == "/":
            body = (f"<html><head><title>kafka-txn-exporter</title></head><body>"
                    f"<h1>kafka-txn-exporter</h1><p><a href='{d.config.web.telemetry_path}'>"
                    f"Metrics</a> <a href='/healthz'>healthz</a> <a href='/readyz'>readyz</a>"
                    f"</p></body></html>")
            self._reply(200, body.encode(), "text/html; charset=utf-8")
        else:
            self._reply(404, b"not found\n")

    def _reply(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8"
               ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: %s", format % args)


class Daemon:
    """Scheduler, jobs, Spark session and HTTP server of one exporter process."""

    def __init__(self, config: Config, *, registry: CollectorRegistry | None = None,
                 pipeline: PipelineRunner | None = None) -> None:
        self.config = config
        # Counters' *_created series double the series count and no dashboard reads them.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry or CollectorRegistry()
        names = [c.name for c in config.clusters]
        self.store = StateStore(names)
        self.metrics = ExporterMetrics(self.registry, names)
        self.registry.register(TransactionHealthCollector(self.store, config.pipeline))
        self.pipeline = pipeline or PipelineRunner(config.spark, config.pipeline)
        self.jobs = [ClusterJob.build(c, self.pipeline, self.store, self.metrics)
                     for c in config.clusters]
        self._scheduler: Any = None
        self._server: ThreadingHTTPServer | None = None
        self._server_thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Serve HTTP, warm Spark in the background and schedule the cycles; returns at once
        (the first cycle waits for Spark), so a SIGTERM during start-up is honoured."""
        self._start_http()
        threading.Thread(target=self._warm_pipeline, name="spark-warmup", daemon=True).start()
        from apscheduler.schedulers.background import BackgroundScheduler

        self._scheduler = BackgroundScheduler(
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone="UTC")
        for job in self.jobs:
            self._scheduler.add_job(job.run_cycle, "interval", id=job.cluster.name,
                                    name=f"cycle {job.cluster.name}",
                                    seconds=job.cluster.interval_ms / 1000,
                                    next_run_time=_now_utc())
        self._scheduler.start()
        log.info("exporter started for %d cluster(s), listening on %s",
                 len(self.jobs), self.config.web.listen_address)

    def _warm_pipeline(self) -> None:
        try:
            self.pipeline.start()
        except Exception:  # the first cycle retries and reports it
            log.exception("starting Spark failed")

    def _start_http(self) -> None:
        host, port = self.config.web.host_port
        handler = type("Handler", (_Handler,), {"daemon_ref": self})
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._server_thread = threading.Thread(target=self._server.serve_forever,
                                               name="http", daemon=True)
        self._server_thread.start()

    def stop(self) -> None:
        """Stop within seconds: no new cycle starts, a cycle in flight has its Kafka clients
        closed under it and is waited for briefly, then Spark stops."""
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for job in self.jobs:
            job.close()
        self.pipeline.stop()  # waits for a pipeline run in flight, then stops Spark
        for job in self.jobs:
            job.wait_idle()
        log.info("exporter stopped")


def _now_utc() -> Any:
    import datetime

    return datetime.datetime.now(datetime.UTC)
