"""The snapshot as Spark tables: one explicit schema per snapshot table.

Rows are built as plain tuples in schema order (no inference, no per-row dicts), turned into
columnar Arrow tables and handed to ``spark.createDataFrame(arrow_table, schema)``: the JVM
reads the Arrow batches directly, so no Python worker process is ever started (a DataFrame
made from a Python list is scanned through a Python worker, several times slower). An empty
snapshot table becomes ``spark.emptyDataFrame(schema)``, which costs no job at all. The same
code runs on a classic session and on Spark Connect. Column names are the model's field
names. :meth:`SnapshotFrames.persist` caches the tables for the cycle, because several output
tables read each of them.

``TransactionDescription.partitions`` is flattened into its own table,
``transaction_partitions`` (one row per transactional id and partition), because the pipeline
joins on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from exporter.model import ClusterSnapshot


def _schema(*fields: tuple[str, DataType, bool]) -> StructType:
    return StructType([StructField(name, kind, nullable) for name, kind, nullable in fields])


_INT = IntegerType()
_LONG = LongType()
_STR = StringType()
_BOOL = BooleanType()

BROKERS = _schema(
    ("broker_id", _INT, False),
    ("host", _STR, False),
    ("port", _INT, False),
    ("rack", _STR, True),
)
BROKER_CONFIGS = _schema(
    ("broker_id", _INT, False),
    ("transaction_max_timeout_ms", _LONG, False),
    ("verification_enabled", _BOOL, False),
    ("two_phase_commit_enabled", _BOOL, False),
    ("transaction_version", _INT, False),
)
PARTITIONS = _schema(
    ("topic", _STR, False),
    ("partition", _INT, False),
    ("leader", _INT, False),
    ("high_watermark", _LONG, False),
    ("last_stable_offset", _LONG, False),
)
PRODUCERS = _schema(
    ("topic", _STR, False),
    ("partition", _INT, False),
    ("broker_id", _INT, False),
    ("producer_id", _LONG, False),
    ("producer_epoch", _INT, False),
    ("last_sequence", _INT, False),
    ("last_timestamp_ms", _LONG, False),
    ("coordinator_epoch", _INT, False),
    ("current_txn_start_offset", _LONG, False),
)
LISTED_TRANSACTIONS = _schema(
    ("coordinator_id", _INT, False),
    ("transactional_id", _STR, False),
    ("producer_id", _LONG, False),
    ("state", _STR, False),
)
TRANSACTIONS = _schema(
    ("coordinator_id", _INT, False),
    ("transactional_id", _STR, False),
    ("error", _STR, True),
    ("state", _STR, False),
    ("timeout_ms", _LONG, False),
    ("start_time_ms", _LONG, False),
    ("producer_id", _LONG, False),
    ("producer_epoch", _INT, False),
)
TRANSACTION_PARTITIONS = _schema(
    ("coordinator_id", _INT, False),
    ("transactional_id", _STR, False),
    ("topic", _STR, False),
    ("partition", _INT, False),
)
BATCH_TIMESTAMPS = _schema(
    ("topic", _STR, False),
    ("partition", _INT, False),
    ("offset", _LONG, False),
    ("timestamp_ms", _LONG, False),
)
COORDINATORS_LISTED = _schema(("coordinator_id", _INT, False))


@dataclass(frozen=True, slots=True)
class SnapshotFrames:
    """One DataFrame per snapshot table (see the schemas above)."""

    brokers: DataFrame
    broker_configs: DataFrame
    partitions: DataFrame
    producers: DataFrame
    listed_transactions: DataFrame
    transactions: DataFrame
    transaction_partitions: DataFrame
    batch_timestamps: DataFrame
    coordinators_listed: DataFrame

    def frames(self) -> list[DataFrame]:
        return [getattr(self, f.name) for f in fields(self)]

    def persist(self) -> SnapshotFrames:
        """Cache every table (lazily: the first action that reads a table fills its cache)."""
        return SnapshotFrames(*(frame.persist() for frame in self.frames()))

    def unpersist(self) -> None:
        for frame in self.frames():
            frame.unpersist()


_ARROW_TYPES: dict[type[DataType], pa.DataType] = {
    IntegerType: pa.int32(),
    LongType: pa.int64(),
    StringType: pa.string(),
    BooleanType: pa.bool_(),
}


def arrow_table(rows: Sequence[tuple[object, ...]], schema: StructType) -> pa.Table:
    """Row tuples in schema order as a columnar Arrow table of the schema's types."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema.fields]
    return pa.Table.from_arrays(
        [pa.array(column, type=_ARROW_TYPES[type(f.dataType)])
         for column, f in zip(columns, schema.fields, strict=True)],
        schema=pa.schema([pa.field(f.name, _ARROW_TYPES[type(f.dataType)], f.nullable)
                          for f in schema.fields]),
    )


def _frame(
    spark: SparkSession, rows: Sequence[tuple[object, ...]], schema: StructType
) -> DataFrame:
    if not rows:
        return spark.emptyDataFrame(schema)
    return spark.createDataFrame(arrow_table(rows, schema), schema)


def snapshot_frames(spark: SparkSession, snapshot: ClusterSnapshot) -> SnapshotFrames:
    """Turn a snapshot into DataFrames. No Spark action runs here."""
    s = snapshot
    return SnapshotFrames(
        brokers=_frame(
            spark,
            [(b.broker_id, b.host, b.port, b.rack) for b in s.brokers], BROKERS
        ),
        broker_configs=_frame(
            spark,
            [
                (
                    c.broker_id,
                    c.transaction_max_timeout_ms,
                    c.verification_enabled,
                    c.two_phase_commit_enabled,
                    c.transaction_version,
                )
                for c in s.broker_configs
            ],
            BROKER_CONFIGS,
        ),
        partitions=_frame(
            spark,
            [
                (p.topic, p.partition, p.leader, p.high_watermark, p.last_stable_offset)
                for p in s.partitions
            ],
            PARTITIONS,
        ),
        producers=_frame(
            spark,
            [
                (
                    p.topic,
                    p.partition,
                    p.broker_id,
                    p.producer_id,
                    p.producer_epoch,
                    p.last_sequence,
                    p.last_timestamp_ms,
                    p.coordinator_epoch,
                    p.current_txn_start_offset,
                )
                for p in s.producers
            ],
            PRODUCERS,
        ),
        listed_transactions=_frame(
            spark,
            [
                (t.coordinator_id, t.transactional_id, t.producer_id, t.state)
                for t in s.listed_transactions
            ],
            LISTED_TRANSACTIONS,
        ),
        transactions=_frame(
            spark,
            [
                (
                    t.coordinator_id,
                    t.transactional_id,
                    t.error,
                    t.state,
                    t.timeout_ms,
                    t.start_time_ms,
                    t.producer_id,
                    t.producer_epoch,
                )
                for t in s.transactions
            ],
            TRANSACTIONS,
        ),
        transaction_partitions=_frame(
            spark,
            [
                (t.coordinator_id, t.transactional_id, tp.topic, tp.partition)
                for t in s.transactions
                for tp in t.partitions
            ],
            TRANSACTION_PARTITIONS,
        ),
        batch_timestamps=_frame(
            spark,
            [(b.topic, b.partition, b.offset, b.timestamp_ms) for b in s.batch_timestamps],
            BATCH_TIMESTAMPS,
        ),
        coordinators_listed=_frame(
            spark,
            [(c,) for c in sorted(s.coordinators_listed)], COORDINATORS_LISTED
        ),
    )
