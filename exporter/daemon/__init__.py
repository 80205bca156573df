"""The long-running exporter: every cluster's cycle on its interval, computed in rounds, and
an HTTP endpoint that only renders the latest results.

Every cluster collects a snapshot (``exporter.kafka``) when its interval is due, never two at
once; the snapshots ready together are computed in one round on Spark (``exporter.pipeline``)
and each cluster publishes an immutable :class:`ClusterState`. ``/metrics`` renders those
states; ``/healthz`` says the process serves; ``/readyz`` answers 503 until a first complete
cycle.

Modules: ``pipeline`` (the Spark session and the pipeline entry point), ``cycle`` (one
cluster's cycle), ``rounds`` (the schedule and its rounds), ``capacity`` (whether the
clusters fit), ``http`` (the endpoints); this module wires them into one process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import (
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    disable_created_metrics,
)

from exporter.config import Config, WebConfig
from exporter.daemon.cycle import ClusterJob, CycleListener
from exporter.daemon.findings import FINDINGS_PATH, FindingsApi, FindingsIndex
from exporter.daemon.http import MetricsServer
from exporter.daemon.listen import ListenError, listen_error_text
from exporter.daemon.memory_store import MemoryStore
from exporter.daemon.pipeline import PipelineRunner
from exporter.daemon.rounds import RoundScheduler
from exporter.daemon.web import WebSettings, load_web_config
from exporter.metrics.collector import ExporterMetrics, TransactionHealthCollector
from exporter.metrics.state import StateStore

__all__ = ["ClusterJob", "Daemon", "PipelineRunner", "RoundScheduler"]

log = logging.getLogger(__name__)
#: How long stop() and reload() wait, in all, for the cycles in flight to end.
STOP_WAIT_S = 10.0


class Daemon:
    """Scheduler, jobs, Spark session and HTTP server of one exporter process."""

    def __init__(
        self,
        config: Config,
        *,
        registry: CollectorRegistry | None = None,
        pipeline: PipelineRunner | None = None,
        listeners: Sequence[CycleListener] = (),
    ) -> None:
        self.config = config
        # Counters' *_created series double the series count and no dashboard reads them.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        if registry is None:
            registry = CollectorRegistry()
            # process_* (CPU, memory, file descriptors) and python_info, as every exporter.
            registry.register(PROCESS_COLLECTOR)
            registry.register(PLATFORM_COLLECTOR)
        self.registry = registry
        names = [c.name for c in config.clusters]
        self.store = StateStore(names)
        self.metrics = ExporterMetrics(self.registry, names, config.cluster_label)
        self._collector = TransactionHealthCollector(
            self.store,
            config.pipeline,
            cluster_label=config.cluster_label,
            intervals_ms={c.name: c.interval_ms for c in config.clusters},
        )
        self.registry.register(self._collector)
        self.pipeline = pipeline or PipelineRunner(config.spark, config.pipeline)
        #: The snapshot facts ``/api/v1/findings`` shows beside each result (a cycle listener).
        self.findings = FindingsIndex()
        listeners = (self.findings, *listeners)
        self.history: Any = None
        if config.history is not None:  # the history store is one more cycle listener
            from exporter.history.metrics import HistoryMetrics
            from exporter.history.writer import HistoryWriter, check_history_path

            check_history_path(config.history)  # ConfigError, as state_dir below

            self.history = HistoryWriter(config.history, self.pipeline.current_session)
            listeners = (*listeners, self.history)
            self.registry.register(HistoryMetrics(self.history))
        #: Guarded auto-remediation (clusters' remediation:), one more cycle listener.
        self.remediation: Any = None
        if any(c.remediation.enabled for c in config.clusters):
            from exporter.remediation.engine import Remediation

            self.remediation = Remediation(
                config.clusters,
                counter=self.metrics.remediations,
                state_dir=config.state_dir,
                history=self.history,
            )
            listeners = (*listeners, self.remediation)
        self._listeners = tuple(listeners)
        self.rounds = RoundScheduler(
            self.pipeline,
            workers=config.collection.workers,
            clients_kept_open=config.collection.clients_kept_open,
        )
        self.jobs = self._build_jobs(config, self.store)
        #: The clusters' memory across restarts (``state_dir``); raises ConfigError when the
        #: directory cannot be written.
        self.memory_store = MemoryStore(config.state_dir) if config.state_dir else None
        for job in self.jobs:
            job.attribution = config.attribution
            if self.memory_store is not None:
                job.restore_memory(self.memory_store)
        self._started = False
        self._server: MetricsServer | None = None
        #: TLS and basic auth of the endpoints (web.config_file, checked at start-up).
        self.web_settings = _web_settings(config)

    def _build_jobs(self, config: Config, store: StateStore) -> list[ClusterJob]:
        return [
            ClusterJob.build(
                c, self.pipeline, store, self.metrics, self._listeners, stage_pool=self.rounds.stage_pool
            )
            for c in config.clusters
        ]

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return self._server.port

    def readiness(self) -> tuple[bool, str]:
        """What /readyz answers: ready once any cluster completed a collection cycle."""
        if self.store.ready:
            return True, "ready"
        return False, "not ready: no complete collection cycle yet"

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
        self.rounds.start(self.jobs)
        self._started = True
        self.rounds.estimate()
        log.info(
            "exporter started for %d cluster(s), listening on %s",
            len(self.jobs),
            self.config.web.listen_address,
        )

    def _start_http(self) -> None:
        self._server = self._bind(self.config.web)
        self._server.start()

    def _bind(self, web: WebConfig, settings: WebSettings | None = None) -> MetricsServer:
        """A server bound to ``web.listen_address`` (not yet serving) with ``settings`` (by
        default the running ones); ListenError if it cannot be bound."""
        host, port = web.host_port
        try:
            return MetricsServer(
                self.registry,
                host=host,
                port=port,
                telemetry_path=web.telemetry_path,
                health=self.health,
                ready=self.readiness,
                settings=self.web_settings if settings is None else settings,
                read_timeout_s=web.read_timeout_ms / 1000,
                workers=web.workers,
                api={FINDINGS_PATH: self._findings_api()},
            )
        except OSError as e:
            raise ListenError(e.errno, listen_error_text(web, e)) from None

    def _findings_api(self) -> FindingsApi:
        # Read at each request: reload replaces the store and the config.
        return FindingsApi(lambda: self.store, lambda: self.config.clusters, self.findings)

    def stop(self) -> None:
        """Stop within seconds: no new cycle starts, a cycle in flight has its Kafka clients
        closed under it and is waited for briefly, then Spark stops."""
        self.rounds.stop()
        if self._server is not None:
            self._server.stop()
            self._server = None
        for job in self.jobs:
            job.close()
        if self.remediation is not None:
            self.remediation.close()
        if self.history is not None:
            self.history.close()  # flushes what the last cycles left, while Spark still runs
        self.pipeline.stop()  # waits for a pipeline run in flight, then stops Spark
        if self._started and not self.rounds.join(STOP_WAIT_S):
            log.warning("the schedule was still running %.0f s after stop", STOP_WAIT_S)
        if _wait_idle(self.jobs, STOP_WAIT_S):
            self.rounds.close()
        log.info("exporter stopped")

    def wait_idle(self, wait_s: float) -> bool:
        """After :meth:`stop`: True when no cycle is in flight within ``wait_s`` (tests)."""
        return _wait_idle(self.jobs, wait_s)

    def reload(self, config: Config, web_settings: WebSettings | None = None) -> None:
        """Run on ``config`` from now on (SIGHUP). ``config`` is already validated;
        ``web_settings`` are the web config file's (read again from ``web.config_file`` when
        None: a new password or certificate under the same file name is applied too).

        Everything that can fail comes first and changes nothing when it fails: the web
        config file is read (:class:`~exporter.daemon.web.WebConfigError`), its TLS material
        loaded, and a new listen address bound
        (:class:`~exporter.daemon.listen.ListenError`). Then every cluster gets a new job
        (new Kafka clients) and a fresh store; a cluster kept by name keeps its last
        published state (its findings and their confirmation counts) and is collected again
        at once. The HTTP server is replaced only when the listen address changed; otherwise
        it serves with the new users and TLS material from the next connection on. A change
        of the ``spark`` section or of ``state_dir`` needs a restart (logged and ignored);
        ``pipeline`` settings apply from the next cycle.
        """
        config = self._restart_only(config)
        web = web_settings if web_settings is not None else _web_settings(config)
        if self._server is not None and config.web.listen_address != self.config.web.listen_address:
            server = self._bind(config.web, web)  # raises before anything changed
            switch_server = self._move_server(server)
        elif self._server is not None:
            switch_server = self._server.prepare(web)  # loads the TLS files, or raises
        else:
            switch_server = _nothing
        self._replace_jobs(config)
        self.web_settings = web
        switch_server()
        log.info(
            "configuration reloaded: %d cluster(s) (%s), listening on %s%s",
            len(self.jobs),
            ", ".join(job.cluster.name for job in self.jobs),
            config.web.listen_address,
            f", web config {web.source}" if web.source else "",
        )

    def _restart_only(self, config: Config) -> Config:
        """``config`` with the running ``spark`` and ``state_dir``: they apply at start only."""
        from dataclasses import replace

        old = self.config
        if config.spark != old.spark:
            log.warning(
                "reload: the spark section changed; restart the exporter to apply it (keeping %s)",
                old.spark.redacted_connect_url or old.spark.master,
            )
            config = replace(config, spark=old.spark)
        if config.state_dir != old.state_dir:
            log.warning("reload: state_dir changed; restart the exporter to apply it")
            config = replace(config, state_dir=old.state_dir)
        return config

    def _move_server(self, server: MetricsServer) -> Callable[[], None]:
        def move() -> None:
            old, self._server = self._server, server
            server.start()
            if old is not None:
                old.stop()

        return move

    def _replace_jobs(self, config: Config) -> None:
        """New jobs and a new store for ``config``'s clusters, scheduled at once."""
        for job in self.jobs:
            job.close()
        if self._started:
            self.rounds.replace([])  # the closed jobs' snapshots waiting for a round end now
        _wait_idle(self.jobs, STOP_WAIT_S)
        kept = {job.cluster.name: job for job in self.jobs}
        names = [c.name for c in config.clusters]
        store = StateStore(names)
        for name in names:
            if name in kept:
                store.put(self.store.get(name))
        self.metrics.add_clusters(names)
        self.registry.unregister(self._collector)
        self._collector = TransactionHealthCollector(
            store,
            config.pipeline,
            cluster_label=config.cluster_label,
            intervals_ms={c.name: c.interval_ms for c in config.clusters},
        )
        self.registry.register(self._collector)
        self.pipeline.settings = config.pipeline
        self.store, self.config = store, config
        if self.remediation is not None:
            self.remediation.configure(config.clusters)
        elif any(c.remediation.enabled for c in config.clusters):
            log.warning("reload: remediation was off at start; restart the exporter to turn it on")
        self.jobs = self._build_jobs(config, store)
        for job in self.jobs:  # a kept cluster keeps its confirmations and watched transactions
            job.attribution = config.attribution
            if job.cluster.name in kept:
                job.memory = kept[job.cluster.name].memory
            if self.memory_store is not None:
                job.restore_memory(self.memory_store)
        if self._started:
            self.rounds.replace(self.jobs)
            self.rounds.estimate()


def _web_settings(config: Config) -> WebSettings:
    """TLS and basic auth from ``web.config_file`` (read now); none without the key."""
    return load_web_config(config.web.config_file) if config.web.config_file else WebSettings()


def _nothing() -> None:
    pass


def _wait_idle(jobs: Sequence[ClusterJob], wait_s: float) -> bool:
    """Wait for every job's cycle in flight to end, ``wait_s`` in all."""
    import time

    deadline = time.monotonic() + wait_s
    return all([job.wait_idle(deadline - time.monotonic()) for job in jobs])
