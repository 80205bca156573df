"""Rendering of the consumer-group family as Prometheus text."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from exporter.metrics.groups import render_group_families
from exporter.model import (
    BlockedGroupPartition,
    GroupLag,
    GroupsResult,
    GroupSummary,
    TxnClass,
)

RESULT = GroupsResult(
    lags=(
        GroupLag("reader", "orders", consumable_lag=0, blocked_lag=5),
        GroupLag("lagging", "orders", consumable_lag=40, blocked_lag=0, upper_bound_partitions=2),
    ),
    partition_lags=(
        GroupLag("reader", "orders", 0, 5, partition=2),
        GroupLag("lagging", "orders", 40, 0, partition=1, upper_bound_partitions=1),
    ),
    blocked=(
        BlockedGroupPartition(
            group="reader",
            topic="orders",
            partition=2,
            committed_offset=10,
            last_stable_offset=10,
            high_watermark=15,
            blocked_since_ms=1_000,
            blocked_ms=90_500,
            transactional_id="app-0_2",
            producer_id=77,
            start_offset=10,
            txn_class=TxnClass.HANGING,
            txn_duration_ms=600_000,
            application="app",
        ),
        BlockedGroupPartition(
            group="other",
            topic="orders",
            partition=1,
            committed_offset=3,
            last_stable_offset=3,
            high_watermark=4,
            blocked_since_ms=0,
            blocked_ms=1_000,
        ),
    ),
    groups=(GroupSummary("reader", 1, "Stable", blocked_partitions=1, unstable_offset_commits=2),),
)


class _Fixed(Collector):
    def __init__(self, label: str) -> None:
        self.label = label

    def collect(self) -> list[Metric]:
        return list(render_group_families([("prod", RESULT)], cluster_label=self.label))


def render(label: str = "kafka_cluster") -> str:
    registry = CollectorRegistry()
    registry.register(_Fixed(label))
    return generate_latest(registry).decode()


def test_lag_split_is_rendered_per_group_and_topic_and_per_partition() -> None:
    text = render()
    assert (
        'kafka_txn_consumer_group_lag_consumable{group="reader",kafka_cluster="prod",topic="orders"} 0.0'
    ) in text
    assert (
        'kafka_txn_consumer_group_lag_blocked{group="reader",kafka_cluster="prod",topic="orders"} 5.0'
    ) in text
    assert (
        'kafka_txn_consumer_group_partition_lag_blocked{group="reader",kafka_cluster="prod",'
        'partition="2",topic="orders"} 5.0'
    ) in text


def test_a_consumable_lag_not_read_to_the_lso_says_it_is_an_upper_bound() -> None:
    text = render()
    assert (
        'kafka_txn_consumer_group_lag_consumable_upper_bound_partitions{group="lagging",'
        'kafka_cluster="prod",topic="orders"} 2.0'
    ) in text
    assert (
        'kafka_txn_consumer_group_lag_consumable_upper_bound_partitions{group="reader",'
        'kafka_cluster="prod",topic="orders"} 0.0'
    ) in text
    assert (
        'kafka_txn_consumer_group_partition_lag_consumable_upper_bound{group="lagging",'
        'kafka_cluster="prod",partition="1",topic="orders"} 1.0'
    ) in text


def test_help_texts_say_which_lag_a_read_committed_consumer_can_read() -> None:
    text = render()
    assert (
        "# HELP kafka_txn_consumer_group_lag_consumable Records a read_committed consumer "
        "group can read now" in text
    )
    assert (
        "# HELP kafka_txn_consumer_group_lag_blocked Records a read_committed consumer "
        "group can NOT read yet" in text
    )


def test_blocked_partition_names_the_transaction_and_how_long() -> None:
    text = render()
    assert (
        'kafka_txn_consumer_group_blocked_info{application="app",class="hanging",'
        'group="reader",kafka_cluster="prod",partition="2",producer_id="77",start_offset="10",'
        'topic="orders",transactional_id="app-0_2"} 1.0'
    ) in text
    assert (
        'kafka_txn_consumer_group_blocked_seconds{group="reader",kafka_cluster="prod",'
        'partition="2",topic="orders"} 90.5'
    ) in text


def test_unknown_transaction_at_the_lso_renders_empty_labels() -> None:
    assert (
        'kafka_txn_consumer_group_blocked_info{application="",class="",group="other",'
        'kafka_cluster="prod",partition="1",producer_id="",start_offset="",topic="orders",'
        'transactional_id=""} 1.0'
    ) in render()


def test_group_counts() -> None:
    text = render()
    assert 'kafka_txn_consumer_group_blocked_partitions{group="reader",kafka_cluster="prod"} 1.0' in text
    assert (
        'kafka_txn_consumer_group_unstable_offset_commits{group="reader",kafka_cluster="prod"} 2.0'
    ) in text


def test_cluster_label_name_is_configurable() -> None:
    text = render("cluster")
    assert 'kafka_txn_consumer_group_blocked_partitions{cluster="prod",group="reader"} 1.0' in text
    assert "kafka_cluster=" not in text


def test_every_family_is_described_even_without_groups() -> None:
    families = list(render_group_families([]))
    assert {f.name for f in families} == {
        "kafka_txn_consumer_group_lag_consumable",
        "kafka_txn_consumer_group_lag_consumable_upper_bound_partitions",
        "kafka_txn_consumer_group_lag_blocked",
        "kafka_txn_consumer_group_partition_lag_consumable",
        "kafka_txn_consumer_group_partition_lag_consumable_upper_bound",
        "kafka_txn_consumer_group_partition_lag_blocked",
        "kafka_txn_consumer_group_blocked_info",
        "kafka_txn_consumer_group_blocked_seconds",
        "kafka_txn_consumer_group_blocked_partitions",
        "kafka_txn_consumer_group_unstable_offset_commits",
    }
    assert all(not f.samples for f in families)
