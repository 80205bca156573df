"""Consumer-group benchmark: what the group family adds to one cycle.

Starts a single-node broker from the test bed (loopback only), creates one topic with
``--partitions`` partitions (plain records on each, and one open transaction on partition 0),
commits offsets for ``--groups`` consumer groups on every partition (AlterConsumerGroupOffsets,
all groups in flight together), then measures:

* **collection**: :func:`exporter.kafka.groups.collect_group_offsets` on a warm client: the
  cold call, then the median of ``--repeats`` warm calls, and the rows read;
* **pipeline**: the daemon's cycle (:func:`exporter.pipeline.compute.compute`, one Spark
  action) on a snapshot of the topic with the collected group offsets, with and without the
  group family, alternating on one local Spark session (the daemon's 512m driver);

* **the daemon's cycle**: the collector's whole snapshot (:class:`SnapshotCollector`, every
  stage, the group offsets in parallel with the others as in the daemon, then the consumable
  checks they call for) and the pipeline on it, with and without the group family,
  alternating;

and prints what groups add to that cycle (the difference of the two medians) beside the
target (groups add <= 1 s to a cycle at 1000 x 100), and beside it the sum of the parts
measured alone (warm collection + the pipeline's difference), which counts the group
offsets' requests as if nothing else ran while they were in flight.
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
from pyspark.sql import SparkSession

from exporter.config import SparkConfig
from exporter.config.groups import GroupsConfig
from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.collector import SnapshotCollector
from exporter.kafka.groups import collect_group_offsets, offsets_of
from exporter.model import (
    Broker,
    BrokerConfig,
    ClusterSnapshot,
    GroupOffsets,
    ListedTransaction,
    PartitionOffsets,
    PipelineMemory,
    PipelineSettings,
    ProducerState,
    TransactionDescription,
)
from exporter.model import TopicPartition as ModelTopicPartition
from exporter.pipeline.compute import compute
from exporter.pipeline.session import spark_session, stop
from testbed.broker import KafkaCluster
from testbed.scenarios import OpenTransaction, produce_plain

TARGET_S = 1.0
MAX_GROUPS = 5000
MAX_PARTITIONS = 1000


def _commit_offsets(cluster: KafkaCluster, topic: str, groups: list[str], partitions: int) -> None:
    """Commit offset 1 on every partition for every group, then make sure Kafka lists every
    group: on the test bed's Kafka 4.4 broker, 1 to 28 of 1000 groups committed this way
    (requests and partitions without error) were later listed by no broker and described
    as Dead, so the benchmark read fewer than ``groups x partitions`` offsets. Those groups
    are committed again."""
    admin = cluster.admin()
    pending = list(groups)
    for _ in range(5):
        for start in range(0, len(pending), 200):
            futures = [
                future
                for group in pending[start : start + 200]
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
        listed = {g.group_id for g in admin.list_consumer_groups().result(timeout=60).valid}
        pending = [g for g in groups if g not in listed]
        if not pending:
            return
        time.sleep(1)
    raise RuntimeError(f"{len(pending)} group(s) are not listed after committing, e.g. {pending[0]}")


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


def _snapshot(
    topic: str, partitions: int, rows: GroupOffsets, transactional_id: str, brokers: list[int]
) -> ClusterSnapshot:
    """The cycle's snapshot as the collector leaves it: the topic's offsets (partition 0 holds
    the open transaction: HWM 3, LSO 2), the transaction and its owner, the group offsets."""
    now = int(time.time() * 1000)
    leader, pid = brokers[0], 1
    return ClusterSnapshot(
        cluster="bench",
        taken_at_ms=now,
        brokers=tuple(Broker(b, "127.0.0.1", 9092) for b in brokers),
        broker_configs=tuple(BrokerConfig(b) for b in brokers),
        partitions=tuple(
            PartitionOffsets(topic, p, leader, 3 if p == 0 else 2, 2) for p in range(partitions)
        ),
        producers=(ProducerState(topic, 0, leader, pid, 0, 0, now - 1000, 0, 2),),
        listed_transactions=(ListedTransaction(leader, transactional_id, pid, "Ongoing"),),
        transactions=(
            TransactionDescription(
                leader,
                transactional_id,
                None,
                "Ongoing",
                900_000,
                now - 1000,
                pid,
                0,
                (ModelTopicPartition(topic, 0),),
            ),
        ),
        coordinators_listed=frozenset(brokers),
        group_offsets=rows,
    )


def _cycles(
    spark: SparkSession, snap: ClusterSnapshot, config: GroupsConfig, repeats: int
) -> tuple[float, float]:
    """Warm pipeline cycles of the daemon's kind (:func:`compute`) on the same snapshot,
    without and with the group family, alternating; their medians."""
    settings = PipelineSettings()
    memory: dict[bool, PipelineMemory | None] = {False: None, True: None}
    times: dict[bool, list[float]] = {False: [], True: []}
    for i in range(repeats + 1):
        for with_groups in (False, True):
            started = time.perf_counter()
            result = compute(
                spark,
                snap,
                settings,
                memory[with_groups],
                snap.taken_at_ms + i,
                groups=config if with_groups else None,
            )
            if i:  # the first of each is cold
                times[with_groups].append(time.perf_counter() - started)
            memory[with_groups] = result.memory
    return statistics.median(times[False]), statistics.median(times[True])


def _daemon_cycles(
    spark: SparkSession, bootstrap: str, topic: str, config: GroupsConfig, repeats: int
) -> dict[bool, tuple[float, float, float]]:
    """Warm cycles as the daemon runs them (collect, then compute with the previous cycle's
    memory), without and with the group family, alternating: the medians of the cycle, its
    collection and its pipeline."""
    collectors = {
        with_groups: SnapshotCollector(
            cluster="bench",
            admin=ClusterAdmin(bootstrap_servers=bootstrap),
            topic_filter=lambda t: t == topic,
            named_topics=(topic,),
            groups=config if with_groups else None,
        )
        for with_groups in (False, True)
    }
    settings = PipelineSettings()
    memory: dict[bool, PipelineMemory | None] = {False: None, True: None}
    times: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    try:
        for i in range(repeats + 1):
            for with_groups in (False, True):
                started = time.perf_counter()
                snap = collectors[with_groups].collect()
                collected = time.perf_counter()
                result = compute(
                    spark,
                    snap,
                    settings,
                    memory[with_groups],
                    snap.taken_at_ms,
                    groups=config if with_groups else None,
                )
                done = time.perf_counter()
                if with_groups and not snap.group_offsets:
                    raise RuntimeError("the collector read no group offset")
                if i:  # the first of each is cold
                    times[with_groups].append((done - started, collected - started, done - collected))
                memory[with_groups] = result.memory
    finally:
        for collector in collectors.values():
            collector.close()
    return {
        with_groups: tuple(statistics.median(t[k] for t in runs) for k in range(3))  # type: ignore[misc]
        for with_groups, runs in times.items()
    }


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
            rows = offsets_of(collected)  # type: ignore[arg-type]
            print(
                f"collection: {len(rows)} rows, {len(collected.errors)} errors; "  # type: ignore[attr-defined]
                f"cold {cold_c:.3f} s, warm median {warm_c:.3f} s"
            )
            spark = spark_session(
                SparkConfig(
                    master="local[2]",
                    app_name="groups-bench",
                    local_dir=tempfile.mkdtemp(prefix="kte-bench-spark-"),
                    driver_memory="512m",
                )
            )
            snap = _snapshot(topic, partitions, rows, txn.transactional_id, sorted(brokers))
            without, with_groups = _cycles(spark, snap, GroupsConfig(enabled=True), args.repeats)
            print(
                f"pipeline cycle (warm medians, alternating): without groups {without:.3f} s, "
                f"with groups {with_groups:.3f} s"
            )
            parts = warm_c + max(0.0, with_groups - without)
            daemon = _daemon_cycles(
                spark, cluster.bootstrap_servers, topic, GroupsConfig(enabled=True), args.repeats
            )
            (plain, plain_c, plain_p), (grouped, grouped_c, grouped_p) = daemon[False], daemon[True]
            print(
                f"daemon cycle (collect + compute, warm medians, alternating): without groups "
                f"{plain:.3f} s (collection {plain_c:.3f} + pipeline {plain_p:.3f}), with groups "
                f"{grouped:.3f} s (collection {grouped_c:.3f} + pipeline {grouped_p:.3f})"
            )
            added = max(0.0, grouped - plain)
            verdict = "within" if added <= TARGET_S else "OVER"
            print(
                f"groups add {added:.3f} s to the daemon's warm cycle (target <= {TARGET_S:.1f} s at "
                f"1000 x 100: {verdict}); the parts measured alone add up to {parts:.3f} s "
                f"(collection {warm_c:.3f} s + pipeline {with_groups - without:.3f} s)"
            )
            print(f"FIGURE\tgroups_added_s@{groups_n}x{partitions}\t{added:.4g}")
            print(f"FIGURE\tgroups_parts_s@{groups_n}x{partitions}\t{parts:.4g}")
    finally:
        if spark is not None:
            stop(spark)
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
