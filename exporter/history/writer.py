"""The daemon's history writer: a cycle listener that never delays or fails a cycle.

``HistoryWriter(config, spark_provider)`` is called by the daemon after every cycle whose
pipeline ran. The call only puts the (immutable) snapshot and result on a bounded queue and
returns; a thread of its own turns them into rows and appends them with Spark.

* At most ``buffer_cycles`` cycles are held in memory (queued or waiting to be written
  again). Past that the oldest cycle's rows are dropped: counted in ``cycles_dropped`` and
  logged, never silently.
* A failed write is counted (``writes_failed``), logged once (and once more when writing
  recovers), and retried with the next batch: its rows stay pending, per dataset, so a
  dataset that was written is never written twice.
* Compaction and retention run on the same thread every ``compact_every``.
* :meth:`close` flushes what is pending (bounded by ``close_timeout_s``) and stops the thread.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.history.config import HistoryConfig
from exporter.history.rows import CycleRows, Row, Rows, utc_date
from exporter.history.schema import ACTIONS, CLUSTER_COLUMN, DATASETS, DATE_COLUMN
from exporter.history.store import COMPACTED, HistoryStore
from exporter.model import ClusterSnapshot, CycleResult

log = logging.getLogger(__name__)

SparkProvider = Callable[[], Any]


@dataclass
class _Batch:
    """One cycle's rows still to be written, per dataset."""

    cycle_ms: int
    rows: Rows


class HistoryWriter:
    """Cycle listener that appends each cycle's facts to the history, off the cycle's path."""

    def __init__(
        self,
        config: HistoryConfig,
        spark_provider: SparkProvider,
        *,
        clock: Callable[[], float] = time.time,
        store_factory: Callable[[Any, HistoryConfig], HistoryStore] = HistoryStore,
        start: bool = True,
    ) -> None:
        self.config = config
        self._spark_provider = spark_provider
        self._store_factory = store_factory
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: collections.deque[tuple[ClusterSnapshot, CycleResult]] = collections.deque()
        self._pending: collections.deque[_Batch] = collections.deque()
        self._rows = CycleRows()
        self._stopping = False
        self._store: HistoryStore | None = None
        self._touched: set[tuple[str, str]] = set()
        #: Audit rows of the daemon's own actions (auto-remediation), written with the next
        #: batch; kept while writes fail, bounded like the cycles.
        self._actions: list[Row] = []
        self._last_maintenance = clock()
        self._failing = False
        # Counters the daemon can render (monotonic, read without the lock).
        self.cycles_received = 0
        self.cycles_written = 0
        self.cycles_dropped = 0
        self.rows_written = 0
        self.writes = 0
        self.writes_failed = 0
        self.compactions = 0
        self.partitions_dropped = 0
        self.maintenance_failed = 0
        self.last_write_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="history-writer", daemon=True)
        if start:
            self._thread.start()

    # --- the cycle's side: returns at once ------------------------------------------------

    def __call__(self, snapshot: ClusterSnapshot, result: CycleResult) -> None:
        with self._cond:
            if self._stopping:
                return
            self.cycles_received += 1
            self._queue.append((snapshot, result))
            self._enforce_bound()
            self._cond.notify()

    def record_action(self, entry: dict[str, Any]) -> None:
        """One audit entry (:func:`exporter.history.audit.audit_entry`) for the ``actions``
        dataset, written by the writer's thread (returns at once)."""
        from exporter.history.audit import action_row

        with self._cond:
            if self._stopping:
                return
            self._actions.append(action_row(entry))
            del self._actions[: -self.config.buffer_cycles * 10]
            self._cond.notify()

    @property
    def buffered_cycles(self) -> int:
        return len(self._queue) + len(self._pending)

    def _enforce_bound(self) -> None:
        """Drop the oldest cycles past ``buffer_cycles`` (caller holds the lock)."""
        dropped = 0
        while len(self._queue) + len(self._pending) > self.config.buffer_cycles:
            if self._pending:
                self._pending.popleft()
            else:
                self._queue.popleft()  # its transactions are judged again by the next cycle
            dropped += 1
        if dropped:
            self.cycles_dropped += dropped
            log.warning(
                "history buffer full (%d cycles): dropped the oldest %d cycle(s), %d dropped in all",
                self.config.buffer_cycles,
                dropped,
                self.cycles_dropped,
            )

    # --- the writer thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._ready():
                    self._cond.wait(timeout=1.0)
                if self._stopping:
                    return
            try:
                self.flush_once()
            except Exception:  # never let the thread die: the next cycle tries again
                log.exception("history writer failed unexpectedly")

    def _ready(self) -> bool:
        """New cycles to write (a failed batch waits for the next one), or maintenance due."""
        if self._actions and not self._failing:
            return True
        if self._queue and len(self._queue) + len(self._pending) >= self.config.batch_cycles:
            return True
        return not self._failing and self._due()

    def _due(self) -> bool:
        return self._clock() - self._last_maintenance >= self.config.compact_every_ms / 1000

    def flush_once(self) -> bool:
        """Turn queued cycles into rows and write everything pending; then maintenance when
        due. Returns True when nothing is left pending. (Runs on the writer thread; tests
        call it directly with ``start=False``.)"""
        with self._cond:
            taken = list(self._queue)
            self._queue.clear()
        for snapshot, result in taken:
            try:
                rows = self._rows.rows(snapshot, result)
            except Exception:  # a bug in the conversion must not stop the writer
                log.exception("history: could not turn the cycle of %s into rows", result.cluster)
                self.cycles_dropped += 1
                continue
            with self._cond:
                self._pending.append(_Batch(result.computed_at_ms, rows))
                self._enforce_bound()
        done = self._write_pending()
        if done and self._due():
            self._maintenance()
        return done

    def _write_actions(self) -> None:
        with self._cond:
            rows, self._actions = self._actions, []
        if not rows:
            return
        try:
            self._get_store().append(ACTIONS.name, rows)
            self.rows_written += len(rows)
        except Exception as e:
            with self._cond:
                self._actions[:0] = rows
            log.warning(
                "history: %d audit row(s) not written yet (%s: %s)",
                len(rows),
                type(e).__name__,
                _first_line(e),
            )

    def _write_pending(self) -> bool:
        self._write_actions()
        with self._cond:
            batches = list(self._pending)
        if not batches:
            return True
        started = time.monotonic()
        try:
            store = self._get_store()
            for dataset in DATASETS:
                rows: list[Row] = [r for b in batches for r in b.rows.get(dataset.name, ())]
                if rows:
                    store.append(dataset.name, rows)
                    self.rows_written += len(rows)
                    for b in batches:  # written: never again, even if a later dataset fails
                        b.rows.pop(dataset.name, None)
                    self._touched.update((str(r[CLUSTER_COLUMN]), str(r[DATE_COLUMN])) for r in rows)
        except Exception as e:
            self.writes_failed += 1
            if not self._failing:
                log.warning(
                    "history write to %s failed (%s: %s); %d cycle(s) kept to retry with the next batch",
                    self.config.redacted_path,
                    type(e).__name__,
                    _first_line(e),
                    len(batches),
                )
                self._failing = True
            return False
        with self._cond:
            for b in batches:
                if self._pending and self._pending[0] is b:
                    self._pending.popleft()
        self.writes += 1
        self.cycles_written += len(batches)
        self.last_write_seconds = time.monotonic() - started
        if self._failing:
            log.info("history writes recovered after %d failure(s)", self.writes_failed)
            self._failing = False
        return True

    def _get_store(self) -> HistoryStore:
        if self._store is None:
            spark = self._spark_provider()
            if spark is None:
                raise RuntimeError("Spark is not ready yet")
            self._store = self._store_factory(spark, self.config)
        return self._store

    def _maintenance(self) -> None:
        """Compaction of the partitions written since the last run, then retention."""
        self._last_maintenance = self._clock()
        touched, self._touched = self._touched, set()
        try:
            store = self._get_store()
            for cluster, date in sorted(touched):
                for name in COMPACTED:
                    if store.compact(name, cluster, date):
                        self.compactions += 1
            cutoff = utc_date(int(self._clock() * 1000) - self.config.retention_ms)
            dropped = store.drop_before(cutoff, DATASETS)
            self.partitions_dropped += len(dropped)
            if dropped:
                log.info("history retention: dropped %d partition(s) before %s", len(dropped), cutoff)
        except Exception as e:
            self.maintenance_failed += 1
            self._touched |= touched
            log.warning(
                "history compaction/retention failed (%s: %s); retried in %.0f s",
                type(e).__name__,
                _first_line(e),
                self.config.compact_every_ms / 1000,
            )

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the thread, then write what is pending (one attempt, bounded in time)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning(
                "history writer still busy after %.0f s; %d cycle(s) not written",
                timeout_s,
                self.buffered_cycles,
            )
            return
        if not self.flush_once() or self.buffered_cycles:
            log.warning("history: %d cycle(s) could not be written before stopping", self.buffered_cycles)

    def counters(self) -> dict[str, float]:
        """Every counter by name, for the daemon's /metrics (see docs/history.md)."""
        return {
            "cycles_received": self.cycles_received,
            "cycles_written": self.cycles_written,
            "cycles_dropped": self.cycles_dropped,
            "rows_written": self.rows_written,
            "writes": self.writes,
            "writes_failed": self.writes_failed,
            "compactions": self.compactions,
            "partitions_dropped": self.partitions_dropped,
            "maintenance_failed": self.maintenance_failed,
            "buffered_cycles": self.buffered_cycles,
            "last_write_seconds": self.last_write_seconds,
        }


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else ""
