"""Prometheus families of the consumer-group family, rendered from :class:`GroupsResult` s.

Pure: takes each cluster's latest result, never calls Kafka. The cluster label's name is a
parameter (the top-level ``cluster_label`` config, ``kafka_cluster`` by default). Every
family is yielded, even when empty, whenever a cluster has groups configured, so HELP and
TYPE are on the page then. The open transactions by application are not among them: they
belong to the attribution (``exporter.metrics.families.attribution``), with or without groups.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporter.metrics import catalogue as c
from exporter.metrics.scrape import Scrape
from exporter.model import GroupsResult


def render(scrape: Scrape) -> Iterator[Metric]:
    groups = [(s.cluster, r.groups) for s, r in scrape.results() if r.groups is not None]
    if groups:
        yield from render_group_families(groups, cluster_label=scrape.cluster_label)


def render_group_families(
    results: Iterable[tuple[str, GroupsResult]], *, cluster_label: str = c.DEFAULT_CLUSTER_LABEL
) -> Iterator[Metric]:
    """The group families for ``(cluster, result)`` pairs."""

    def metric(name: str) -> GaugeMetricFamily | CounterMetricFamily:
        return c.family(name).metric(cluster_label)

    consumable = metric(c.CONSUMER_GROUP_LAG_CONSUMABLE)
    upper_bound = metric(c.CONSUMER_GROUP_LAG_CONSUMABLE_UPPER_BOUND)
    blocked_lag = metric(c.CONSUMER_GROUP_LAG_BLOCKED)
    consumable_p = metric(c.CONSUMER_GROUP_PARTITION_LAG_CONSUMABLE)
    blocked_p = metric(c.CONSUMER_GROUP_PARTITION_LAG_BLOCKED)
    upper_bound_p = metric(c.CONSUMER_GROUP_PARTITION_LAG_CONSUMABLE_UPPER_BOUND)
    info = metric(c.CONSUMER_GROUP_BLOCKED_INFO)
    seconds = metric(c.CONSUMER_GROUP_BLOCKED_SECONDS)
    partitions = metric(c.CONSUMER_GROUP_BLOCKED_PARTITIONS)
    unstable = metric(c.CONSUMER_GROUP_UNSTABLE_OFFSET_COMMITS)
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
