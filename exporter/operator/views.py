"""The read-only commands: ``list``, ``describe`` and ``describe-producers``.

Each sends the same Kafka requests as ``kafka-transactions.sh`` (ListTransactions to every
broker, DescribeTransactions to the id's coordinator, DescribeProducers to the leader or a
named replica) through :class:`~exporter.kafka.admin.ClusterAdmin`, and prints Kafka's
columns first.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.errors import KafkaRequestError
from exporter.model import (
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    CollectionError,
    ProducerState,
    TransactionDescription,
)
from exporter.operator.render import (
    describe_error,
    emit,
    error_json,
    human_duration,
    iso_ms,
    note,
    table,
)

EXIT_OK = 0
EXIT_KAFKA = 3

#: Errors kafka-python reports when a broker lacks the request version a filter needs.
VERSION_ERRORS = frozenset({"UNSUPPORTED_VERSION", "IncompatibleBrokerVersion"})

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                    "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                    "TransactionDurationMs", "TopicPartitions")
PRODUCER_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                    "LastTimestamp", "CurrentTransactionStartOffset")


def now_ms() -> int:
    return int(time.time() * 1000)


# --- list ------------------------------------------------------------------------------------


def list_transactions(admin: ClusterAdmin, args: argparse.Namespace) -> int:
    duration: int | None = args.duration_filter
    if duration is not None and duration < 0:
        duration = None  # Kafka: "if < 0, all transactions will be returned"
    pattern: str | None = args.transactional_id_pattern or None  # Kafka sends no empty pattern
    brokers = [b.broker_id for b in admin.metadata(lambda _t: False).brokers]
    listed = admin.list_transactions(brokers, states=args.state or (),
                                     producer_ids=args.producer_id or (),
                                     min_duration_ms=duration, transactional_id_pattern=pattern)
    version_problems = [e for e in listed.errors if e.error in VERSION_ERRORS]
    if version_problems and (duration is not None or pattern is not None):
        for e in version_problems:
            note(f"list: broker {e.broker_id} does not support {_version_need(duration, pattern)} "
                 f"(ListTransactions failed: {e.error})")
        return EXIT_KAFKA
    rows = sorted(listed.rows, key=lambda t: (t.coordinator_id, t.transactional_id))
    document = {
        "transactions": [{"transactional_id": t.transactional_id, "coordinator_id": t.coordinator_id,
                          "producer_id": t.producer_id, "state": t.state} for t in rows],
        "errors": [error_json(e) for e in listed.errors],
    }
    emit(args.output, document, table(LIST_HEADERS, [
        (t.transactional_id, t.coordinator_id, t.producer_id, t.state) for t in rows]))
    return _report_errors("list", listed.errors)


def _version_need(duration: int | None, pattern: str | None) -> str:
    needs = []
    if pattern is not None:
        needs.append("--transactional-id-pattern (ListTransactions v2, Kafka 4.1 or newer)")
    if duration is not None:
        needs.append("--duration-filter (ListTransactions v1, Kafka 3.8 or newer)")
    return " and ".join(needs)


def _report_errors(command: str, errors: tuple[CollectionError, ...] | list[CollectionError]) -> int:
    for e in errors:
        note(f"{command}: {describe_error(e)}")
    return EXIT_KAFKA if errors else EXIT_OK


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
            raise KafkaRequestError("DescribeTransactions", d.error, broker_id=d.coordinator_id,
                                    message=f"transactional id {transactional_id!r}")
        return d
    raise KafkaRequestError("DescribeTransactions", "UNKNOWN_SERVER_ERROR", broker_id=coordinator,
                            message=f"no answer for transactional id {transactional_id!r}")


def transaction_json(d: TransactionDescription, now: int) -> dict[str, Any]:
    return {
        "coordinator_id": d.coordinator_id,
        "transactional_id": d.transactional_id,
        "producer_id": d.producer_id,
        "producer_epoch": d.producer_epoch,
        "state": d.state,
        "transaction_timeout_ms": d.timeout_ms,
        "two_phase_commit": d.timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS,
        "start_time_ms": d.start_time_ms if d.start_time_ms >= 0 else None,
        "start_time": iso_ms(d.start_time_ms),
        "duration_ms": now - d.start_time_ms if d.start_time_ms >= 0 else None,
        "partitions": [f"{tp.topic}-{tp.partition}" for tp in _sorted_partitions(d)],
    }


def _sorted_partitions(d: TransactionDescription) -> list[Any]:
    return sorted(d.partitions, key=lambda tp: (tp.topic, tp.partition))


def describe(admin: ClusterAdmin, args: argparse.Namespace) -> int:
    d = describe_transaction(admin, args.transactional_id)
    now = now_ms()
    doc = transaction_json(d, now)
    started = d.start_time_ms >= 0
    row = (d.coordinator_id, d.transactional_id, d.producer_id, d.producer_epoch, d.state,
           d.timeout_ms, d.start_time_ms if started else None,
           now - d.start_time_ms if started else None,
           ",".join(doc["partitions"]),
           iso_ms(d.start_time_ms), human_duration(now - d.start_time_ms) if started else None)
    emit(args.output, doc, table((*DESCRIBE_HEADERS, "StartTime", "Age"), [row]))
    if doc["two_phase_commit"] and args.output == "table":
        note("describe: a two-phase-commit (KIP-939) transaction: the coordinator never times "
             "it out; its external transaction manager must commit or abort it")
    return EXIT_OK


# --- describe-producers ----------------------------------------------------------------------


def partition_leader(admin: ClusterAdmin, topic: str, partition: int) -> int:
    """The partition's leader. Raises KafkaRequestError when unknown or leaderless."""
    leaders = admin.metadata(lambda t: t == topic).leaders
    if (topic, partition) not in leaders:
        raise KafkaRequestError("Metadata", "UNKNOWN_TOPIC_OR_PARTITION",
                                message=f"{topic}-{partition} does not exist")
    leader = leaders[(topic, partition)]
    if leader < 0:
        raise KafkaRequestError("Metadata", "LEADER_NOT_AVAILABLE",
                                message=f"{topic}-{partition} has no leader")
    return leader


def producers_of(admin: ClusterAdmin, topic: str, partition: int, broker_id: int
                 ) -> list[ProducerState]:
    """DescribeProducers for one partition on one broker. Raises KafkaRequestError."""
    result = admin.describe_producers({broker_id: [(topic, partition)]})
    for e in result.errors:
        raise KafkaRequestError(e.api, e.error, broker_id=e.broker_id,
                                message=f"partition {topic}-{partition}"
                                        + (f": {e.message}" if e.message else ""))
    return sorted(result.rows, key=lambda p: p.producer_id)


def producer_json(p: ProducerState) -> dict[str, Any]:
    return {
        "producer_id": p.producer_id,
        "producer_epoch": p.producer_epoch,
        "coordinator_epoch": p.coordinator_epoch,
        "last_sequence": p.last_sequence,
        "last_timestamp_ms": p.last_timestamp_ms,
        "current_txn_start_offset": p.current_txn_start_offset if p.current_txn_start_offset >= 0
        else None,
    }


def describe_producers(admin: ClusterAdmin, args: argparse.Namespace) -> int:
    broker = args.broker_id
    if broker is None:
        broker = partition_leader(admin, args.topic, args.partition)
    producers = producers_of(admin, args.topic, args.partition, broker)
    doc = {"topic": args.topic, "partition": args.partition, "broker_id": broker,
           "producers": [producer_json(p) for p in producers]}
    emit(args.output, doc, table(PRODUCER_HEADERS, [
        (p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence,
         p.last_timestamp_ms,
         p.current_txn_start_offset if p.current_txn_start_offset >= 0 else None)
        for p in producers]))
    return EXIT_OK
