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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from exporter import progress
from exporter.config.groups import GroupsConfig
from exporter.exitcodes import ExitCode
from exporter.kafka.errors import KafkaRequestError
from exporter.model import ClusterSnapshot, CycleResult, Finding, TxnClass, UnknownReason
from exporter.operator.connection import Target
from exporter.operator.exporter_api import Answer
from exporter.operator.records import (
    FINDING_COLUMNS,
    Record,
    error_of,
    error_record,
    error_text,
    finding_record,
    rows,
)
from exporter.operator.render import emit, human_duration, iso_ms, note
from exporter.operator.requests import FindHangingRequest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from exporter.config import SparkConfig
    from exporter.kafka.admin import ClusterAdmin

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
    from exporter.kafka.collector import SnapshotCollector
    from exporter.pipeline.compute import FINDINGS_OUTPUTS, compute
    from exporter.pipeline.families.groups import FAMILY as GROUPS

    progress.stage("collecting from Kafka")
    # The collector owns (and closes) its own clients.
    collector = SnapshotCollector(cluster=target.cluster.name, admin=target.admin(), groups=groups)
    try:
        snapshot = collector.collect(partitions=partitions)
    finally:
        collector.close()
    wait_ready = getattr(spark, "wait_ready", None)  # an engine still starting (engine.py)
    if wait_ready is not None:
        progress.stage("starting Spark")
        wait_ready()
    progress.stage("classifying")
    now = int(time.time() * 1000)
    settings = replace(target.pipeline, hanging_confirm_cycles=1, max_findings=_NO_CAP)
    # With groups: every output of the group family (the blocked partitions among them).
    outputs = FINDINGS_OUTPUTS | GROUPS.output_names if groups is not None else FINDINGS_OUTPUTS
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
    """Collect and classify now (``--fresh``, or no exporter answered)."""
    partitions = scope_partitions(
        admin, broker_id=request.broker_id, topic=request.topic, partition=request.partition
    )
    if partitions == []:
        note(f"find-hanging: broker {request.broker_id} holds no partition replicas")
    classified = classify(target, spark, partitions=partitions)
    records = [classified.record(f) for f in classified.result.findings]
    errors = [error_record(e) for e in classified.snapshot.errors]
    source = {"exporter": None, "computed_at": iso_ms(classified.now_ms), "age_s": 0.0}
    return report(request, records, errors, source)


def find_hanging_answer(answer: Answer, request: FindHangingRequest) -> int:
    """The exporter's last cycle, scoped as Kafka's tool scopes (``--topic``, ``--partition``;
    ``--broker-id`` is answered fresh: the exporter knows leaders, not replicas)."""
    records = [
        r
        for r in answer.cluster["findings"]
        if (request.topic is None or r["topic"] == request.topic)
        and (request.partition is None or r["partition"] == request.partition)
    ]
    note(f"find-hanging: {answer.describe()}")
    suspected = sum(1 for r in records if r["class"] == TxnClass.SUSPECTED_HANGING.value)
    if suspected:
        note(
            f"find-hanging: {suspected} more open transaction(s) looked hanging in that cycle only: "
            "the exporter confirms them at its next cycle (--fresh confirms at once)"
        )
    return report(request, records, list(answer.cycle["errors"] or []), answer.source())


def report(
    request: FindHangingRequest,
    records: Sequence[Record],
    errors: Sequence[Record],
    source: Mapping[str, Any],
) -> int:
    """Print what ``find-hanging`` found (``records``: every finding of the cycle, as
    :func:`~exporter.operator.records.finding_record` makes them) and return the exit code."""
    max_ms = request.max_transaction_timeout_min * 60_000
    # Kafka's tool compares with ">" too (now - LastTimestamp > max timeout).
    hanging = [r for r in records if r["class"] == TxnClass.HANGING.value and r["age_ms"] > max_ms]
    unknown = [r for r in records if r["class"] == TxnClass.UNKNOWN.value]
    doc = {
        "max_transaction_timeout_minutes": request.max_transaction_timeout_min,
        "hanging": hanging,
        "unclassified": unknown,
        "errors": list(errors),
        "source": dict(source),
    }
    emit(request.output, doc, rows(FINDING_COLUMNS, hanging))
    younger = sum(1 for r in records if r["class"] == TxnClass.HANGING.value and r["age_ms"] <= max_ms)
    if younger:
        note(
            f"find-hanging: {younger} more hanging transaction(s) younger than "
            f"--max-transaction-timeout {request.max_transaction_timeout_min} (minutes) not shown"
        )
    for r in unknown:
        note(
            f"find-hanging: cannot tell whether the open transaction of producer id "
            f"{r['producer_id']} on {r['topic']}-{r['partition']} (start offset {r['start_offset']}, "
            f"age {human_duration(r['age_ms'])}) is hanging: {r['reason_text']}"
            + (
                f"; {INVISIBLE_OWNER_ACL_HINT}"
                if r["unknown_reason"] == UnknownReason.OWNER_MAY_BE_INVISIBLE.value
                else ""
            )
        )
    for e in errors:
        note(f"find-hanging: {error_text(error_of(e))}")
    if request.output == "table":
        for record in hanging:
            note(
                f"find-hanging: {record['topic']}-{record['partition']} start offset "
                f"{record['start_offset']}: {record['reason_text']}; abort it with: "
                f"kafka-txn-exporter abort --topic {record['topic']} --partition "
                f"{record['partition']} --start-offset {record['start_offset']} ..."
            )
    if hanging:
        return ExitCode.FINDINGS
    return ExitCode.KAFKA if errors or unknown else ExitCode.OK
