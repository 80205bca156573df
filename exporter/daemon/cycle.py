"""One cluster's cycle: collect, compute, publish."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from exporter.config import ClusterConfig
from exporter.daemon import heap
from exporter.daemon.memory_store import MemoryStore, max_age_ms
from exporter.daemon.pipeline import PipelineRunner, PipelineTimeoutError, PipelineUnavailableError
from exporter.groups_config import BUILTIN_RULES, AttributionRule
from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.collector import SnapshotCollector
from exporter.kafka.errors import KafkaUnavailable
from exporter.metrics.collector import ExporterMetrics
from exporter.metrics.state import ClusterState, StateStore
from exporter.model import ClusterSnapshot, CycleResult, PipelineMemory

log = logging.getLogger(__name__)

#: Called after every cycle whose pipeline ran (the history store is one). Must not block:
#: a listener that needs I/O hands the data to a thread of its own.
CycleListener = Callable[[ClusterSnapshot, CycleResult], None]


class ClusterJob:
    """One cluster's cycle: collect, compute, publish. Never raises into the scheduler."""

    def __init__(
        self,
        cluster: ClusterConfig,
        collector: SnapshotCollector,
        pipeline: PipelineRunner,
        store: StateStore,
        metrics: ExporterMetrics,
        clock: Callable[[], float] = time.time,
        listeners: Sequence[CycleListener] = (),
    ) -> None:
        self.cluster = cluster
        self._listeners = tuple(listeners)
        self._collector = collector
        self._pipeline = pipeline
        self._store = store
        self._metrics = metrics
        self._clock = clock
        self._running = threading.Lock()
        self._stopping = threading.Event()
        #: What the pipeline handed this cluster's next cycle (confirmations, watched
        #: transactions, running totals): owned here, flowing one way, never read back from
        #: the scrape store.
        self.memory: PipelineMemory | None = None
        #: Transactional id -> application rules (config ``attribution``).
        self.attribution: tuple[AttributionRule, ...] = BUILTIN_RULES
        #: Where the memory outlives the process (config ``state_dir``); None: nowhere.
        self.memory_store: MemoryStore | None = None
        #: Scheduled runs skipped since the last cycle ended: logged once, when it ends.
        self._skipped = 0
        self._finished_once = False
        self._behind = False

    def restore_memory(self, store: MemoryStore) -> None:
        """Keep the memory in ``store`` from now on, going on from what a previous process
        saved there when it is recent enough (see :mod:`exporter.daemon.memory_store`)."""
        self.memory_store = store
        if self.memory is None:
            self.memory = store.load(
                self.cluster.name, int(self._clock() * 1000), max_age_ms(self.cluster.interval_ms)
            )

    @classmethod
    def build(
        cls,
        cluster: ClusterConfig,
        pipeline: PipelineRunner,
        store: StateStore,
        metrics: ExporterMetrics,
        listeners: Sequence[CycleListener] = (),
    ) -> ClusterJob:
        admin = ClusterAdmin(
            bootstrap_servers=cluster.bootstrap_servers,
            properties=cluster.kafka,
            request_timeout_ms=cluster.request_timeout_ms,
        )
        collector = SnapshotCollector(
            cluster=cluster.name,
            admin=admin,
            topic_filter=cluster.topics.matcher(),
            named_topics=cluster.topics.named_topics(),
            read_batch_timestamps=cluster.read_batch_timestamps,
            groups=cluster.groups,
        )
        return cls(cluster, collector, pipeline, store, metrics, listeners=listeners)

    @property
    def collection_deadline_s(self) -> float:
        """Collection never runs past the interval (three request timeouts when the interval
        is shorter than that): late stages are cut and the snapshot is partial."""
        return max(self.cluster.interval_ms, 3 * self.cluster.request_timeout_ms) / 1000

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
        if self._stopping.is_set():
            return
        if not self._running.acquire(blocking=False):
            self.skipped()
            return
        try:
            self._run_cycle()
        finally:
            self._running.release()
            heap.trim()

    def skipped(self) -> None:
        """A scheduled run that did not start because the previous one was still running:
        counted now, logged once for the whole streak when the running cycle ends."""
        self._skipped += 1
        self._metrics.cycles_skipped.labels(self.cluster.name).inc()

    def _run_cycle(self) -> None:
        name = self.cluster.name
        started = time.monotonic()
        state = self._store.get(name)
        memory = self.memory
        try:
            snapshot = self._collector.collect(
                describe_extra=memory.watched_ids if memory is not None else (),
                deadline_s=self.collection_deadline_s,
            )
        except KafkaUnavailable as e:
            log.warning("cycle for cluster %s failed: %s", name, e)
            self._metrics.request_errors.labels(name, "Metadata", e.error).inc()
            self._finish(replace(state, up=False, stage_seconds=()), "failed", started)
            return
        except Exception:  # a bug must not stop the schedule: log it, mark the cycle failed
            if self._stopping.is_set():  # stop() closed the clients under it: no bug
                log.info("cycle for cluster %s cut short: the exporter is stopping", name)
                return
            log.exception("cycle for cluster %s failed unexpectedly", name)
            self._finish(replace(state, up=False), "failed", started)
            return
        for error in snapshot.errors:
            self._metrics.request_errors.labels(name, error.api, error.error).inc()
        if snapshot.errors:
            log.warning(
                "cycle for cluster %s lost %d part(s), first: %s %s on broker %s",
                name,
                len(snapshot.errors),
                snapshot.errors[0].api,
                snapshot.errors[0].error,
                snapshot.errors[0].broker_id,
            )
        if self._stopping.is_set():
            return
        pipeline_started = time.monotonic()
        try:
            result = self._pipeline.compute(
                snapshot,
                memory,
                int(self._clock() * 1000),
                groups=self.cluster.groups,
                rules=self.attribution,
            )
        except (PipelineUnavailableError, PipelineTimeoutError) as e:  # supervised: one line
            if self._stopping.is_set():
                return  # stop() cut the cycle short: not a problem to report
            log.warning("pipeline not run for cluster %s: %s", name, e)
            self._finish(replace(state, up=False), "failed", started)
            return
        except Exception:
            log.exception("pipeline failed for cluster %s", name)
            self._finish(replace(state, up=False), "failed", started)
            return
        stages = (*snapshot.stage_seconds, ("pipeline", time.monotonic() - pipeline_started))
        for family in result.failed_families:
            self._metrics.family_errors.labels(name, family).inc()
        if self._stopping.is_set():
            return  # a cycle cut short by stop() publishes nothing and remembers nothing
        self.memory = result.memory
        if self.memory_store is not None:
            self.memory_store.save(name, result.memory, int(self._clock() * 1000))
        for listener in self._listeners:
            try:
                listener(snapshot, result)
            except Exception:  # a listener never fails the cycle
                log.exception("cycle listener failed for cluster %s", name)
        complete = snapshot.complete
        now_ms = int(self._clock() * 1000)
        self._finish(
            ClusterState(
                cluster=name,
                result=result,
                snapshot_taken_at_ms=snapshot.taken_at_ms,
                up=complete,
                last_success_at_ms=now_ms if complete else state.last_success_at_ms,
                cycles_complete=state.cycles_complete + (1 if complete else 0),
                stage_seconds=stages,
            ),
            "complete" if complete else "partial",
            started,
        )

    def _finish(self, state: ClusterState, outcome: str, started: float) -> None:
        if self._stopping.is_set():
            return  # a cycle cut short by stop() publishes nothing
        self._store.put(state)
        seconds = time.monotonic() - started
        self._metrics.cycles.labels(self.cluster.name, outcome).inc()
        self._metrics.cycle_duration.labels(self.cluster.name).observe(seconds)
        skipped, self._skipped = self._skipped, 0
        first, self._finished_once = not self._finished_once, True
        level, note = logging.INFO, ""
        if skipped:
            note = f", longer than its interval: {skipped} scheduled run(s) skipped"
            # The first cycle outlasts its interval while Spark starts. A later one falling
            # behind is a warning once; the cycles that stay behind say so at INFO.
            if not first and not self._behind:
                level = logging.WARNING
            self._behind = not first
        elif self._behind:
            self._behind = False
            note = ", within its interval again"
        log.log(level, "cycle for cluster %s: %s in %.2f s%s", self.cluster.name, outcome, seconds, note)
