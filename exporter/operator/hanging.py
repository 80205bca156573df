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

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from exporter.exitcodes import ExitCode
from exporter.groups_config import GroupsConfig
from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.collector import SnapshotCollector
from exporter.kafka.errors import KafkaRequestError
from exporter.model import ClusterSnapshot, CycleResult, Finding, TxnClass, UnknownReason
from exporter.operator.connection import Target
from exporter.operator.records import (
    FINDING_COLUMNS,
    Record,
    error_record,
    error_text,
    finding_record,
    reason_text,
    rows,
)
from exporter.operator.render import emit, human_duration, note
from exporter.operator.requests import FindHangingRequest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from exporter.config import SparkConfig

log = logging.getLogger(__name__)

#: The ACL that lets the exporter's principal see every transaction's owner.
INVISIBLE_OWNER_ACL_HINT = (
    "the exporter's principal may lack Describe on some transactional ids; grant it with: "
    "kafka-acls.sh --add --allow-principal User:<exporter> --operation Describe "
    "--transactional-id '*' (or the owning application's prefix with "
    "--resource-pattern-type prefixed)"
)

#: The CLI reports everything it finds; the daemon's cap protects label sets, not a terminal.
_NO_CAP = 10_000_000


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

    def record(self, f: Finding) -> Record:
        return finding_record(f, self.lso_lag(f.topic, f.partition))


def classify(
    target: Target,
    spark: SparkSession,
    *,
    partitions: Sequence[tuple[str, int]] | None,
    groups: GroupsConfig | None = None,
) -> Classified:
    """One snapshot of ``partitions`` (all when None), classified with hanging confirmed at
    once: an operator looking now wants this cycle's answer. Only the findings and the
    partitions (their LSO lag) are computed: the same classification as the daemon's, without
    the metric tables a command does not show; with ``groups``, the consumer-group family too
    (its blocked consumers), on the target's attribution rules."""
    from exporter.pipeline.compute import FINDINGS_OUTPUTS, compute

    # The collector owns (and closes) its own clients.
    collector = SnapshotCollector(cluster=target.cluster.name, admin=target.admin(), groups=groups)
    try:
        snapshot = collector.collect(partitions=partitions)
    finally:
        collector.close()
    now = int(time.time() * 1000)
    settings = replace(target.pipeline, hanging_confirm_cycles=1, max_findings=_NO_CAP)
    outputs = FINDINGS_OUTPUTS | {"groups"} if groups is not None else FINDINGS_OUTPUTS
    result = compute(
        spark, snapshot, settings, None, now, groups=groups, rules=target.attribution, outputs=outputs
    )
    return Classified(snapshot, result, now)


def scope_partitions(
    admin: ClusterAdmin, *, broker_id: int | None, topic: str | None, partition: int | None
) -> list[tuple[str, int]] | None:
    """The partitions to search, like Kafka's tool: a partition, a topic, or every partition
    with a replica on a broker. None: the whole cluster."""
    if broker_id is None and topic is None:
        return None
    metadata = admin.metadata(None if topic is None else (lambda t: t == topic))
    if broker_id is not None:
        known = [b.broker_id for b in metadata.brokers]
        if broker_id not in known:
            raise KafkaRequestError(
                "Metadata",
                "BROKER_NOT_AVAILABLE",
                broker_id=broker_id,
                message=f"not in the cluster (brokers: {', '.join(map(str, known))})",
            )
        return sorted(tp for tp, replicas in metadata.replicas.items() if broker_id in replicas)
    found = sorted(tp for tp in metadata.leaders if partition is None or tp[1] == partition)
    if not found:
        what = topic if partition is None else f"{topic}-{partition}"
        raise KafkaRequestError("Metadata", "UNKNOWN_TOPIC_OR_PARTITION", message=f"{what} does not exist")
    return found


def find_hanging(
    admin: ClusterAdmin, spark: SparkSession, target: Target, request: FindHangingRequest
) -> int:
    max_ms = request.max_transaction_timeout_min * 60_000
    partitions = scope_partitions(
        admin, broker_id=request.broker_id, topic=request.topic, partition=request.partition
    )
    if partitions == []:
        note(f"find-hanging: broker {request.broker_id} holds no partition replicas")
    classified = classify(target, spark, partitions=partitions)
    findings = classified.result.findings
    # Kafka's tool compares with ">" too (now - LastTimestamp > max timeout).
    hanging = [f for f in findings if f.txn_class is TxnClass.HANGING and f.duration_ms > max_ms]
    unknown = [f for f in findings if f.txn_class is TxnClass.UNKNOWN]
    errors = classified.snapshot.errors
    hanging_records = [classified.record(f) for f in hanging]
    doc = {
        "max_transaction_timeout_minutes": request.max_transaction_timeout_min,
        "hanging": hanging_records,
        "unclassified": [classified.record(f) for f in unknown],
        "errors": [error_record(e) for e in errors],
    }
    emit(request.output, doc, rows(FINDING_COLUMNS, hanging_records))
    younger = sum(1 for f in findings if f.txn_class is TxnClass.HANGING and f.duration_ms <= max_ms)
    if younger:
        note(
            f"find-hanging: {younger} more hanging transaction(s) younger than "
            f"--max-transaction-timeout {request.max_transaction_timeout_min} (minutes) not shown"
        )
    for f in unknown:
        note(
            f"find-hanging: cannot tell whether the open transaction of producer id "
            f"{f.producer_id} on {f.topic}-{f.partition} (start offset {f.start_offset}, "
            f"age {human_duration(f.duration_ms)}) is hanging: {reason_text(f)}"
            + (
                f"; {INVISIBLE_OWNER_ACL_HINT}"
                if f.unknown_reason is UnknownReason.OWNER_MAY_BE_INVISIBLE
                else ""
            )
        )
    for e in errors:
        note(f"find-hanging: {error_text(e)}")
    if request.output == "table":
        for record in hanging_records:
            note(
                f"find-hanging: {record['topic']}-{record['partition']} start offset "
                f"{record['start_offset']}: {record['reason_text']}; abort it with: "
                f"kafka-txn-exporter abort --topic {record['topic']} --partition "
                f"{record['partition']} --start-offset {record['start_offset']} ..."
            )
    if hanging:
        return ExitCode.FINDINGS
    return ExitCode.KAFKA if errors or unknown else ExitCode.OK
