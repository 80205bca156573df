"""The datasets of the history: one Parquet dataset per kind of fact, partitioned by
``cluster`` and ``date`` (UTC, ``YYYY-MM-DD``) under ``history.path``.

Each dataset's row is a record declared once here: its fields, in order, are the dataset's
columns, each with its type, unit and meaning (``exporter.columns`` derives the Arrow and
Spark schemas from them). Every row starts with the partition columns (:class:`Partitioned`)
and then the row's time (epoch ms), from which ``date`` is derived. ``docs/history.md``
shows the same tables (a unit test keeps them in step). Times are epoch milliseconds (UTC) as
Kafka reports them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from exporter.columns import Column, Int32, arrow_schema_of, columns_of, described, spark_schema_of

#: Partition columns of every dataset, in directory order.
PARTITION_COLUMNS = ("cluster", "date")


@dataclass(frozen=True, slots=True)
class Partitioned:
    """The partition columns every row starts with; the row's time column comes next."""

    cluster: str = field(metadata=described("-", "cluster name (`clusters[].name`); partition column"))
    date: str = field(metadata=described("YYYY-MM-DD (UTC)", "UTC date of `{time}`; partition column"))


_CYCLE_MS = "when the cycle's pipeline ran (CycleResult.computed_at_ms)"


@dataclass(frozen=True, slots=True)
class CycleRow(Partitioned):
    """A row of ``cycles``."""

    cycle_ms: int = field(metadata=described("epoch ms", _CYCLE_MS))
    snapshot_ms: int = field(metadata=described("epoch ms", "when the snapshot was taken"))
    outcome: str = field(metadata=described("-", "`complete` (every read succeeded) or `partial`"))
    errors: Int32 = field(metadata=described("count", "parts of the cycle that were lost (rows in `errors`)"))
    partitions: Int32 = field(metadata=described("count", "partitions read"))
    lagging_partitions: Int32 = field(metadata=described("count", "partitions with LSO lag > 0"))
    max_lso_lag: int = field(metadata=described("messages", "highest LSO lag of the cycle (0 when none)"))
    open_ongoing: Int32 = field(
        metadata=described("count", "open partition-level transactions classed ongoing")
    )
    open_late: Int32 = field(metadata=described("count", "... classed late"))
    open_suspected_hanging: Int32 = field(metadata=described("count", "... classed suspected_hanging"))
    open_hanging: Int32 = field(metadata=described("count", "... classed hanging"))
    open_two_phase_commit: Int32 = field(metadata=described("count", "... classed two_phase_commit"))
    open_unknown: Int32 = field(metadata=described("count", "... classed unknown"))


@dataclass(frozen=True, slots=True)
class ErrorRow(Partitioned):
    """A row of ``errors``."""

    cycle_ms: int = field(metadata=described("epoch ms", _CYCLE_MS))
    api: str = field(metadata=described("-", "Kafka API, e.g. DescribeProducers, ListOffsets"))
    error: str = field(metadata=described("-", "Kafka error name or client-side kind (TIMEOUT)"))
    broker_id: Int32 = field(metadata=described("broker id", "broker asked, -1 when none"))
    topic: str = field(metadata=described("-", "topic, empty when not partition-level"))
    partition: Int32 = field(metadata=described("-", "partition, -1 when not partition-level"))
    message: str = field(metadata=described("-", "the error's message"))


@dataclass(frozen=True, slots=True)
class TransactionRow(Partitioned):
    """A row of ``transactions``."""

    cycle_ms: int = field(metadata=described("epoch ms", _CYCLE_MS))
    topic: str = field(metadata=described("-", "topic"))
    partition: Int32 = field(metadata=described("-", "partition"))
    broker_id: Int32 = field(
        metadata=described("broker id", "partition leader that answered DescribeProducers")
    )
    producer_id: int = field(metadata=described("-", "producer id"))
    producer_epoch: Int32 = field(metadata=described("-", "producer epoch"))
    coordinator_epoch: Int32 = field(metadata=described("-", "coordinator epoch (DescribeProducers)"))
    start_offset: int = field(
        metadata=described("offset", "CurrentTxnStartOffset: first offset of the transaction")
    )
    transactional_id: str | None = field(metadata=described("-", "transactional id, null when none is known"))
    application: str | None = field(
        metadata=described("-", "application (attribution rules), null when unknown")
    )
    txn_class: str = field(
        metadata=described("-", "late, suspected_hanging, hanging, two_phase_commit or unknown")
    )
    late: bool = field(metadata=described("-", "older than transaction.max.timeout.ms + padding"))
    reason: str | None = field(metadata=described("-", "hanging reason or unknown reason, null otherwise"))
    start_time_ms: int = field(metadata=described("epoch ms", "start of the transaction, -1 unknown"))
    start_time_source: str = field(metadata=described("-", "coordinator, batch_timestamp or last_timestamp"))
    duration_ms: int = field(metadata=described("ms", "age at `cycle_ms`"))
    coordinator_id: Int32 = field(
        metadata=described("broker id", "coordinator of the transactional id, -1 none")
    )
    coordinator_state: str | None = field(
        metadata=described("-", "coordinator state (Ongoing, Empty, ...), null when not described")
    )
    transaction_timeout_ms: int = field(metadata=described("ms", "the transaction's timeout, -1 unknown"))
    last_timestamp_ms: int = field(metadata=described("epoch ms", "DescribeProducers LastTimestamp"))


@dataclass(frozen=True, slots=True)
class LsoLagRow(Partitioned):
    """A row of ``lso_lag``."""

    cycle_ms: int = field(metadata=described("epoch ms", _CYCLE_MS))
    topic: str = field(metadata=described("-", "topic"))
    partition: Int32 = field(metadata=described("-", "partition"))
    leader: Int32 = field(metadata=described("broker id", "partition leader, -1 when leaderless"))
    lso_lag: int = field(metadata=described("messages", "high watermark - last stable offset"))
    max_active_transaction_duration_ms: int | None = field(
        metadata=described("ms", "age of the oldest open transaction on the partition, null when none")
    )


@dataclass(frozen=True, slots=True)
class ClosedRow(Partitioned):
    """A row of ``closed``."""

    cycle_ms: int = field(
        metadata=described("epoch ms", "the first cycle that no longer saw the transaction open")
    )
    topic: str = field(metadata=described("-", "topic"))
    partition: Int32 = field(metadata=described("-", "partition"))
    producer_id: int = field(metadata=described("-", "producer id"))
    producer_epoch: Int32 = field(metadata=described("-", "producer epoch when last seen"))
    start_offset: int = field(metadata=described("offset", "CurrentTxnStartOffset"))
    transactional_id: str | None = field(metadata=described("-", "transactional id, null when unknown"))
    last_class: str = field(metadata=described("-", "its class when last seen open"))
    last_seen_ms: int = field(metadata=described("epoch ms", "the last cycle that saw it open"))
    end: str = field(
        metadata=described(
            "-",
            "committed, aborted, fenced, ended (outcome not shown), no_coordinator (no coordinator "
            "owned it: an abort marker or log truncation ended it) or unknown",
        )
    )
    coordinator_state: str | None = field(
        metadata=described("-", "coordinator state of its transactional id when closed, null when not seen")
    )


@dataclass(frozen=True, slots=True)
class ActionRow(Partitioned):
    """A row of ``actions``."""

    at_ms: int = field(
        metadata=described("epoch ms", "when the command acted (or would have, for a dry run)")
    )
    action: str = field(metadata=described("-", "abort or force-terminate"))
    dry_run: bool = field(metadata=described("-", "true when nothing was written"))
    result: str = field(
        metadata=described("-", "dry_run, aborted, marker_written_but_still_open, terminated")
    )
    os_user: str = field(metadata=described("-", "operating-system user who ran the command"))
    principal: str | None = field(metadata=described("-", "Kafka principal (sasl.username), null when none"))
    host: str = field(metadata=described("-", "host name the command ran on"))
    topic: str | None = field(metadata=described("-", "target topic (abort), null otherwise"))
    partition: Int32 | None = field(metadata=described("-", "target partition (abort), null otherwise"))
    producer_id: int | None = field(metadata=described("-", "target producer id"))
    producer_epoch: Int32 | None = field(metadata=described("-", "target producer epoch"))
    start_offset: int | None = field(
        metadata=described("offset", "target transaction's start offset (abort)")
    )
    transactional_id: str | None = field(
        metadata=described("-", "target transactional id, null when unknown")
    )
    evidence: str = field(
        metadata=described(
            "JSON", "what the command saw: class, reason, age, coordinator state, start time and its source"
        )
    )
    written: str = field(metadata=described("-", "what was written to Kafka (nothing for a dry run)"))
    lso_before: int | None = field(
        metadata=described("offset", "LSO of the target partition(s) before (the lowest), null unknown")
    )
    lso_after: int | None = field(metadata=described("offset", "LSO after, null for a dry run or unknown"))


@dataclass(frozen=True, slots=True)
class Dataset:
    name: str
    doc: str
    #: The record of one row: its fields are the columns, in order.
    record: type

    @property
    def columns(self) -> tuple[Column, ...]:
        return _columns(self.record)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def time_column(self) -> str:
        """The column holding the row's time (epoch ms), from which ``date`` is derived."""
        return self.columns[len(PARTITION_COLUMNS)].name

    def arrow_schema(self) -> pa.Schema:
        return arrow_schema_of(self.record)

    def spark_schema(self) -> Any:
        """The schema as a ``pyspark.sql.types.StructType`` (pyspark imported when asked)."""
        return spark_schema_of(self.record)


@functools.cache
def _columns(record: type) -> tuple[Column, ...]:
    columns = columns_of(record)
    time = columns[len(PARTITION_COLUMNS)].name
    return tuple(replace(c, doc=c.doc.format(time=time)) if c.name == "date" else c for c in columns)


CYCLES = Dataset("cycles", "one row per cycle whose pipeline ran", CycleRow)
ERRORS = Dataset("errors", "one row per part of a cycle that was lost (CollectionError)", ErrorRow)
TRANSACTIONS = Dataset(
    "transactions",
    "one row per cycle per open partition-level transaction that is not `ongoing`",
    TransactionRow,
)
LSO_LAG = Dataset("lso_lag", "one row per cycle per partition with LSO lag > 0", LsoLagRow)
CLOSED = Dataset(
    "closed", "one row per stored (not `ongoing`) transaction that closed since the previous cycle", ClosedRow
)
ACTIONS = Dataset(
    "actions",
    "one row per abort or force-terminate (by the CLI, recover or auto-remediation), dry runs too (audit)",
    ActionRow,
)

DATASETS: tuple[Dataset, ...] = (CYCLES, ERRORS, TRANSACTIONS, LSO_LAG, CLOSED, ACTIONS)
BY_NAME = {d.name: d for d in DATASETS}
#: Any dataset's row.
Row = Partitioned
