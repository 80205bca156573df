"""A tiny snapshot that exercises every branch of the pipeline once, to warm Spark up.

Spark generates and compiles code the first time each plan runs; running the pipeline on
this at start-up moves that cost (seconds) out of the first real cycle.
"""

from __future__ import annotations

from exporter.model import (
    BatchTimestamp,
    Broker,
    BrokerConfig,
    ClusterSnapshot,
    ListedTransaction,
    PartitionOffsets,
    ProducerState,
    TopicPartition,
    TransactionDescription,
)

_NOW_MS = 1_800_000_000_000


def warmup_snapshot() -> ClusterSnapshot:
    """One broker, two partitions: a legitimate open transaction and a hanging one."""
    legit = TransactionDescription(
        coordinator_id=1,
        transactional_id="warmup-legit",
        error=None,
        state="Ongoing",
        timeout_ms=60_000,
        start_time_ms=_NOW_MS - 1000,
        producer_id=1,
        producer_epoch=0,
        partitions=(TopicPartition("warmup", 0),),
    )
    gone = TransactionDescription(
        coordinator_id=1,
        transactional_id="warmup-gone",
        error=None,
        state="Empty",
        producer_id=2,
        producer_epoch=0,
    )
    producers = (
        ProducerState("warmup", 0, 1, 1, 0, 4, _NOW_MS - 500, 0, 5),
        ProducerState("warmup", 1, 1, 2, 0, 0, _NOW_MS - 2_000_000, -1, 0),
    )
    return ClusterSnapshot(
        cluster="warmup",
        taken_at_ms=_NOW_MS,
        brokers=(Broker(1, "127.0.0.1", 9092),),
        broker_configs=(BrokerConfig(1),),
        partitions=(PartitionOffsets("warmup", 0, 1, 10, 5), PartitionOffsets("warmup", 1, 1, 3, 0)),
        producers=producers,
        transactional_ids_visible=True,
        reread_producers=producers,
        reread_partitions=frozenset({("warmup", 0), ("warmup", 1)}),
        listed_transactions=(
            ListedTransaction(1, "warmup-legit", 1, "Ongoing"),
            ListedTransaction(1, "warmup-gone", 2, "Empty"),
        ),
        transactions=(legit, gone),
        batch_timestamps=(BatchTimestamp("warmup", 1, 0, _NOW_MS - 2_000_000),),
        coordinators_listed=frozenset({1}),
    )
