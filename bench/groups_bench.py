"""Consumer-group benchmark: what the group family adds to one cycle.

Starts a single-node broker from the test bed (loopback only), creates one topic with
``--partitions`` partitions (plain records on each, and one open transaction on partition 0),
commits offsets for ``--groups`` consumer groups on every partition (AlterConsumerGroupOffsets,
all groups in flight together), then measures:

* **collection**: :func:`exporter.kafka.groups.collect_group_offsets` on a warm client: the
  cold call, then the median of ``--repeats`` warm calls, and the rows read;
* **pipeline**: :func:`exporter.pipeline.groups.compute_groups` (one Spark action) on the
  collected rows, cold and median warm, on a local Spark session;

and prints their sum beside the target (groups add <= 1 s to a cycle at 1000 x 100).
Bounded: at most 5000 groups and 1000 partitions; the broker and Spark are stopped at the end.

Run: ``.venv/bin/python bench/groups_bench.py [--groups 1000] [--partitions 100]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from exporter.config import SparkConfig
from exporter.groups_config import GroupsConfig
from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.groups import collect_group_offsets
from exporter.model import GroupOffset
from exporter.pipeline.groups import compute_groups
from exporter.pipeline.session import spark_session, stop
from testbed.broker import KafkaCluster
from testbed.scenarios import OpenTransaction, produce_plain

TARGET_S = 1.0
MAX_GROUPS = 5000
MAX_PARTITIONS = 1000


def _commit_offsets(cluster: KafkaCluster, topic: str, groups: list[str], partitions: int) -> None:
    admin = cluster.admin()
    for start in range(0, len(groups), 200):
        futures = [
            future
            for group in groups[start : start + 200]
            for future in admin.alter_consumer_group_offsets(
                [
                    ConsumerGroupTopicPartitions(
                        group, [TopicPartition(topic, p, 1) for p in range(partitions)]
                    )
                ]
            ).values()
        ]
        for future in futures:
            future.result(timeout=60)


def _timed(fn: object, repeats: int) -> tuple[float, float, object]:
    assert callable(fn)
    started = time.perf_counter()
    result = fn()
    cold = time.perf_counter() - started
    warm = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        warm.append(time.perf_counter() - started)
    return cold, statistics.median(warm) if warm else cold, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    groups_n = max(1, min(args.groups, MAX_GROUPS))
    partitions = max(1, min(args.partitions, MAX_PARTITIONS))
    cluster = KafkaCluster(brokers=1)
    cluster.start()
    spark = None
    try:
        topic = cluster.create_topic(f"bench-groups-{uuid.uuid4().hex[:6]}", partitions=partitions)
        for p in range(partitions):
            produce_plain(cluster.bootstrap_servers, topic, partition=p, records=2)
        groups = [f"bench-{i:05d}" for i in range(groups_n)]
        started = time.perf_counter()
        _commit_offsets(cluster, topic, groups, partitions)
        print(
            f"setup: {groups_n} groups x {partitions} partitions committed in "
            f"{time.perf_counter() - started:.1f} s"
        )
        with (
            OpenTransaction(
                cluster.bootstrap_servers, topic, partition=0, transaction_timeout_ms=900_000
            ) as txn,
            ClusterAdmin(bootstrap_servers=cluster.bootstrap_servers) as admin,
        ):
            txn.begin(records=1)
            client = admin._kafka_client()
            brokers = cluster.live_broker_ids()
            cold_c, warm_c, collected = _timed(
                lambda: collect_group_offsets(
                    client,
                    broker_ids=brokers,
                    topic_filter=lambda t: t == topic,
                    group_filter=lambda g: g.startswith("bench-"),
                ),
                args.repeats,
            )
            rows: tuple[GroupOffset, ...] = collected.rows  # type: ignore[attr-defined]
            print(
                f"collection: {len(rows)} rows, {len(collected.errors)} errors; "  # type: ignore[attr-defined]
                f"cold {cold_c:.3f} s, warm median {warm_c:.3f} s"
            )
            spark = spark_session(
                SparkConfig(
                    master="local[2]",
                    app_name="groups-bench",
                    local_dir=tempfile.mkdtemp(prefix="kte-bench-spark-"),
                    driver_memory="1g",
                )
            )
            parts = spark.createDataFrame(
                [(topic, p, 3 if p == 0 else 2, 2) for p in range(partitions)],
                "topic string, partition int, high_watermark long, last_stable_offset long",
            )
            txns = spark.createDataFrame(
                [(topic, 0, 2, txn.transactional_id, 1, "ongoing", 1000)],
                "topic string, partition int, start_offset long, transactional_id string, "
                "producer_id long, txn_class string, duration_ms long",
            )
            config = GroupsConfig(enabled=True)
            cold_p, warm_p, _ = _timed(
                lambda: compute_groups(spark, rows, parts, txns, config, int(time.time() * 1000)),
                args.repeats,
            )
            print(f"pipeline: cold {cold_p:.3f} s, warm median {warm_p:.3f} s")
            added = warm_c + warm_p
            verdict = "within" if added <= TARGET_S else "OVER"
            print(
                f"groups add {added:.3f} s to a warm cycle "
                f"(target <= {TARGET_S:.1f} s at 1000 x 100: {verdict})"
            )
    finally:
        if spark is not None:
            stop(spark)
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
