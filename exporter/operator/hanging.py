"""``find-hanging``: one collection cycle, classified by the pipeline (the one definition).

Unlike ``kafka-transactions.sh find-hanging`` the age of a transaction is measured from its
start (the batch timestamp at its start offset when no coordinator owns it), not from the
producer's LastTimestamp, and every finding says why it is hanging. The
``--max-transaction-timeout`` filter keeps Kafka's meaning: only transactions older than that
many minutes are reported. Because a transaction's start is never after its LastTimestamp,
this reports every transaction Kafka's tool reports, and also those a producer kept writing
to.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.collector import SnapshotCollector
from exporter.kafka.errors import KafkaRequestError
from exporter.model import ClusterSnapshot, CycleResult, Finding, TxnClass
from exporter.operator.connection import Target
from exporter.operator.render import (
    describe_error,
    emit,
    error_json,
    human_duration,
    iso_ms,
    note,
    table,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from exporter.config import SparkConfig

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_KAFKA = 3

#: The CLI reports everything it finds; the daemon's cap protects label sets, not a terminal.
_NO_CAP = 10_000_000

HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
           "StartOffset", "LastTimestamp", "Age(min)", "Leader", "TransactionalId", "Reason",
           "StartTime", "StartTimeSource", "LsoLag")


@contextmanager
def local_spark(spark_config: SparkConfig | None = None) -> Iterator[SparkSession]:
    """The engine for one command, the cheapest reachable one first: this process's session,
    a configured or local warm Spark Connect engine, else a fast-starting local session
    (see :func:`exporter.operator.engine.cli_engine`)."""
    from exporter.operator.engine import cli_engine

    with cli_engine(spark_config) as spark:
        yield spark


@dataclass(frozen=True)
class Classified:
    snapshot: ClusterSnapshot
    result: CycleResult
    now_ms: int

    def lso_lag(self, topic: str, partition: int) -> int | None:
        for p in self.result.partitions:
            if p.topic == topic and p.partition == partition:
                return p.lso_lag
        return None


def classify(target: Target, spark: SparkSession, *,
             partitions: Sequence[tuple[str, int]] | None) -> Classified:
    """One snapshot of ``partitions`` (all when None), classified with hanging confirmed at
    once: an operator looking now wants this cycle's answer."""
    from exporter.pipeline.compute import compute

    # The collector owns (and closes) its own clients.
    collector = SnapshotCollector(cluster=target.cluster.name, admin=target.admin())
    try:
        snapshot = collector.collect(partitions=partitions)
    finally:
        collector.close()
    now = int(time.time() * 1000)
    settings = replace(target.pipeline, hanging_confirm_cycles=1, max_findings=_NO_CAP)
    return Classified(snapshot, compute(spark, snapshot, settings, None, now), now)


def scope_partitions(admin: ClusterAdmin, *, broker_id: int | None, topic: str | None,
                     partition: int | None) -> list[tuple[str, int]] | None:
    """The partitions to search, like Kafka's tool: a partition, a topic, or every partition
    with a replica on a broker. None: the whole cluster."""
    if broker_id is None and topic is None:
        return None
    metadata = admin.metadata(None if topic is None else (lambda t: t == topic))
    if broker_id is not None:
        known = [b.broker_id for b in metadata.brokers]
        if broker_id not in known:
            raise KafkaRequestError("Metadata", "BROKER_NOT_AVAILABLE", broker_id=broker_id,
                                    message=f"not in the cluster (brokers: "
                                            f"{', '.join(map(str, known))})")
        return sorted(tp for tp, replicas in metadata.replicas.items() if broker_id in replicas)
    found = sorted(tp for tp in metadata.leaders if partition is None or tp[1] == partition)
    if not found:
        what = topic if partition is None else f"{topic}-{partition}"
        raise KafkaRequestError("Metadata", "UNKNOWN_TOPIC_OR_PARTITION",
                                message=f"{what} does not exist")
    return found


def finding_json(f: Finding, lso_lag: int | None) -> dict[str, Any]:
    return {
        "topic": f.topic,
        "partition": f.partition,
        "broker_id": f.broker_id,
        "producer_id": f.producer_id,
        "producer_epoch": f.producer_epoch,
        "coordinator_epoch": f.coordinator_epoch,
        "start_offset": f.start_offset,
        "last_timestamp_ms": f.last_timestamp_ms,
        "start_time_ms": f.start_time_ms,
        "start_time": iso_ms(f.start_time_ms),
        "start_time_source": f.start_time_source.value,
        "age_ms": f.duration_ms,
        "class": f.txn_class.value,
        "reason": f.hanging_reason.value if f.hanging_reason else None,
        "transactional_id": f.transactional_id,
        "coordinator_id": f.coordinator_id if f.coordinator_id >= 0 else None,
        "coordinator_state": f.coordinator_state,
        "lso_lag": lso_lag,
    }


def find_hanging(admin: ClusterAdmin, spark: SparkSession, target: Target,
                 args: argparse.Namespace) -> int:
    max_ms = args.max_transaction_timeout * 60_000
    partitions = scope_partitions(admin, broker_id=args.broker_id, topic=args.topic,
                                  partition=args.partition)
    if partitions == []:
        note(f"find-hanging: broker {args.broker_id} holds no partition replicas")
    classified = classify(target, spark, partitions=partitions)
    findings = classified.result.findings
    # Kafka's tool compares with ">" too (now - LastTimestamp > max timeout).
    hanging = [f for f in findings if f.txn_class is TxnClass.HANGING and f.duration_ms > max_ms]
    unknown = [f for f in findings if f.txn_class is TxnClass.UNKNOWN]
    errors = classified.snapshot.errors
    doc = {
        "max_transaction_timeout_minutes": args.max_transaction_timeout,
        "hanging": [finding_json(f, classified.lso_lag(f.topic, f.partition)) for f in hanging],
        "unclassified": [finding_json(f, classified.lso_lag(f.topic, f.partition))
                         for f in unknown],
        "errors": [error_json(e) for e in errors],
    }
    emit(args.output, doc, table(HEADERS, [
        (f.topic, f.partition, f.producer_id, f.producer_epoch, f.coordinator_epoch,
         f.start_offset, f.last_timestamp_ms, f.duration_ms // 60_000, f.broker_id,
         f.transactional_id, f.hanging_reason.value if f.hanging_reason else None,
         iso_ms(f.start_time_ms), f.start_time_source.value,
         classified.lso_lag(f.topic, f.partition))
        for f in hanging]))
    younger = sum(1 for f in findings if f.txn_class is TxnClass.HANGING and f.duration_ms <= max_ms)
    if younger:
        note(f"find-hanging: {younger} more hanging transaction(s) younger than "
             f"--max-transaction-timeout {args.max_transaction_timeout} (minutes) not shown")
    for f in unknown:
        note(f"find-hanging: cannot tell whether the open transaction of producer id "
             f"{f.producer_id} on {f.topic}-{f.partition} (start offset {f.start_offset}, "
             f"age {human_duration(f.duration_ms)}) is hanging: its coordinator could not be read")
    for e in errors:
        note(f"find-hanging: {describe_error(e)}")
    if args.output == "table":
        for f in hanging:
            note(f"find-hanging: {f.topic}-{f.partition} start offset {f.start_offset}: "
                 f"{reason_text(f)}; abort it with: kafka-txn-exporter abort --topic {f.topic} "
                 f"--partition {f.partition} --start-offset {f.start_offset} ...")
    if hanging:
        return EXIT_FINDINGS
    return EXIT_KAFKA if errors or unknown else EXIT_OK


def reason_text(f: Finding) -> str:
    """Why ``f`` is hanging, in words."""
    reason = f.hanging_reason.value if f.hanging_reason else "unknown"
    txn = f" (transactional id {f.transactional_id!r})" if f.transactional_id else ""
    return {
        "no_transactional_id": "no coordinator lists this producer id",
        "transactional_id_not_found": f"the coordinator does not know the transactional id{txn}",
        "producer_id_changed": f"the transactional id{txn} now belongs to another producer id",
        "coordinator_not_open": f"the coordinator{txn} has no open transaction "
                                f"(state {f.coordinator_state})",
        "partition_not_in_transaction": f"the coordinator's open transaction{txn} does not "
                                        "include this partition",
    }.get(reason, reason)

