"""The long-running exporter: one scheduled cycle per cluster, an HTTP endpoint that only
renders the latest results.

Per cluster, APScheduler runs :meth:`ClusterJob.run_cycle` every interval, never two at
once, misfires coalesced. A cycle collects a snapshot (``exporter.kafka``), computes the
metrics and findings on Spark (``exporter.pipeline``) and publishes an immutable
:class:`ClusterState`. ``/metrics`` renders those states; ``/healthz`` says the process
serves; ``/readyz`` answers 503 until a first complete cycle.

Modules: ``pipeline`` (the Spark session and the pipeline entry point), ``cycle`` (one
cluster's cycle), ``http`` (the endpoints); this module wires them into one process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from http.server import ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, disable_created_metrics

from exporter.config import Config
from exporter.daemon.cycle import ClusterJob, CycleListener
from exporter.daemon.http import Handler
from exporter.daemon.pipeline import PipelineRunner
from exporter.metrics.collector import ExporterMetrics, TransactionHealthCollector
from exporter.metrics.state import StateStore

__all__ = ["ClusterJob", "Daemon", "PipelineRunner"]

log = logging.getLogger(__name__)


class Daemon:
    """Scheduler, jobs, Spark session and HTTP server of one exporter process."""

    def __init__(self, config: Config, *, registry: CollectorRegistry | None = None,
                 pipeline: PipelineRunner | None = None,
                 listeners: Sequence[CycleListener] = ()) -> None:
        self.config = config
        # Counters' *_created series double the series count and no dashboard reads them.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry or CollectorRegistry()
        names = [c.name for c in config.clusters]
        self.store = StateStore(names)
        self.metrics = ExporterMetrics(self.registry, names)
        self.registry.register(TransactionHealthCollector(self.store, config.pipeline))
        self.pipeline = pipeline or PipelineRunner(config.spark, config.pipeline)
        self.jobs = [ClusterJob.build(c, self.pipeline, self.store, self.metrics, listeners)
                     for c in config.clusters]
        self._scheduler: Any = None
        self._server: ThreadingHTTPServer | None = None
        self._server_thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return int(self._server.server_address[1])

    def health(self) -> tuple[bool, str]:
        """What /healthz answers: (healthy, why). Unhealthy means a restart would help: no
        pipeline run succeeded for ``spark.unhealthy_after_intervals`` intervals although
        cycles asked for one (a Kafka outage alone never makes the process unhealthy)."""
        return self.pipeline.health()

    def start(self) -> None:
        """Start Spark in the background, serve HTTP and schedule the cycles at once; returns
        at once, so a SIGTERM during start-up is honoured. The JVM starts while the first
        cycle collects from Kafka; the first cycle's pipeline run waits for it."""
        intervals = [c.interval_ms / 1000 for c in self.config.clusters]
        if intervals:
            self.pipeline.use_interval(min(intervals))
        self.pipeline.begin_start()
        self._start_http()
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
        handler = type("Handler", (Handler,), {"daemon_ref": self})
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
