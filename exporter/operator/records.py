"""One serialiser per record: each Kafka or pipeline record becomes one dict, and every
output is made from that dict — JSON documents, the Kafka-style tables (columns name the
dict's keys), the operator's sentences. A field is added in one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from exporter.model import (
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    BlockedGroupPartition,
    CollectionError,
    Finding,
    ListedTransaction,
    ProducerState,
    TransactionDescription,
    UnknownReason,
)
from exporter.operator.render import iso_ms, table

Record = dict[str, Any]
#: (table header, record key) pairs: a Kafka-style table drawn from records.
Columns = Sequence[tuple[str, str]]


def rows(columns: Columns, records: Sequence[Mapping[str, Any]]) -> str:
    """The table of ``records``: one column per (header, key)."""
    return table([h for h, _ in columns], [[r.get(k) for _, k in columns] for r in records])


# --- findings ------------------------------------------------------------------------------------

_REASONS = {
    "no_transactional_id": (
        "no coordinator lists this producer id, and it is older than its leader's "
        "transaction.max.timeout.ms plus the late padding"
    ),
    "transactional_id_not_found": "the coordinator does not know the transactional id{txn}",
    "producer_id_changed": "the transactional id{txn} now belongs to another producer id",
    "coordinator_not_open": "the coordinator{txn} has no open transaction (state {state})",
    "partition_not_in_transaction": "the coordinator's open transaction{txn} does not include this partition",
}
_UNKNOWN_REASONS = {
    UnknownReason.COORDINATOR_UNREADABLE.value: "its coordinator could not be read",
    UnknownReason.LISTING_INCOMPLETE.value: "not every coordinator answered ListTransactions",
    UnknownReason.OWNER_MAY_BE_INVISIBLE.value: (
        "no coordinator lists its producer id, but the exporter's principal may not Describe "
        "every transactional id, so its owner may be a live transaction it cannot see"
    ),
    UnknownReason.UNLISTED_WITHIN_TIMEOUT.value: (
        "no coordinator lists its producer id, but it is not known to be older than its "
        "leader's transaction.max.timeout.ms plus the late padding, so it may be a live "
        "transaction whose "
        "transactional id the principal may not see (a DENY rule or a custom authorizer)"
    ),
    UnknownReason.UNVERIFIED.value: "its partition could not be read again to verify it",
}


def reason_text(f: Finding) -> str:
    """Why ``f`` is hanging (or why it could not be classified), in words."""
    if f.unknown_reason is not None:
        return _UNKNOWN_REASONS.get(f.unknown_reason.value, f.unknown_reason.value)
    reason = f.hanging_reason.value if f.hanging_reason else "unknown"
    txn = f" (transactional id {f.transactional_id!r})" if f.transactional_id else ""
    return _REASONS.get(reason, reason).format(txn=txn, state=f.coordinator_state)


def finding_record(f: Finding, lso_lag: int | None = None) -> Record:
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
        "age_min": f.duration_ms // 60_000,
        "class": f.txn_class.value,
        "reason": f.hanging_reason.value if f.hanging_reason else None,
        "unknown_reason": f.unknown_reason.value if f.unknown_reason else None,
        "reason_text": reason_text(f),
        "transactional_id": f.transactional_id,
        "coordinator_id": f.coordinator_id if f.coordinator_id >= 0 else None,
        "coordinator_state": f.coordinator_state,
        "transaction_timeout_ms": f.transaction_timeout_ms if f.transaction_timeout_ms >= 0 else None,
        "late": f.late,
        "application": f.application,
        "lso_lag": lso_lag,
    }


def blocked_record(b: BlockedGroupPartition) -> Record:
    """A consumer group partition held at a transaction's LSO (the blast radius)."""
    return {
        "group": b.group,
        "topic": b.topic,
        "partition": b.partition,
        "committed_offset": b.committed_offset,
        "last_stable_offset": b.last_stable_offset,
        "high_watermark": b.high_watermark,
        "blocked_since_ms": b.blocked_since_ms,
        "blocked_ms": b.blocked_ms,
        "transactional_id": b.transactional_id,
        "producer_id": b.producer_id if b.producer_id >= 0 else None,
        "start_offset": b.start_offset if b.start_offset >= 0 else None,
        "class": b.txn_class.value if b.txn_class is not None else None,
        "age_ms": b.txn_duration_ms if b.txn_duration_ms >= 0 else None,
        "application": b.application,
    }


#: find-hanging's table: Kafka's find-hanging columns first, then ours.
FINDING_COLUMNS: Columns = (
    ("Topic", "topic"),
    ("Partition", "partition"),
    ("ProducerId", "producer_id"),
    ("ProducerEpoch", "producer_epoch"),
    ("CoordinatorEpoch", "coordinator_epoch"),
    ("StartOffset", "start_offset"),
    ("LastTimestamp", "last_timestamp_ms"),
    ("Age(min)", "age_min"),
    ("Leader", "broker_id"),
    ("TransactionalId", "transactional_id"),
    ("Reason", "reason"),
    ("StartTime", "start_time"),
    ("StartTimeSource", "start_time_source"),
    ("LsoLag", "lso_lag"),
)


# --- coordinator records ------------------------------------------------------------------------


def listed_record(t: ListedTransaction) -> Record:
    return {
        "transactional_id": t.transactional_id,
        "coordinator_id": t.coordinator_id,
        "producer_id": t.producer_id,
        "state": t.state,
    }


LIST_COLUMNS: Columns = (
    ("TransactionalId", "transactional_id"),
    ("Coordinator", "coordinator_id"),
    ("ProducerId", "producer_id"),
    ("TransactionState", "state"),
)


def transaction_record(d: TransactionDescription, now_ms: int) -> Record:
    started = d.start_time_ms >= 0
    partitions = sorted(d.partitions, key=lambda tp: (tp.topic, tp.partition))
    return {
        "coordinator_id": d.coordinator_id,
        "transactional_id": d.transactional_id,
        "producer_id": d.producer_id,
        "producer_epoch": d.producer_epoch,
        "state": d.state,
        "transaction_timeout_ms": d.timeout_ms,
        "two_phase_commit": d.timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS,
        "start_time_ms": d.start_time_ms if started else None,
        "start_time": iso_ms(d.start_time_ms),
        "duration_ms": now_ms - d.start_time_ms if started else None,
        "partitions": [f"{tp.topic}-{tp.partition}" for tp in partitions],
    }


def producer_record(p: ProducerState) -> Record:
    return {
        "producer_id": p.producer_id,
        "producer_epoch": p.producer_epoch,
        "coordinator_epoch": p.coordinator_epoch,
        "last_sequence": p.last_sequence,
        "last_timestamp_ms": p.last_timestamp_ms,
        "current_txn_start_offset": p.current_txn_start_offset if p.current_txn_start_offset >= 0 else None,
    }


PRODUCER_COLUMNS: Columns = (
    ("ProducerId", "producer_id"),
    ("ProducerEpoch", "producer_epoch"),
    ("LatestCoordinatorEpoch", "coordinator_epoch"),
    ("LastSequence", "last_sequence"),
    ("LastTimestamp", "last_timestamp_ms"),
    ("CurrentTransactionStartOffset", "current_txn_start_offset"),
)


def error_record(e: CollectionError) -> Record:
    return {
        "api": e.api,
        "error": e.error,
        "broker_id": e.broker_id,
        "topic": e.topic or None,
        "partition": e.partition if e.topic else None,
        "message": e.message or None,
    }


def error_of(record: Mapping[str, Any]) -> CollectionError:
    """The collection error an :func:`error_record` (an exporter's answer) was made from."""
    return CollectionError(
        api=record["api"],
        error=record["error"],
        broker_id=record["broker_id"],
        topic=record["topic"] or "",
        partition=record["partition"] if record["partition"] is not None else -1,
        message=record["message"] or "",
    )


def error_text(e: CollectionError) -> str:
    """A collection error in one line, naming the API, the broker and Kafka's error code."""
    where = f" on broker {e.broker_id}" if e.broker_id >= 0 else ""
    part = f" for {e.topic}-{e.partition}" if e.topic else ""
    message = f": {e.message}" if e.message else ""
    return f"{e.api} failed{where}{part}: {e.error}{message}"
