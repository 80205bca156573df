"""The history writer's own metrics: what it wrote, dropped and failed to write.

Process-level series (one writer per exporter, for every cluster), rendered from the
writer's monotonic counters at scrape time: no lock, no I/O on the scrape path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

PREFIX = "kafka_txn_exporter_history"


class WriterCounters(Protocol):
    cycles_written: int
    cycles_dropped: int
    rows_written: int
    writes_failed: int
    maintenance_failed: int
    last_write_seconds: float

    @property
    def buffered_cycles(self) -> int: ...


class HistoryMetrics(Collector):
    def __init__(self, writer: WriterCounters) -> None:
        self._writer = writer

    def collect(self) -> Iterator[Metric]:
        w = self._writer
        yield CounterMetricFamily(
            f"{PREFIX}_cycles_written",
            "Cycles whose facts were appended to the history.",
            value=w.cycles_written,
        )
        yield CounterMetricFamily(
            f"{PREFIX}_rows_written", "Rows appended to the history (all datasets).", value=w.rows_written
        )
        yield CounterMetricFamily(
            f"{PREFIX}_cycles_dropped",
            "Cycles dropped before they were written: the buffer (history.buffer_cycles) was full "
            "because writes kept failing or could not keep up. Lost history.",
            value=w.cycles_dropped,
        )
        yield CounterMetricFamily(
            f"{PREFIX}_write_failures",
            "Failed history writes; their cycles stay buffered and are retried with the next batch.",
            value=w.writes_failed,
        )
        yield CounterMetricFamily(
            f"{PREFIX}_maintenance_failures",
            "Failed compactions or retention passes of the history.",
            value=w.maintenance_failed,
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_buffered_cycles", "Cycles waiting to be written.", value=w.buffered_cycles
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_last_write_duration_seconds",
            "How long the last history write took (the writer thread, off the cycle's path).",
            value=w.last_write_seconds,
        )
