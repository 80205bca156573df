"""The history writer's own metrics: what it wrote, dropped and failed to write.

Process-level series (one writer per exporter, for every cluster), rendered from the
writer's monotonic counters at scrape time: no lock, no I/O on the scrape path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from exporter.metrics import catalogue as c


class WriterCounters(Protocol):
    cycles_written: int
    cycles_dropped: int
    rows_written: int
    writes_failed: int
    maintenance_failed: int
    last_write_seconds: float

    @property
    def buffered_cycles(self) -> int: ...


#: Each family (name, kind and help in the catalogue) and the writer's counter it shows.
FAMILIES: tuple[tuple[str, str], ...] = (
    (c.HISTORY_CYCLES_WRITTEN, "cycles_written"),
    (c.HISTORY_ROWS_WRITTEN, "rows_written"),
    (c.HISTORY_CYCLES_DROPPED, "cycles_dropped"),
    (c.HISTORY_WRITE_FAILURES, "writes_failed"),
    (c.HISTORY_MAINTENANCE_FAILURES, "maintenance_failed"),
    (c.HISTORY_BUFFERED_CYCLES, "buffered_cycles"),
    (c.HISTORY_LAST_WRITE_DURATION, "last_write_seconds"),
)


class HistoryMetrics(Collector):
    def __init__(self, writer: WriterCounters) -> None:
        self._writer = writer

    def collect(self) -> Iterator[Metric]:
        for name, attribute in FAMILIES:
            metric = c.family(name).metric()
            metric.add_metric([], float(getattr(self._writer, attribute)))
            yield metric
