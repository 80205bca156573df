"""Prometheus families of the consumer-group family, rendered from :class:`GroupsResult` s.

Pure: takes each cluster's latest result, never calls Kafka. The cluster label's name is a
parameter (the top-level ``cluster_label`` config, ``kafka_cluster`` by default). Every
family is yielded even when empty, so HELP and TYPE are on the page whenever groups are on.
The open transactions by application are not among them: they belong to the transactions
(``exporter.metrics.collector``), with or without groups.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.model import GroupsResult

PREFIX = "kafka_txn"
DEFAULT_CLUSTER_LABEL = "kafka_cluster"

CONSUMABLE_HELP = (
    "Records a read_committed consumer group can read now on the topic, summed over "
    "partitions: counted in the batches between the committed offset and the last stable "
    "offset (Fetch READ_COMMITTED; transaction markers and aborted records do not count), "
    "else LSO - committed (OffsetFetch, ListOffsets READ_COMMITTED), an upper bound: see "
    "_upper_bound_partitions."
)
UPPER_BOUND_HELP = (
    "Partitions of the group on the topic whose consumable lag is an upper bound (LSO - "
    "committed, or what was counted plus every offset not read): the batches up to the LSO "
    "were not all read this cycle (consumable_check_max_bytes, a failed Fetch). 0: exact."
)
BLOCKED_HELP = (
    "Records a read_committed consumer group can NOT read yet: from the last stable offset (or "
    "the committed offset, when past it) to the high watermark, behind open transactions "
    "(ListOffsets READ_COMMITTED and READ_UNCOMMITTED). A read_uncommitted consumer can read "
    "them."
)


def render_group_families(
    results: Iterable[tuple[str, GroupsResult]], *, cluster_label: str = DEFAULT_CLUSTER_LABEL
) -> Iterator[Metric]:
    """The group families for ``(cluster, result)`` pairs."""
    cl = cluster_label
    consumable = GaugeMetricFamily(
        f"{PREFIX}_consumer_group_lag_consumable", CONSUMABLE_HELP, labels=[cl, "group", "topic"]
    )
    upper_bound = GaugeMetricFamily(
        f"{PREFIX}_consumer_group_lag_consumable_upper_bound_partitions",
        UPPER_BOUND_HELP,
        labels=[cl, "group", "topic"],
    )
    blocked_lag = GaugeMetricFamily(
        f"{PREFIX}_consumer_group_lag_blocked", BLOCKED_HELP, labels=[cl, "group", "topic"]
    )
    consumable_p = GaugeMetricFamily(
        f"{PREFIX}_consumer_group_partition_lag_consumable",
        "Per partition (opt-in): " + CONSUMABLE_HELP,
        labels=[cl, "group", "topic", "partition"],
    )
    blocked_p = GaugeMetricFamily(
        f"{PREFIX}_consumer_group_partition_lag_blocked",
        "Per partition (opt-in): " + BLOCKED_HELP,
        labels=[cl, "group", "topic", "partition"],
    )
    upper_bound_p = GaugeMetricFamily(
        f"{PREFIX}_consumer_group_partition_lag_consumable_upper_bound",
        "Per partition (opt-in): 1 when the partition's consumable lag is an upper bound (the "
        "batches up to the LSO were not all read this cycle), 0 when it is exact.",
        labels=[cl, "group", "topic", "partition"],
    )
    info = GaugeMetricFamily(
        f"{PREFIX}_consumer_group_blocked_info",
        "1 per group partition blocked by a transaction: nothing a read_committed consumer "
        "gets lies before the last stable offset (committed there, or only transaction markers "
        "and aborted records between, read from the batches), the LSO is below the high "
        "watermark and has not moved for blocked_after_cycles cycles (OffsetFetch, ListOffsets, "
        "Fetch READ_COMMITTED). Names the open transaction "
        "whose first offset is the LSO (DescribeProducers, DescribeTransactions) and the "
        "application it is attributed to.",
        labels=[
            cl,
            "group",
            "topic",
            "partition",
            "transactional_id",
            "producer_id",
            "start_offset",
            "class",
            "application",
        ],
    )
    seconds = GaugeMetricFamily(
        f"{PREFIX}_consumer_group_blocked_seconds",
        "How long the group partition has been at the last stable offset it is blocked at, "
        "since the first cycle that saw it there.",
        labels=[cl, "group", "topic", "partition"],
    )
    partitions = GaugeMetricFamily(
        f"{PREFIX}_consumer_group_blocked_partitions",
        "Partitions of the group blocked by a transaction.",
        labels=[cl, "group"],
    )
    unstable = GaugeMetricFamily(
        f"{PREFIX}_consumer_group_unstable_offset_commits",
        "Partitions of the group with a pending transactional offset commit (OffsetFetch with "
        "RequireStable answered UNSTABLE_OFFSET_COMMIT).",
        labels=[cl, "group"],
    )
    for cluster, r in results:
        for lag in r.lags:
            labels = [cluster, lag.group, lag.topic]
            consumable.add_metric(labels, float(lag.consumable_lag))
            upper_bound.add_metric(labels, float(lag.upper_bound_partitions))
            blocked_lag.add_metric(labels, float(lag.blocked_lag))
        for lag in r.partition_lags:
            labels = [cluster, lag.group, lag.topic, str(lag.partition)]
            consumable_p.add_metric(labels, float(lag.consumable_lag))
            upper_bound_p.add_metric(labels, float(lag.upper_bound_partitions))
            blocked_p.add_metric(labels, float(lag.blocked_lag))
        for b in r.blocked:
            where = [cluster, b.group, b.topic, str(b.partition)]
            info.add_metric(
                [
                    *where,
                    b.transactional_id or "",
                    str(b.producer_id) if b.producer_id >= 0 else "",
                    str(b.start_offset) if b.start_offset >= 0 else "",
                    b.txn_class.value if b.txn_class is not None else "",
                    b.application or "",
                ],
                1.0,
            )
            seconds.add_metric(where, b.blocked_ms / 1000)
        for g in r.groups:
            partitions.add_metric([cluster, g.group], float(g.blocked_partitions))
            unstable.add_metric([cluster, g.group], float(g.unstable_offset_commits))
    yield from (
        consumable,
        upper_bound,
        blocked_lag,
        consumable_p,
        upper_bound_p,
        blocked_p,
        info,
        seconds,
        partitions,
        unstable,
    )
