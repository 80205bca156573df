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


#: (name, kind, help, writer attribute): one row per family.
FAMILIES: tuple[tuple[str, str, str, str], ...] = (
    ("cycles_written", "counter", "Cycles whose facts were appended to the history.", "cycles_written"),
    ("rows_written", "counter", "Rows appended to the history (all datasets).", "rows_written"),
    (
        "cycles_dropped",
        "counter",
        "Cycles dropped before they were written: the buffer (history.buffer_cycles) was full "
        "because writes kept failing or could not keep up. Lost history.",
        "cycles_dropped",
    ),
    (
        "write_failures",
        "counter",
        "Failed history writes; their cycles stay buffered and are retried with the next batch.",
        "writes_failed",
    ),
    (
        "maintenance_failures",
        "counter",
        "Failed compactions or retention passes of the history.",
        "maintenance_failed",
    ),
    ("buffered_cycles", "gauge", "Cycles waiting to be written.", "buffered_cycles"),
    (
        "last_write_duration_seconds",
        "gauge",
        "How long the last history write took (the writer thread, off the cycle's path).",
        "last_write_seconds",
    ),
)


class HistoryMetrics(Collector):
    def __init__(self, writer: WriterCounters) -> None:
        self._writer = writer

    def collect(self) -> Iterator[Metric]:
        for name, kind, help_text, attribute in FAMILIES:
            family = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            yield family(f"{PREFIX}_{name}", help_text, value=float(getattr(self._writer, attribute)))
