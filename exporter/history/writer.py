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
import errno
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
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
        #: The cause last logged and when (rate limit of the failure line).
        self._failure_logged: tuple[str, float] | None = None
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
                "history: %d audit row(s) not written yet: %s", len(rows), failure_cause(e, self.config)
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
            self._write_failed(e, len(batches))
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
            self._failure_logged = None
        return True

    def _write_failed(self, error: Exception, cycles: int) -> None:
        """One line with the cause, at the first failure, when the cause changes, and at most
        every :data:`FAILURE_LOG_EVERY_S` while it lasts; Spark's trace at debug level only."""
        cause = failure_cause(error, self.config)
        now = self._clock()
        logged = self._failure_logged
        if logged is None or logged[0] != cause or now - logged[1] >= FAILURE_LOG_EVERY_S:
            log.warning(
                "history write to %s failed: %s; %d cycle(s) kept to retry with the next batch "
                "(%d failed write(s) so far)",
                self.config.redacted_path,
                cause,
                cycles,
                self.writes_failed,
            )
            self._failure_logged = (cause, now)
        log.debug("history write to %s failed", self.config.redacted_path, exc_info=error)
        self._failing = True

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
                "history compaction/retention failed: %s; retried in %.0f s",
                failure_cause(e, self.config),
                self.config.compact_every_ms / 1000,
            )
            log.debug("history compaction/retention failed", exc_info=e)

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


#: While writes keep failing for the same cause, the line is logged again this often.
FAILURE_LOG_EVERY_S = 600.0

#: What a failed write's message chain says, and what it means (the first match wins).
_CAUSES = (
    ("No space left on device", "disk full"),
    ("Disk quota exceeded", "disk quota exceeded"),
    ("Read-only file system", "read-only file system"),
    ("ParentNotDirectoryException", "not a directory"),
    ("Not a directory", "not a directory"),
    ("is not a directory", "not a directory"),
    ("Permission denied", "permission denied"),
    ("AccessDeniedException", "permission denied"),
)


def failure_cause(error: BaseException, config: HistoryConfig) -> str:
    """Why a write failed, in a few words: disk full, read-only file system, not a directory,
    permission denied (found in the exception's chain, Java's included, or, for a local
    history, by trying to write there), else the deepest cause's first line."""
    chain = _messages(error)
    for needle, meaning in _CAUSES:
        for message in chain:
            if needle in message:
                return f"{meaning} ({_clip(message)})"
    if config.is_local:
        problem = local_write_problem(config.local_path)
        if problem is not None:
            return problem
    return _clip(chain[-1]) if chain else type(error).__name__


def check_history_path(config: HistoryConfig) -> None:
    """At start, as ``state_dir``: a local history's directory is created if missing and must
    be writable, else :class:`~exporter.config.ConfigError` naming ``history.path`` (exit 2).
    A remote one (s3a://, hdfs:// ...) is Spark's to reach: its failures are the writer's."""
    if not config.is_local:
        return
    problem = local_write_problem(config.local_path)
    if problem is not None:
        from exporter.config import ConfigError

        raise ConfigError([f"history.path: cannot write to {config.redacted_path}: {problem}"])


#: What the start-up probe writes: about one cycle's rows.
_PROBE_BYTES = 64 * 1024


def local_write_problem(path: str) -> str | None:
    """What stops writing under a local directory (its nearest existing part is tried: a
    directory and a file created and removed), or None when it can be written."""
    target = Path(path)
    try:
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target, prefix=".probe-") as probe:
            probe.write(bytes(_PROBE_BYTES))  # an empty file fits on a full disk
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as e:
        meaning = {
            errno.ENOSPC: "disk full",
            errno.EDQUOT: "disk quota exceeded",
            errno.EROFS: "read-only file system",
            errno.ENOTDIR: "not a directory",
            errno.EEXIST: "not a directory",
            errno.EACCES: "permission denied",
            errno.EPERM: "permission denied",
        }.get(e.errno or 0, "cannot write")
        return f"{meaning} ({e.strerror or e}: {e.filename or path})"
    except ValueError:  # a NUL byte in the name
        return "not a usable path"
    return None


def _messages(error: BaseException) -> list[str]:
    """The messages of the exception and its causes, outermost first; a Py4J error's Java
    trace names its causes (``Caused by: ...``) in its text."""
    found: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current)
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("at ")]
        found += [ln.removeprefix(": ").removeprefix("Caused by: ") for ln in lines]
        current = current.__cause__ or current.__context__
    return found


def _clip(text: str) -> str:
    return text if len(text) <= 240 else text[:237] + "..."
