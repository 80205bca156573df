"""Per topic: the largest last-stable-offset lag over its partitions, the age of its oldest
open transaction and how many of its partitions hold one (``CycleResult.topics``).

Example output::

    # HELP kafka_txn_topic_max_last_stable_offset_lag Largest LastStableOffsetLag ...
    # TYPE kafka_txn_topic_max_last_stable_offset_lag gauge
    kafka_txn_topic_max_last_stable_offset_lag{kafka_cluster="prod",topic="orders"} 42.0
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from exporter.metrics import catalogue as c
from exporter.metrics.scrape import Scrape


def render(scrape: Scrape) -> Iterator[Metric]:
    lag = scrape.metric(c.TOPIC_MAX_LAST_STABLE_OFFSET_LAG)
    duration = scrape.metric(c.TOPIC_MAX_ACTIVE_TRANSACTION_DURATION)
    open_partitions = scrape.metric(c.TOPIC_PARTITIONS_WITH_OPEN_TRANSACTIONS)
    for s, r in scrape.results():
        for t in r.topics:
            labels = [s.cluster, t.topic]
            lag.add_metric(labels, t.max_last_stable_offset_lag)
            open_partitions.add_metric(labels, t.partitions_with_open_transactions)
            if t.max_active_transaction_duration_ms is not None:
                duration.add_metric(labels, t.max_active_transaction_duration_ms / 1000)
    yield from (lag, duration, open_partitions)
