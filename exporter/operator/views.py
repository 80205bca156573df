"""The read-only commands: ``list``, ``describe`` and ``describe-producers``.

Each sends the same Kafka requests as ``kafka-transactions.sh`` (ListTransactions to every
broker, DescribeTransactions to the id's coordinator, DescribeProducers to the leader or a
named replica) through :class:`~exporter.kafka.admin.ClusterAdmin`, and prints Kafka's
columns first.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from exporter.exitcodes import ExitCode
from exporter.kafka.errors import KafkaRequestError
from exporter.model import CollectionError, ProducerState, TransactionDescription
from exporter.operator.exporter_api import Answer
from exporter.operator.records import (
    LIST_COLUMNS,
    PRODUCER_COLUMNS,
    error_of,
    error_record,
    error_text,
    listed_record,
    producer_record,
    rows,
    transaction_record,
)
from exporter.operator.render import emit, human_duration, iso_ms, note, table
from exporter.operator.requests import DescribeProducersRequest, DescribeRequest, ListRequest

if TYPE_CHECKING:
    from exporter.kafka.admin import ClusterAdmin

#: Errors kafka-python reports when a broker lacks the request version a filter needs.
VERSION_ERRORS = frozenset({"UNSUPPORTED_VERSION", "IncompatibleBrokerVersion"})

DESCRIBE_HEADERS = (
    "CoordinatorId",
    "TransactionalId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionState",
    "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "TopicPartitions",
)


def now_ms() -> int:
    return int(time.time() * 1000)


# --- list ------------------------------------------------------------------------------------


def list_transactions(admin: ClusterAdmin, request: ListRequest) -> int:
    duration = request.duration_filter
    if duration is not None and duration < 0:
        duration = None  # Kafka: "if < 0, all transactions will be returned"
    pattern = request.transactional_id_pattern or None  # Kafka sends no empty pattern
    brokers = [b.broker_id for b in admin.metadata(lambda _t: False).brokers]
    listed = admin.list_transactions(
        brokers,
        states=request.states,
        producer_ids=request.producer_ids,
        min_duration_ms=duration,
        transactional_id_pattern=pattern,
    )
    version_problems = [e for e in listed.errors if e.error in VERSION_ERRORS]
    if version_problems and (duration is not None or pattern is not None):
        for e in version_problems:
            note(
                f"list: broker {e.broker_id} does not support {_version_need(duration, pattern)} "
                f"(ListTransactions failed: {e.error})"
            )
        return ExitCode.KAFKA
    records = [
        listed_record(t) for t in sorted(listed.rows, key=lambda t: (t.coordinator_id, t.transactional_id))
    ]
    document = {
        "transactions": records,
        "errors": [error_record(e) for e in listed.errors],
        "source": {"exporter": None, "computed_at": iso_ms(now_ms()), "age_s": 0.0},
    }
    emit(request.output, document, rows(LIST_COLUMNS, records))
    return report_errors("list", listed.errors)


def list_answer(answer: Answer, request: ListRequest) -> int:
    """The coordinators' listing of the exporter's last cycle, with the state and producer id
    filters applied here (``--duration-filter`` and ``--transactional-id-pattern`` are
    answered fresh: the brokers apply them)."""
    records = [
        r
        for r in answer.cluster["transactions"]
        if (not request.states or r["state"] in request.states)
        and (not request.producer_ids or r["producer_id"] in request.producer_ids)
    ]
    errors = [e for e in answer.cycle["errors"] or [] if e["api"] == "ListTransactions"]
    note(f"list: {answer.describe()}")
    document = {"transactions": records, "errors": errors, "source": answer.source()}
    emit(request.output, document, rows(LIST_COLUMNS, records))
    return report_errors("list", [error_of(e) for e in errors])


def _version_need(duration: int | None, pattern: str | None) -> str:
    needs = []
    if pattern is not None:
        needs.append("--transactional-id-pattern (ListTransactions v2, Kafka 4.1 or newer)")
    if duration is not None:
        needs.append("--duration-filter (ListTransactions v1, Kafka 3.8 or newer)")
    return " and ".join(needs)


def report_errors(command: str, errors: Sequence[CollectionError]) -> int:
    for e in errors:
        note(f"{command}: {error_text(e)}")
    return ExitCode.KAFKA if errors else ExitCode.OK


# --- describe --------------------------------------------------------------------------------


def describe_transaction(admin: ClusterAdmin, transactional_id: str) -> TransactionDescription:
    """DescribeTransactions at the id's coordinator. Raises KafkaRequestError, including
    TRANSACTIONAL_ID_NOT_FOUND."""
    coordinator = admin.find_transaction_coordinators([transactional_id])[transactional_id]
    described = admin.describe_transactions({coordinator: [transactional_id]})
    for e in described.errors:
        raise KafkaRequestError(e.api, e.error, broker_id=e.broker_id, message=e.message)
    for d in described.rows:
        if d.error is not None:
            raise KafkaRequestError(
                "DescribeTransactions",
                d.error,
                broker_id=d.coordinator_id,
                message=f"transactional id {transactional_id!r}",
            )
        return d
    raise KafkaRequestError(
        "DescribeTransactions",
        "UNKNOWN_SERVER_ERROR",
        broker_id=coordinator,
        message=f"no answer for transactional id {transactional_id!r}",
    )


def describe(admin: ClusterAdmin, request: DescribeRequest) -> int:
    d = describe_transaction(admin, request.transactional_id)
    now = now_ms()
    doc = transaction_record(d, now)
    duration = doc["duration_ms"]
    row = (
        doc["coordinator_id"],
        doc["transactional_id"],
        doc["producer_id"],
        doc["producer_epoch"],
        doc["state"],
        doc["transaction_timeout_ms"],
        doc["start_time_ms"],
        duration,
        ",".join(doc["partitions"]),
        doc["start_time"],
        human_duration(duration) if duration is not None else None,
    )
    emit(request.output, doc, table((*DESCRIBE_HEADERS, "StartTime", "Age"), [row]))
    if doc["two_phase_commit"] and request.output == "table":
        note(
            "describe: a two-phase-commit (KIP-939) transaction: the coordinator never times "
            "it out; its external transaction manager must commit or abort it"
        )
    return ExitCode.OK


# --- describe-producers ----------------------------------------------------------------------


def partition_leader(admin: ClusterAdmin, topic: str, partition: int) -> int:
    """The partition's leader. Raises KafkaRequestError when unknown or leaderless."""
    leaders = admin.metadata(lambda t: t == topic).leaders
    if (topic, partition) not in leaders:
        raise KafkaRequestError(
            "Metadata", "UNKNOWN_TOPIC_OR_PARTITION", message=f"{topic}-{partition} does not exist"
        )
    leader = leaders[(topic, partition)]
    if leader < 0:
        raise KafkaRequestError(
            "Metadata", "LEADER_NOT_AVAILABLE", message=f"{topic}-{partition} has no leader"
        )
    return leader


def producers_of(admin: ClusterAdmin, topic: str, partition: int, broker_id: int) -> list[ProducerState]:
    """DescribeProducers for one partition on one broker. Raises KafkaRequestError."""
    result = admin.describe_producers({broker_id: [(topic, partition)]})
    for e in result.errors:
        raise KafkaRequestError(
            e.api,
            e.error,
            broker_id=e.broker_id,
            message=f"partition {topic}-{partition}" + (f": {e.message}" if e.message else ""),
        )
    return sorted(result.rows, key=lambda p: p.producer_id)


def describe_producers(admin: ClusterAdmin, request: DescribeProducersRequest) -> int:
    broker = request.broker_id
    if broker is None:
        broker = partition_leader(admin, request.topic, request.partition)
    records = [producer_record(p) for p in producers_of(admin, request.topic, request.partition, broker)]
    doc = {"topic": request.topic, "partition": request.partition, "broker_id": broker, "producers": records}
    emit(request.output, doc, rows(PRODUCER_COLUMNS, records))
    return ExitCode.OK
