"""Per partition: the age of its oldest open transaction and its last-stable-offset lag (the
lag's series as ``pipeline.lso_lag_series`` says: every partition, those with an open
transaction or a lag, or those with a lag)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from exporter.metrics import catalogue as c
from exporter.metrics.scrape import Scrape


def render(scrape: Scrape) -> Iterator[Metric]:
    duration = scrape.metric(c.PARTITION_MAX_ACTIVE_TRANSACTION_DURATION)
    lag = scrape.metric(c.PARTITION_LAST_STABLE_OFFSET_LAG)
    mode = scrape.settings.lso_lag_series
    for s, r in scrape.results():
        for p in r.partitions:
            labels = [s.cluster, p.topic, str(p.partition)]
            if p.max_active_transaction_duration_ms is not None:
                duration.add_metric(labels, p.max_active_transaction_duration_ms / 1000)
            if p.lso_lag is None:
                continue
            if (
                mode == "all"
                or p.lso_lag > 0
                or (mode == "open" and p.max_active_transaction_duration_ms is not None)
            ):
                lag.add_metric(labels, float(p.lso_lag))
    yield from (duration, lag)
