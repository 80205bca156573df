"""The datasets of the history: one Parquet dataset per kind of fact, partitioned by
``cluster`` and ``date`` (UTC, ``YYYY-MM-DD``) under ``history.path``.

Every column is declared once here, with its unit; ``docs/history.md`` shows the same tables
(a unit test keeps them in step). Times are epoch milliseconds (UTC) as Kafka reports them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

#: Partition columns of every dataset, in directory order.
PARTITION_COLUMNS = ("cluster", "date")


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    kind: str  # "string", "int", "long", "bool"
    nullable: bool
    unit: str
    doc: str


@dataclass(frozen=True, slots=True)
class Dataset:
    name: str
    doc: str
    columns: tuple[Column, ...]
    #: The column holding the row's time (epoch ms), from which ``date`` is derived.
    time_column: str

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, _ARROW[c.kind], c.nullable) for c in self.columns])

    def spark_ddl(self) -> str:
        """The schema as a Spark DDL string (``name TYPE, ...``), for ``read.schema``."""
        return ", ".join(f"`{c.name}` {_DDL[c.kind]}" for c in self.columns)


_ARROW = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "bool": pa.bool_()}
_DDL = {"string": "STRING", "int": "INT", "long": "BIGINT", "bool": "BOOLEAN"}


def _c(name: str, kind: str, unit: str, doc: str, *, nullable: bool = False) -> Column:
    return Column(name, kind, nullable, unit, doc)


#: Every dataset's rows start with its partition columns, in this order.
CLUSTER_COLUMN, DATE_COLUMN = 0, 1


def _key(time_name: str, time_doc: str) -> tuple[Column, ...]:
    return (
        _c("cluster", "string", "-", "cluster name (`clusters[].name`); partition column"),
        _c("date", "string", "YYYY-MM-DD (UTC)", f"UTC date of `{time_name}`; partition column"),
        _c(time_name, "long", "epoch ms", time_doc),
    )


_CYCLE_MS = "when the cycle's pipeline ran (CycleResult.computed_at_ms)"

CYCLES = Dataset(
    "cycles",
    "one row per cycle whose pipeline ran",
    (
        *_key("cycle_ms", _CYCLE_MS),
        _c("snapshot_ms", "long", "epoch ms", "when the snapshot was taken"),
        _c("outcome", "string", "-", "`complete` (every read succeeded) or `partial`"),
        _c("errors", "int", "count", "parts of the cycle that were lost (rows in `errors`)"),
        _c("partitions", "int", "count", "partitions read"),
        _c("lagging_partitions", "int", "count", "partitions with LSO lag > 0"),
        _c("max_lso_lag", "long", "messages", "highest LSO lag of the cycle (0 when none)"),
        _c("open_ongoing", "int", "count", "open partition-level transactions classed ongoing"),
        _c("open_late", "int", "count", "... classed late"),
        _c("open_suspected_hanging", "int", "count", "... classed suspected_hanging"),
        _c("open_hanging", "int", "count", "... classed hanging"),
        _c("open_two_phase_commit", "int", "count", "... classed two_phase_commit"),
        _c("open_unknown", "int", "count", "... classed unknown"),
    ),
    "cycle_ms",
)

ERRORS = Dataset(
    "errors",
    "one row per part of a cycle that was lost (CollectionError)",
    (
        *_key("cycle_ms", _CYCLE_MS),
        _c("api", "string", "-", "Kafka API, e.g. DescribeProducers, ListOffsets"),
        _c("error", "string", "-", "Kafka error name or client-side kind (TIMEOUT)"),
        _c("broker_id", "int", "broker id", "broker asked, -1 when none"),
        _c("topic", "string", "-", "topic, empty when not partition-level"),
        _c("partition", "int", "-", "partition, -1 when not partition-level"),
        _c("message", "string", "-", "the error's message"),
    ),
    "cycle_ms",
)

TRANSACTIONS = Dataset(
    "transactions",
    "one row per cycle per open partition-level transaction that is not `ongoing`",
    (
        *_key("cycle_ms", _CYCLE_MS),
        _c("topic", "string", "-", "topic"),
        _c("partition", "int", "-", "partition"),
        _c("broker_id", "int", "broker id", "partition leader that answered DescribeProducers"),
        _c("producer_id", "long", "-", "producer id"),
        _c("producer_epoch", "int", "-", "producer epoch"),
        _c("coordinator_epoch", "int", "-", "coordinator epoch (DescribeProducers)"),
        _c("start_offset", "long", "offset", "CurrentTxnStartOffset: first offset of the transaction"),
        _c("transactional_id", "string", "-", "transactional id, null when none is known", nullable=True),
        _c("application", "string", "-", "application (attribution rules), null when unknown", nullable=True),
        _c("txn_class", "string", "-", "late, suspected_hanging, hanging, two_phase_commit or unknown"),
        _c("late", "bool", "-", "older than transaction.max.timeout.ms + padding"),
        _c("reason", "string", "-", "hanging reason or unknown reason, null otherwise", nullable=True),
        _c("start_time_ms", "long", "epoch ms", "start of the transaction, -1 unknown"),
        _c("start_time_source", "string", "-", "coordinator, batch_timestamp or last_timestamp"),
        _c("duration_ms", "long", "ms", "age at `cycle_ms`"),
        _c("coordinator_id", "int", "broker id", "coordinator of the transactional id, -1 none"),
        _c(
            "coordinator_state",
            "string",
            "-",
            "coordinator state (Ongoing, Empty, ...), null when not described",
            nullable=True,
        ),
        _c("transaction_timeout_ms", "long", "ms", "the transaction's timeout, -1 unknown"),
        _c("last_timestamp_ms", "long", "epoch ms", "DescribeProducers LastTimestamp"),
    ),
    "cycle_ms",
)

LSO_LAG = Dataset(
    "lso_lag",
    "one row per cycle per partition with LSO lag > 0",
    (
        *_key("cycle_ms", _CYCLE_MS),
        _c("topic", "string", "-", "topic"),
        _c("partition", "int", "-", "partition"),
        _c("leader", "int", "broker id", "partition leader, -1 when leaderless"),
        _c("lso_lag", "long", "messages", "high watermark - last stable offset"),
        _c(
            "max_active_transaction_duration_ms",
            "long",
            "ms",
            "age of the oldest open transaction on the partition, null when none",
            nullable=True,
        ),
    ),
    "cycle_ms",
)

CLOSED = Dataset(
    "closed",
    "one row per stored (not `ongoing`) transaction that closed since the previous cycle",
    (
        *_key("cycle_ms", "the first cycle that no longer saw the transaction open"),
        _c("topic", "string", "-", "topic"),
        _c("partition", "int", "-", "partition"),
        _c("producer_id", "long", "-", "producer id"),
        _c("producer_epoch", "int", "-", "producer epoch when last seen"),
        _c("start_offset", "long", "offset", "CurrentTxnStartOffset"),
        _c("transactional_id", "string", "-", "transactional id, null when unknown", nullable=True),
        _c("last_class", "string", "-", "its class when last seen open"),
        _c("last_seen_ms", "long", "epoch ms", "the last cycle that saw it open"),
        _c(
            "end",
            "string",
            "-",
            "committed, aborted, fenced, ended (outcome not shown), "
            "no_coordinator (no coordinator owned it: an abort marker or "
            "log truncation ended it) or unknown",
        ),
        _c(
            "coordinator_state",
            "string",
            "-",
            "coordinator state of its transactional id when closed, null when not seen",
            nullable=True,
        ),
    ),
    "cycle_ms",
)

ACTIONS = Dataset(
    "actions",
    "one row per abort or force-terminate (by the CLI, recover or auto-remediation), dry runs too (audit)",
    (
        *_key("at_ms", "when the command acted (or would have, for a dry run)"),
        _c("action", "string", "-", "abort or force-terminate"),
        _c("dry_run", "bool", "-", "true when nothing was written"),
        _c("result", "string", "-", "dry_run, aborted, marker_written_but_still_open, terminated"),
        _c("os_user", "string", "-", "operating-system user who ran the command"),
        _c("principal", "string", "-", "Kafka principal (sasl.username), null when none", nullable=True),
        _c("host", "string", "-", "host name the command ran on"),
        _c("topic", "string", "-", "target topic (abort), null otherwise", nullable=True),
        _c("partition", "int", "-", "target partition (abort), null otherwise", nullable=True),
        _c("producer_id", "long", "-", "target producer id", nullable=True),
        _c("producer_epoch", "int", "-", "target producer epoch", nullable=True),
        _c("start_offset", "long", "offset", "target transaction's start offset (abort)", nullable=True),
        _c("transactional_id", "string", "-", "target transactional id, null when unknown", nullable=True),
        _c(
            "evidence",
            "string",
            "JSON",
            "what the command saw: class, reason, age, coordinator state, start time and its source",
        ),
        _c("written", "string", "-", "what was written to Kafka (nothing for a dry run)"),
        _c(
            "lso_before",
            "long",
            "offset",
            "LSO of the target partition(s) before (the lowest), null unknown",
            nullable=True,
        ),
        _c("lso_after", "long", "offset", "LSO after, null for a dry run or unknown", nullable=True),
    ),
    "at_ms",
)

DATASETS: tuple[Dataset, ...] = (CYCLES, ERRORS, TRANSACTIONS, LSO_LAG, CLOSED, ACTIONS)
BY_NAME = {d.name: d for d in DATASETS}


def spark_schema(dataset: Dataset) -> object:
    """The dataset's schema as a pyspark StructType (pyspark imported here, not at import)."""
    from pyspark.sql.types import (
        BooleanType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    kinds = {"string": StringType(), "int": IntegerType(), "long": LongType(), "bool": BooleanType()}
    return StructType([StructField(c.name, kinds[c.kind], c.nullable) for c in dataset.columns])
