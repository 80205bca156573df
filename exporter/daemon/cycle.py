"""One cluster's cycle: collect, compute (in a round), publish.

A cycle has three steps. :meth:`ClusterJob.collect` reads the cluster's snapshot from Kafka;
:func:`run_round` computes the snapshots of every cluster of a round in one pipeline call
(:meth:`~exporter.daemon.pipeline.PipelineRunner.compute_round`) and publishes each cluster's
result, or its own failure; the scheduler (:mod:`exporter.daemon.rounds`) decides which
clusters collect when and which snapshots make a round. :meth:`ClusterJob.run_cycle` is the
three steps for one cluster alone: a round of one.

From :meth:`ClusterJob.begin` to the end of its publication a cluster has one cycle in
flight; a scheduled cycle that finds the previous one still in flight is skipped (counted,
and said once, in the line of the cycle that ends the streak).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from exporter.config import ClusterConfig
from exporter.config.groups import BUILTIN_RULES, AttributionRule
from exporter.daemon import heap
from exporter.daemon.memory_store import MemoryStore, max_age_ms
from exporter.daemon.pipeline import PipelineRunner, PipelineTimeoutError, PipelineUnavailableError
from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.collector import SnapshotCollector
from exporter.kafka.errors import KafkaUnavailable
from exporter.metrics.collector import ExporterMetrics
from exporter.metrics.state import ClusterState, StateStore
from exporter.model import ClusterSnapshot, CycleResult, PipelineMemory

if TYPE_CHECKING:
    from exporter.pipeline.rounds import ClusterRun

log = logging.getLogger(__name__)

#: Called after every cycle whose pipeline ran (the history store is one). Must not block:
#: a listener that needs I/O hands the data to a thread of its own.
CycleListener = Callable[[ClusterSnapshot, CycleResult], None]


@dataclass(frozen=True, slots=True)
class Collection:
    """A cluster's snapshot, ready for a round; ``started``: when its cycle began
    (:func:`time.monotonic`)."""

    job: ClusterJob
    snapshot: ClusterSnapshot
    started: float


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
        #: Held while the Kafka clients are in use (a collection), so that they are never
        #: released under it.
        self._clients_in_use = threading.Lock()
        self._stopping = threading.Event()
        #: What the pipeline handed this cluster's next cycle (confirmations, watched
        #: transactions, running totals): owned here, flowing one way, never read back from
        #: the scrape store.
        self.memory: PipelineMemory | None = None
        #: Transactional id -> application rules (config ``attribution``).
        self.attribution: tuple[AttributionRule, ...] = BUILTIN_RULES
        #: Where the memory outlives the process (config ``state_dir``); None: nowhere.
        self.memory_store: MemoryStore | None = None
        #: Seconds the last collection took (the scheduler's capacity estimate reads it).
        self.last_collect_s: float | None = None
        #: Scheduled cycles skipped since the last cycle ended: logged once, when it ends.
        self._skipped = 0
        self._finished_once = False
        self._behind = False
        #: The last outcome and lost-part kinds (a failure's reason, a lost part's first
        #: error are logged when they change).
        self._last_outcome: str | None = None
        self._last_lost: tuple[tuple[str, str], ...] = ()

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
        *,
        stage_pool: ThreadPoolExecutor | None = None,
    ) -> ClusterJob:
        """``stage_pool``: the threads the collection stages run on, shared by every cluster
        of a daemon (None: the collector's own)."""
        admin = ClusterAdmin(
            bootstrap_servers=cluster.bootstrap_servers,
            properties=cluster.kafka,
            request_timeout_ms=cluster.request_timeout_ms,
            name=cluster.name,
        )
        collector = SnapshotCollector(
            cluster=cluster.name,
            admin=admin,
            topic_filter=cluster.topics.matcher(),
            named_topics=cluster.topics.named_topics(),
            read_batch_timestamps=cluster.read_batch_timestamps,
            groups=cluster.groups,
            pool=stage_pool,
        )
        return cls(cluster, collector, pipeline, store, metrics, listeners=listeners)

    @property
    def collection_deadline_s(self) -> float:
        """Collection never runs past the interval (three request timeouts when the interval
        is shorter than that): late stages are cut and the snapshot is partial."""
        return max(self.cluster.interval_ms, 3 * self.cluster.request_timeout_ms) / 1000

    @property
    def closed(self) -> bool:
        return self._stopping.is_set()

    @property
    def busy(self) -> bool:
        """A cycle is in flight (collecting, waiting for its round, or in it)."""
        return self._running.locked()

    def close(self) -> None:
        """No new cycle; the Kafka clients close, so a cycle in flight fails fast."""
        self._stopping.set()
        self._collector.close()

    def release_clients(self) -> bool:
        """Close the Kafka clients until the next collection opens them again (their threads
        and sockets go). False, nothing done, while a collection uses them."""
        if not self._clients_in_use.acquire(blocking=False):
            return False
        try:
            self._collector.admin.release()
        finally:
            self._clients_in_use.release()
        return True

    def wait_idle(self, wait_s: float = 10.0) -> bool:
        wait_s = max(0.0, wait_s)
        if self._running.acquire(timeout=wait_s):
            self._running.release()
            return True
        log.warning("cycle for cluster %s still running after %.0f s", self.cluster.name, wait_s)
        return False

    # --- the cycle's steps -------------------------------------------------------------

    def begin(self) -> bool:
        """Start a cycle; False (nothing started) when the previous one is still in flight or
        the job is closed. The cycle ends with its publication (or failure)."""
        return not self._stopping.is_set() and self._running.acquire(blocking=False)

    def _end(self) -> None:
        self._running.release()

    def cancel(self) -> None:
        """End a cycle begun (:meth:`begin`) whose collection never started."""
        self._end()

    def skipped(self) -> None:
        """A scheduled cycle that did not start because the previous one was still in flight,
        or whose snapshot missed its round: counted now, logged once for the whole streak in
        the line of the cycle that ends it."""
        self._skipped += 1
        self._metrics.cycles_skipped.labels(self.cluster.name).inc()

    def collect(self) -> Collection | None:
        """Collect this cycle's snapshot (after :meth:`begin`). On a Kafka failure the cycle
        is over: published as failed, and None is returned."""
        name = self.cluster.name
        started = time.monotonic()
        state = self._store.get(name)
        memory = self.memory
        try:
            with self._clients_in_use:
                snapshot = self._collector.collect(
                    describe_extra=memory.watched_ids if memory is not None else (),
                    deadline_s=self.collection_deadline_s,
                )
        except KafkaUnavailable as e:
            self._metrics.request_errors.labels(name, "Metadata", e.error).inc()
            self._fail_now(replace(state, up=False, stage_seconds=()), started, str(e))
            return None
        except Exception:  # a bug must not stop the schedule: log it, mark the cycle failed
            if self._stopping.is_set():  # stop() closed the clients under it: no bug
                log.info("cycle for cluster %s cut short: the exporter is stopping", name)
                self._end()
                return None
            log.exception("cycle for cluster %s failed unexpectedly", name)
            self._last_outcome = "failed"
            self._fail_now(replace(state, up=False), started, "unexpected error")
            return None
        self.last_collect_s = time.monotonic() - started
        for error in snapshot.errors:
            self._metrics.request_errors.labels(name, error.api, error.error).inc()
        lost = tuple(sorted({(e.api, e.error) for e in snapshot.errors}))
        if lost and lost != self._last_lost:
            log.warning(
                "cycle for cluster %s lost %d part(s), first: %s %s on broker %s",
                name,
                len(snapshot.errors),
                snapshot.errors[0].api,
                snapshot.errors[0].error,
                snapshot.errors[0].broker_id,
            )
        self._last_lost = lost
        if self._stopping.is_set():
            self._end()
            return None
        return Collection(self, snapshot, started)

    def _fail_now(self, state: ClusterState, started: float, why: str) -> None:
        try:
            self._finish(state, "failed", started, why)
        finally:
            self._end()

    def run(self, snapshot: ClusterSnapshot) -> ClusterRun:
        """This cluster's part of a round."""
        from exporter.pipeline.rounds import ClusterRun

        return ClusterRun(
            snapshot,
            self.memory,
            int(self._clock() * 1000),
            settings=self._pipeline.settings,
            groups=self.cluster.groups,
            rules=self.attribution,
        )

    def publish(self, collection: Collection, result: CycleResult, pipeline_s: float) -> None:
        """The round computed this cluster: memory, state file, listeners, state; the end of
        the cycle."""
        name = self.cluster.name
        snapshot = collection.snapshot
        try:
            if self._stopping.is_set():
                return  # a cycle cut short by stop() publishes nothing and remembers nothing
            stages = (*snapshot.stage_seconds, ("pipeline", pipeline_s))
            for family in result.failed_families:
                self._metrics.family_errors.labels(name, family).inc()
            self.memory = result.memory
            if self.memory_store is not None:
                self.memory_store.save(name, result.memory, int(self._clock() * 1000))
            for listener in self._listeners:
                try:
                    listener(snapshot, result)
                except Exception:  # a listener never fails the cycle
                    log.exception("cycle listener failed for cluster %s", name)
            state = self._store.get(name)
            complete = snapshot.complete
            now_ms = int(self._clock() * 1000)
            outcome = "complete" if complete else "partial"
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
                outcome,
                collection.started,
            )
        finally:
            self._end()

    def fail(self, collection: Collection, why: str) -> None:
        """The round did not compute this cluster: its cycle failed (up 0, counted, its line
        says why); its last results stay published."""
        self._fail_now(replace(self._store.get(self.cluster.name), up=False), collection.started, why)

    def _finish(self, state: ClusterState, outcome: str, started: float, why: str = "") -> None:
        """Publish ``state``, count the cycle and log it in one line: with the scheduled runs
        skipped while it was in flight (a warning when the cluster falls behind, not for the
        first cycle, which waits for the engine to start), and a failure's reason (a warning
        when the cluster was not failing already)."""
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
            if not first and not self._behind:
                level = logging.WARNING
            self._behind = not first
        elif self._behind:
            self._behind = False
            note = ", within its interval again"
        if why:
            note += f": {why}"
            if outcome == "failed" and self._last_outcome != "failed":
                level = logging.WARNING
        self._last_outcome = outcome
        log.log(level, "cycle for cluster %s: %s in %.2f s%s", self.cluster.name, outcome, seconds, note)

    # --- a cycle of its own -------------------------------------------------------------

    def run_cycle(self) -> None:
        """One whole cycle of this cluster now, on the calling thread: a round of one."""
        if not self.begin():
            if not self._stopping.is_set():
                self.skipped()
            return
        try:
            collection = self.collect()
            if collection is not None:
                run_round(self._pipeline, [collection])
        finally:
            heap.trim()


def run_round(pipeline: PipelineRunner, collections: Sequence[Collection]) -> float:
    """Compute ``collections`` (distinct clusters, each after its job's :meth:`~ClusterJob.collect`)
    in one pipeline call and publish each cluster's result or failure; every cycle of the
    round ends here. Returns the pipeline's seconds. Never raises."""
    started = time.monotonic()
    try:
        runs = [c.job.run(c.snapshot) for c in collections]
        outcome = pipeline.compute_round(runs)
    except (PipelineUnavailableError, PipelineTimeoutError) as e:  # supervised: one line a round
        _fail_all(collections, f"pipeline not run: {e}")
        return time.monotonic() - started
    except Exception as e:
        log.exception("pipeline round of %d cluster(s) failed", len(collections))
        _fail_all(collections, f"the round failed: {type(e).__name__}")
        return time.monotonic() - started
    seconds = time.monotonic() - started
    for c in collections:
        name = c.job.cluster.name
        try:
            if name in outcome.results:
                c.job.publish(c, outcome.results[name], seconds)
            else:
                why = outcome.failures.get(name, "no result from the round")
                c.job.fail(c, f"the pipeline failed: {why}")
        except Exception:  # one cluster's publication never stops the others'
            log.exception("publishing the cycle of cluster %s failed", name)
    return seconds


def _fail_all(collections: Sequence[Collection], why: str) -> None:
    for c in collections:
        try:
            c.job.fail(c, why)
        except Exception:
            log.exception("failing the cycle of cluster %s failed", c.job.cluster.name)
