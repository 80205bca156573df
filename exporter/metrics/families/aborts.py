"""Transactions the coordinators aborted on timeout (KIP-588), counted since the exporter
started (the count is carried from cycle to cycle in the pipeline's memory)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from exporter.metrics import catalogue as c
from exporter.metrics.scrape import Scrape


def render(scrape: Scrape) -> Iterator[Metric]:
    aborts = scrape.metric(c.COORDINATOR_TIMEOUT_ABORTS)
    for s, r in scrape.results():
        for total in r.memory.timeout_aborts_total:
            aborts.add_metric([s.cluster, str(total.coordinator_id)], total.count)
    yield aborts
