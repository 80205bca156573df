"""Renders the topics family (``CycleResult.topics``).

Example output::

    # HELP kafka_txn_topic_max_last_stable_offset_lag Largest LastStableOffsetLag ...
    # TYPE kafka_txn_topic_max_last_stable_offset_lag gauge
    kafka_txn_topic_max_last_stable_offset_lag{kafka_cluster="prod",topic="orders"} 42.0
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.metrics.catalogue import (
    TOPIC_MAX_ACTIVE_TRANSACTION_DURATION,
    TOPIC_MAX_LAST_STABLE_OFFSET_LAG,
    TOPIC_PARTITIONS_WITH_OPEN_TRANSACTIONS,
)
from exporter.model import CycleResult


def render(results: Sequence[tuple[str, CycleResult]], cluster_label: str) -> Iterator[Metric]:
    labels = [cluster_label, "topic"]
    lag = GaugeMetricFamily(
        TOPIC_MAX_LAST_STABLE_OFFSET_LAG,
        "Largest LastStableOffsetLag (high watermark minus last stable offset, ListOffsets) over "
        "the topic's partitions: how far its read_committed consumers are held back.",
        labels=labels,
    )
    duration = GaugeMetricFamily(
        TOPIC_MAX_ACTIVE_TRANSACTION_DURATION,
        "Age of the oldest open transaction on any of the topic's partitions, from its start "
        "(MaxActiveTransactionDuration per topic; absent when none is open).",
        labels=labels,
    )
    open_partitions = GaugeMetricFamily(
        TOPIC_PARTITIONS_WITH_OPEN_TRANSACTIONS,
        "The topic's partitions with at least one open transaction (DescribeProducers).",
        labels=labels,
    )
    for cluster, result in results:
        for t in result.topics:
            series = [cluster, t.topic]
            lag.add_metric(series, t.max_last_stable_offset_lag)
            open_partitions.add_metric(series, t.partitions_with_open_transactions)
            if t.max_active_transaction_duration_ms is not None:
                duration.add_metric(series, t.max_active_transaction_duration_ms / 1000)
    yield from (lag, duration, open_partitions)
