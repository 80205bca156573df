"""The daemon's schedule: every cluster collects when its interval is due, and what is ready is
computed together, in rounds (one pipeline call for all of them).

* **Collections in parallel, bounded.** When clusters are due, each one's collection goes to
  a pool of ``collection.workers`` threads; their stages share one more pool. The threads do
  not grow with the number of clusters.
* **A round waits for nobody.** A round opens when clusters are due and closes when every
  collection it started is done, or at the shortest collection deadline among them (plus
  :data:`ROUND_GRACE_S`). Then one call computes every snapshot ready by then, including any
  that missed an earlier round. A cluster whose snapshot is not ready is left out: its
  previous results stay published, the skip is counted
  (``kafka_txn_exporter_cycles_skipped_total``) and its snapshot joins the next round.
* **Different intervals.** Each cluster is due on its own interval's ticks; a round holds the
  clusters due at that moment.
* **One computation at a time.** Rounds that close while one computes are computed together
  after it: the pipeline's fixed cost is paid once for all of them.
* **Idle clusters hold no connection.** The Kafka clients of at most
  ``collection.clients_kept_open`` clusters stay open between cycles (the most recently
  collected); the others are closed after their collection and opened again at the next.

A cluster's cycle is in flight from its collection's start to the end of its publication; a
tick that finds it in flight skips it (counted, said once in the line of the cycle that ends
the streak). Memory, state files and listeners are per cluster (:mod:`exporter.daemon.cycle`).
"""

from __future__ import annotations

import functools
import logging
import statistics
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from exporter.daemon import heap
from exporter.daemon.capacity import ESTIMATED, Costs, shortfall
from exporter.daemon.cycle import ClusterJob, Collection, run_round
from exporter.daemon.pipeline import PipelineRunner
from exporter.kafka.collector import STAGE_WORKERS

log = logging.getLogger(__name__)

#: A round waits this much past its collection deadline: a collection returns at its
#: deadline, give or take the request in flight when it was cut.
ROUND_GRACE_S = 1.0
#: Rounds the measured capacity estimate looks back on, and how many it needs (the first
#: round after a start is left out: the engine compiles its plans then).
MEASURED_ROUNDS = 20
MEASURED_MIN_ROUNDS = 3


@dataclass
class _Round:
    """Clusters whose collection a tick started; closes at ``deadline`` at the latest."""

    deadline: float
    pending: set[ClusterJob] = field(default_factory=set)


class ClientBudget:
    """Keeps the Kafka clients of the ``keep`` most recently collected clusters open; the
    least recent others are closed (:meth:`ClusterJob.release_clients`). A cluster that is
    collecting when its turn to close comes keeps its clients: it is the most recent again
    as soon as its collection is done."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._lock = threading.Lock()
        self._recent: OrderedDict[str, ClusterJob] = OrderedDict()

    def collected(self, job: ClusterJob) -> None:
        """``job`` just collected; close the clients of the least recent beyond ``keep``."""
        victims: list[ClusterJob] = []
        with self._lock:
            self._recent[job.cluster.name] = job
            self._recent.move_to_end(job.cluster.name)
            while len(self._recent) > self.keep:
                _, victim = self._recent.popitem(last=False)
                victims.append(victim)
        for victim in victims:
            victim.release_clients()

    def forget(self) -> None:
        with self._lock:
            self._recent.clear()


class RoundScheduler:
    """The clusters' schedule and rounds (see the module doc). ``start`` runs two threads:
    the ticks (collections and rounds opened and closed) and the computation."""

    def __init__(
        self,
        pipeline: PipelineRunner,
        *,
        workers: int,
        clients_kept_open: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pipeline = pipeline
        self._clock = clock
        self.workers = workers
        #: The collection stages of every cluster run here (see SnapshotCollector's pool).
        self.stage_pool = ThreadPoolExecutor(max_workers=workers * STAGE_WORKERS, thread_name_prefix="stage")
        self._collect_pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="collect")
        self.clients = ClientBudget(clients_kept_open)
        self._cond = threading.Condition()
        self._jobs: list[ClusterJob] = []
        self._due: dict[ClusterJob, float] = {}
        self._collecting: set[ClusterJob] = set()
        self._ready: dict[ClusterJob, Collection] = {}
        self._rounds: list[_Round] = []
        self._compute_wanted = False
        self._stopping = False
        self._threads: list[threading.Thread] = []
        #: (clusters, seconds) of the last rounds, for the measured capacity estimate.
        self._round_costs: deque[tuple[int, float]] = deque(maxlen=MEASURED_ROUNDS)
        #: Whether the last capacity check (estimated or measured) found a shortfall.
        self._short: bool | None = None
        self.rounds = 0

    # --- lifecycle ------------------------------------------------------------------------

    def start(self, jobs: Sequence[ClusterJob]) -> None:
        self.replace(jobs)
        for name, target in (("rounds", self._ticks), ("rounds-compute", self._computations)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()

    def replace(self, jobs: Sequence[ClusterJob]) -> None:
        """Schedule ``jobs`` from now on, every one due at once. The snapshots of the jobs
        replaced that wait for a round end their cycles unpublished (the caller closes those
        jobs first); their collections in flight end so when they return."""
        now = self._clock()
        with self._cond:
            self._jobs = list(jobs)
            self._due = dict.fromkeys(jobs, now)
            for job, collection in list(self._ready.items()):
                if job not in self._due:
                    del self._ready[job]
                    job.fail(collection, "the exporter is reloading")
            self._rounds.clear()
            self._short = None
            self._round_costs.clear()
            self._cond.notify_all()
        self.clients.forget()

    def stop(self) -> None:
        """No new collection or round; queued collections are dropped. Returns at once."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._collect_pool.shutdown(wait=False, cancel_futures=True)

    def join(self, wait_s: float) -> bool:
        """Wait (at most ``wait_s``) for the schedule's threads and the collections in flight
        to end after :meth:`stop`."""
        deadline = time.monotonic() + wait_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._cond:
            idle = self._cond.wait_for(
                lambda: not self._collecting, timeout=max(0.0, deadline - time.monotonic())
            )
        return idle and not any(t.is_alive() for t in self._threads)

    def close(self) -> None:
        """The stage threads go as soon as they are idle (after :meth:`stop`, once no cycle
        is in flight: a collection still running would find no thread for its next stage)."""
        self.stage_pool.shutdown(wait=False, cancel_futures=True)

    def estimate(self) -> str | None:
        """Warn (once) when the clusters cannot all be cycled on time at the estimated costs
        (:data:`~exporter.daemon.capacity.ESTIMATED`); the measured costs re-check it later."""
        with self._cond:
            intervals = [job.cluster.interval_ms / 1000 for job in self._jobs]
        problem = shortfall(intervals, self.workers, ESTIMATED)
        self._short = problem is not None
        if problem is not None:
            log.warning(
                "%d cluster(s) cannot all be cycled within their interval on this process, as "
                "estimated (%s): %s; cycles will be skipped (kafka_txn_exporter_cycles_skipped_total). "
                "Lengthen the intervals, raise collection.workers, or split the clusters over "
                "several exporters",
                len(intervals),
                ESTIMATED.describe(),
                problem,
            )
        return problem

    # --- ticks ------------------------------------------------------------------------------

    def _ticks(self) -> None:
        with self._cond:
            while not self._stopping:
                now = self._clock()
                self._start_due(now)
                if self._close_rounds(now):
                    self._compute_wanted = True
                    self._cond.notify_all()
                wake = min([*self._due.values(), *(r.deadline for r in self._rounds)], default=now + 60)
                self._cond.wait(timeout=max(0.0, min(wake - now, 60.0)))

    def _start_due(self, now: float) -> None:
        started: list[ClusterJob] = []
        joined = False
        for job in self._jobs:
            due = self._due[job]
            if due > now:
                continue
            interval = job.cluster.interval_ms / 1000
            self._due[job] = due + interval if due + interval > now else now + interval
            if job in self._ready:
                joined = True  # a snapshot that missed its round: it is this round's
            elif job.begin():
                started.append(job)
            elif not job.closed:
                job.skipped()
        if not started and not joined:
            return
        for job in started:
            self._collecting.add(job)
            future = self._collect_pool.submit(self._collect, job)
            future.add_done_callback(functools.partial(self._dropped, job))
        wait = min((job.collection_deadline_s for job in started), default=0.0)
        deadline = now + (wait + ROUND_GRACE_S if started else 0.0)
        self._rounds.append(_Round(deadline=deadline, pending=set(started)))

    def _collect(self, job: ClusterJob) -> None:
        """On the collection pool: one cluster's collection, then into the ready set."""
        collection: Collection | None = None
        try:
            collection = job.collect()
            try:
                self.clients.collected(job)
            except Exception:  # closing idle clients never fails a cycle
                log.exception("closing idle Kafka clients failed")
        finally:
            with self._cond:
                self._collecting.discard(job)
                if collection is not None:
                    if self._stopping or job not in self._due:
                        job.fail(collection, "the exporter is stopping or reloading")
                    else:
                        self._ready[job] = collection
                self._cond.notify_all()

    def _dropped(self, job: ClusterJob, future: Future[None]) -> None:
        """A collection still queued when the schedule stopped: its cycle ends, unpublished."""
        if not future.cancelled():
            return
        with self._cond:
            self._collecting.discard(job)
            job.cancel()
            self._cond.notify_all()

    def _close_rounds(self, now: float) -> bool:
        """Close the rounds whose collections are all done or whose deadline passed; a
        cluster still collecting is left out of its round (counted as skipped)."""
        closed = False
        for round_ in list(self._rounds):
            waiting = round_.pending & self._collecting
            if waiting and now < round_.deadline:
                continue
            self._rounds.remove(round_)
            closed = True
            for job in waiting:  # its snapshot joins a later round
                job.skipped()
        return closed

    # --- computations ---------------------------------------------------------------------

    def _computations(self) -> None:
        while True:
            with self._cond:
                while not self._compute_wanted and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    batch = list(self._ready.values())
                    self._ready.clear()
                    for collection in batch:
                        collection.job.fail(collection, "the exporter is stopping")
                    return
                self._compute_wanted = False
                batch = list(self._ready.values())
                self._ready.clear()
            if batch:
                try:
                    seconds = run_round(self._pipeline, batch)
                    self._measured(len(batch), seconds)
                finally:
                    heap.trim()
                    with self._cond:
                        self.rounds += 1
                        self._cond.notify_all()
                log.debug("round of %d cluster(s) computed in %.2f s", len(batch), seconds)

    # --- capacity -------------------------------------------------------------------------

    def _measured(self, clusters: int, seconds: float) -> None:
        """Re-check the capacity from what collections and rounds cost here (the median of
        the last rounds' seconds per cluster, the median collection); one line when the
        answer changes."""
        if self.rounds == 0:
            return  # the first round compiles the engine's plans
        self._round_costs.append((clusters, seconds))
        with self._cond:
            jobs = list(self._jobs)
        collect = [j.last_collect_s for j in jobs if j.last_collect_s is not None]
        if not collect or len(self._round_costs) < MEASURED_MIN_ROUNDS:
            return
        share = statistics.median(s / n for n, s in self._round_costs)
        costs = Costs(collect_s=statistics.median(collect), round_fixed_s=0.0, round_per_cluster_s=share)
        problem = shortfall([j.cluster.interval_ms / 1000 for j in jobs], self.workers, costs)
        if (problem is not None) == self._short:
            return
        self._short = problem is not None
        if problem is not None:
            log.warning(
                "%d cluster(s) cannot all be cycled within their interval on this process, "
                "as measured (%s): %s; cycles are skipped (kafka_txn_exporter_cycles_skipped_total)",
                len(jobs),
                costs.describe(),
                problem,
            )
        else:
            log.info(
                "%d cluster(s) can be cycled within their interval on this process, as measured (%s)",
                len(jobs),
                costs.describe(),
            )

    # --- tests and stop ---------------------------------------------------------------------

    def wait_rounds(self, count: int, timeout_s: float) -> bool:
        """Wait until ``count`` rounds were computed since start (tests)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            return self._cond.wait_for(
                lambda: self.rounds >= count, timeout=max(0.0, deadline - time.monotonic())
            )
