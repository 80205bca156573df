"""Open partition-level transactions by the application they are attributed to, and class
(with or without consumer groups)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from exporter.metrics import catalogue as c
from exporter.metrics.scrape import Scrape


def render(scrape: Scrape) -> Iterator[Metric]:
    by_application = scrape.metric(c.OPEN_TRANSACTIONS_BY_APPLICATION)
    for s, r in scrape.results():
        for a in r.open_transactions_by_application:
            by_application.add_metric([s.cluster, a.application, a.txn_class.value], a.count)
    yield by_application
