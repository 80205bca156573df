"""The history writer as a cycle listener: it returns at once, holds a bounded buffer,
counts and retries a failed write without losing or duplicating rows, and flushes on close.

The store is an in-memory stand-in (the Parquet store has its own tests on Spark)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest

from exporter.config.history import HistoryConfig
from exporter.history.schema import CycleRow, Row
from exporter.history.store import HistoryStore
from exporter.history.writer import HistoryWriter
from tests.unit.history_fixtures import make as make_cycle
from tests.unit.history_fixtures import scenario


class MemoryStore(HistoryStore):
    """Appends to lists; fails while ``failing`` is set; blocks while ``gate`` is clear."""

    def __init__(self, spark: Any, config: HistoryConfig) -> None:
        super().__init__(spark, config)
        self.data: dict[str, list[Row]] = {}
        self.failing: set[str] = set()
        self.gate = threading.Event()
        self.gate.set()
        self.compacted: list[tuple[str, str, str]] = []
        self.dropped_before: list[str] = []

    def append(self, name: str, rows: Sequence[Row]) -> None:
        self.gate.wait(10)
        if name in self.failing:
            raise OSError(f"disk full writing {name}")
        self.data.setdefault(name, []).extend(rows)

    def compact(self, name: str, cluster: str, date: str) -> int:
        self.compacted.append((name, cluster, date))
        return 2

    def drop_before(self, cutoff_date: str, datasets: Any) -> list[str]:
        self.dropped_before.append(cutoff_date)
        return []


class Clock:
    def __init__(self) -> None:
        self.now = 1_795_000_000.0

    def __call__(self) -> float:
        return self.now


def writer(stores: list[MemoryStore], clock: Clock | None = None, **config: Any) -> HistoryWriter:
    def factory(spark: Any, cfg: HistoryConfig) -> MemoryStore:
        store = MemoryStore(spark, cfg)
        stores.append(store)
        return store

    return HistoryWriter(
        HistoryConfig(path="/unused", **config),
        object,
        clock=clock or Clock(),
        store_factory=factory,
        start=False,
    )


def feed(w: HistoryWriter, count: int | None = None, start: int = 0) -> None:
    for c in scenario()[start:count]:
        w(*make_cycle(c))


def test_the_listener_only_queues_the_cycle() -> None:
    stores: list[MemoryStore] = []
    w = writer(stores)
    feed(w, 3)
    assert (w.cycles_received, w.buffered_cycles, w.rows_written) == (3, 3, 0)
    assert stores == []  # nothing touched Spark on the cycle's thread


def test_the_buffer_is_bounded_and_drops_the_oldest_cycles_visibly(caplog: pytest.LogCaptureFixture) -> None:
    stores: list[MemoryStore] = []
    w = writer(stores, buffer_cycles=3, batch_cycles=1)
    feed(w)  # 8 cycles
    assert w.buffered_cycles == 3
    assert w.cycles_dropped == 5
    assert "history buffer full" in caplog.text
    assert w.flush_once()
    written = stores[0].data["cycles"]
    assert sorted(r.cycle_ms for r in written if isinstance(r, CycleRow)) == sorted(
        c.at_ms for c in scenario()[-3:]
    )


def test_a_failed_write_is_counted_logged_once_and_retried_with_the_next_batch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", "exporter.history.writer")
    stores: list[MemoryStore] = []
    w = writer(stores)
    feed(w, 1)
    w.flush_once()  # creates the store
    store = stores[0]
    store.failing = {"transactions"}
    feed(w, 4, start=1)
    assert not w.flush_once()
    assert not w.flush_once()
    assert w.writes_failed == 2
    assert caplog.text.count("history write to /unused failed") == 1
    # what was written before the failing dataset is not written again
    cycles_before = len(store.data["cycles"])
    store.failing = set()
    assert w.flush_once()
    assert "history writes recovered after 2 failure(s)" in caplog.text
    assert len(store.data["cycles"]) == cycles_before
    assert len(store.data["transactions"]) == 2 + 2 + 2 + 1  # each stored once, none lost
    assert w.buffered_cycles == 0
    assert w.counters()["writes_failed"] == 2


def test_pending_rows_after_failures_stay_within_the_bound() -> None:
    stores: list[MemoryStore] = []
    w = writer(stores, buffer_cycles=4)
    feed(w, 1)
    w.flush_once()
    stores[0].failing = {"cycles"}
    for _ in range(3):
        feed(w)
        w.flush_once()
        assert w.buffered_cycles <= 4
    assert w.cycles_dropped > 0


def test_spark_not_ready_is_a_failed_write_retried_later() -> None:
    ready: list[object] = []
    w = HistoryWriter(
        HistoryConfig(path="/unused"),
        lambda: ready[0] if ready else None,
        store_factory=MemoryStore,
        start=False,
    )
    feed(w, 2)
    assert not w.flush_once() and w.writes_failed == 1
    ready.append(object())
    assert w.flush_once() and w.cycles_written == 2


def test_compaction_and_retention_run_when_due_on_written_partitions() -> None:
    stores: list[MemoryStore] = []
    clock = Clock()
    w = writer(stores, clock=clock, compact_every_ms=3_600_000)
    feed(w, 2)
    w.flush_once()
    assert stores[0].compacted == []
    clock.now += 3600
    feed(w, 1)
    w.flush_once()
    assert {(c, d) for _, c, d in stores[0].compacted} == {("prod", "2026-11-18")}
    assert "actions" not in {n for n, _, _ in stores[0].compacted}
    assert stores[0].dropped_before == ["2026-10-19"]


def test_the_thread_writes_in_the_background_and_close_flushes() -> None:
    stores: list[MemoryStore] = []

    def factory(spark: Any, cfg: HistoryConfig) -> MemoryStore:
        store = MemoryStore(spark, cfg)
        stores.append(store)
        return store

    w = HistoryWriter(HistoryConfig(path="/unused", batch_cycles=100), object, store_factory=factory)
    feed(w)  # fewer than batch_cycles: waits for close
    w.close(timeout_s=10)
    assert len(stores[0].data["cycles"]) == 8
    assert w.cycles_written == 8
    w(*make_cycle(scenario()[0]))  # after close: ignored, not queued
    assert w.buffered_cycles == 0


def test_the_writers_counters_are_exported_for_prometheus() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from exporter.history.metrics import HistoryMetrics

    w = HistoryWriter(HistoryConfig(path="/unused"), object, start=False)
    w.cycles_written, w.rows_written, w.cycles_dropped, w.writes_failed = 7, 70, 1, 2
    registry = CollectorRegistry()
    registry.register(HistoryMetrics(w))
    text = generate_latest(registry).decode()
    assert "kafka_txn_exporter_history_cycles_written_total 7.0" in text
    assert "kafka_txn_exporter_history_rows_written_total 70.0" in text
    assert "kafka_txn_exporter_history_cycles_dropped_total 1.0" in text
    assert "kafka_txn_exporter_history_write_failures_total 2.0" in text
    assert "kafka_txn_exporter_history_buffered_cycles 0.0" in text
