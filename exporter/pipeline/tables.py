"""Records as Spark tables, and Spark rows back as records: every table is declared once.

A table's columns are the fields of its record (a frozen dataclass in ``exporter.model``):
the Spark schema, the Arrow table that carries the rows into the JVM and the reader that
turns result rows back into records are all derived from the dataclass, so a field is added
in one place and always read by name. Python ``int`` is a Spark ``long``, ``str`` a
``string``, ``bool`` a ``boolean``, a ``StrEnum`` its string value; ``X | None`` is nullable;
tuple and set fields are not columns (a record that needs one flattens it into a table of
its own, as :data:`SNAPSHOT_TABLES` does for a transaction's partitions).

Rows go in as columnar Arrow tables (:func:`in_plan`): the JVM reads the batches directly
and no Python worker is ever started (an empty table too: ``createDataFrame([])`` would
make a Python RDD, scanned by Python workers). The same code runs on a classic session and
on Spark Connect.

Such a frame is a ``LocalRelation``: its rows are part of the plan, and Spark's analyser and
optimiser walk and hash every row of it in each of their rules. That is free for a hundred
rows and the larger part of a cycle for 100,000 (bench/results/pipeline.md, "inputs"). So a table
of at least :data:`FILE_MIN_ROWS` rows leaves the plan (:class:`Handover`). On an embedded
(local-mode) session, whose JVM reads this host's files, it goes in as a Parquet file; the
plan then holds only its path. A remote master or Spark Connect server cannot read our
files: there it becomes a lazy local checkpoint, a leaf that the engine computes once inside
the cycle's action and that the plan names without its rows. On Spark Connect a table kept
in the plan also travels, and is turned into rows on the server, once for every place the
cycle reads it: at 100k partitions the server's 512m heap filled with copies of the same
tables and a warm cycle took 10-35 s (bench/pipeline_bench.py ``--connect``).

Every input table is ONE partition (:func:`one_partition`), and a join reads its small side
as a hash table built in the same task (:func:`build_side`), never a broadcast. A snapshot is
thousands to a few hundred thousand rows: split over partitions, every join and aggregation
of a cycle needed a shuffle (a stage, its files) or a broadcast (a job of its own), and a
10k-partition cycle ran 8 jobs, 16 stages and 46 tasks for a few milliseconds of work. On
one partition a child already satisfies the clustering a join, a window or an aggregation
asks for, so the planner adds no broadcast and no exchange between the output tables: the
cycle is one job, whose last stage has one task per output table
(``session.PLAN_DEFAULTS``; a few one-partition shuffles are left inside the
classification, where the planner's size estimate of a join of joins passes its bound:
see ``families.classification.classified_frame``).
"""

from __future__ import annotations

import functools
import logging
import operator
import os
import shutil
import tempfile
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from exporter.columns import columns_of
from exporter.model import (
    BatchTimestamp,
    Broker,
    BrokerConfig,
    ClusterSnapshot,
    GroupOffsets,
    ListedTransaction,
    PartitionOffsets,
    ProducerState,
    TransactionDescription,
)
from exporter.pipeline.session import FILE_MIN_ROWS_CONF, SHORT_LIVED_FILE_MIN_ROWS, is_local_master

log = logging.getLogger(__name__)

R = TypeVar("R")


@functools.cache
def schema_of(record: type) -> StructType:
    return StructType([StructField(c.name, c.spark, c.nullable) for c in columns_of(record)])


def arrow_of(record: type, rows: Sequence[Any]) -> pa.Table:
    """Records (instances of ``record``) as a columnar Arrow table of the record's columns."""
    cols = columns_of(record)
    if isinstance(rows, GroupOffsets):  # already columns, in the record's field order
        return pa.Table.from_arrays(
            [pa.array(values, type=c.arrow) for c, values in zip(cols, rows.columns(), strict=True)],
            schema=pa.schema([pa.field(c.name, c.arrow, c.nullable) for c in cols]),
        )
    # One C-level getter per column (``map(attrgetter)``): the column's list only references
    # the records' values, so nothing is allocated that the garbage collector tracks. A getter
    # of every field per row, transposed with ``zip``, made a tuple per row; at 100k
    # partitions those tuples triggered the cycle's full collections, which walk every object
    # of the process: 0.22 s against 0.06 s for 100k partitions' offsets.
    arrays = []
    for c in cols:
        column: list[Any] = list(map(operator.attrgetter(c.name), rows))
        if c.is_enum:
            column = [None if v is None else v.value for v in column]
        arrays.append(pa.array(column, type=c.arrow))
    return pa.Table.from_arrays(
        arrays, schema=pa.schema([pa.field(c.name, c.arrow, c.nullable) for c in cols])
    )


def frame_of(
    spark: SparkSession, record: type, rows: Sequence[Any], handover: Handover | None = None
) -> DataFrame:
    """A DataFrame of records, one partition; no Spark job runs here."""
    table = arrow_of(record, rows)
    if handover is not None:
        return handover.frame(table, schema_of(record))
    return one_partition(in_plan(spark, table, schema_of(record)))


def in_plan(spark: SparkSession, table: pa.Table, schema: StructType) -> DataFrame:
    """The Arrow table as a DataFrame whose rows are in its plan (a ``LocalRelation``), of
    the session's schema ``schema`` (the table's columns, in order, of its Arrow types).

    On a classic session the table goes to the driver as an Arrow stream file, which the
    JVM reads into the relation at once: three calls into the JVM, the first making
    ``spark`` the active session of the JVM thread that serves this Python thread (the
    rows' conversion reads its settings; on a thread without one, Spark's defaults: code
    generation on, and, if it is the JVM's first compilation, most likely a code cache of
    100 classes instead of 500: bench/results/fleet.md). That is what
    ``spark.createDataFrame(table, schema)`` does too, after ~30 more calls that read
    session settings and convert the schema: 6.5 ms a table against 3.5, for the dozen
    small tables of every computation (bench/results/fleet.md). On Spark Connect, and on a
    classic session whose driver takes data only over an encrypted socket
    (``spark.io.encryption.enabled``), ``createDataFrame`` itself.

    Empty tables go through Arrow too: ``createDataFrame([])`` (and ``emptyDataFrame``)
    would make a Python RDD, whose scan starts Python worker processes."""
    jvm = getattr(spark, "_jvm", None)
    context = getattr(spark, "_sc", None)
    if jvm is None or context is None or getattr(context, "_encryption_enabled", True):
        return spark.createDataFrame(table, schema)
    fd, path = tempfile.mkstemp(prefix="kte-rows-", suffix=".arrows", dir=getattr(context, "_temp_dir", None))
    try:
        with open(fd, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        getattr(jvm, "org.apache.spark.sql.classic.SparkSession").setActiveSession(spark._jsparkSession)
        batches = jvm.PythonSQLUtils.readArrowStreamFromFile(path)  # read before it returns
    finally:
        os.unlink(path)
    return DataFrame(jvm.PythonSQLUtils.toDataFrame(batches, schema.json(), spark._jsparkSession), spark)


def one_partition(frame: DataFrame) -> DataFrame:
    """``frame`` as one partition, without a shuffle (``coalesce(1)``): see the module's doc.
    Every input table goes through here, and so does every union or checkpoint that a join
    or an aggregation reads (a union of one-partition frames has one partition per branch)."""
    return frame.coalesce(1)


def build_side(frame: DataFrame) -> DataFrame:
    """The small side of a join: hashed by the task that reads the large side (a shuffled
    hash join, with no shuffle on one partition), never broadcast: a broadcast is a Spark job
    of its own per join and cycle."""
    return frame.hint("shuffle_hash")


#: More rows than a cycle's table ever holds (and than one Spark partition can): as a limit,
#: it never drops a row.
UNREACHED_LIMIT = 2**31 - 1


def in_place(frame: DataFrame) -> DataFrame:
    """``frame``, a side of a join, kept one partition in the planner's eyes, so that the
    join reads it where it is.

    A join of two one-partition sides is planned in place only while each side *says* it is
    one partition and the planner's estimate of its size stays under
    ``spark.sql.maxSinglePartitionBytes``; otherwise both sides are shuffled, one partition
    into one, a stage each. Three things break that:

    * an inner join says its output is partitioned like either side (a collection of both),
      not "one partition": ``coalesce(1)`` says it again (no work on one partition);
    * without statistics a join's estimate is the product of its sides', and a chain of
      joins passes any bound. A limit's estimate is its row count times its row's width, so
      a limit no table reaches (:data:`UNREACHED_LIMIT`) starts the estimate again;
    * the optimiser moves an anti or semi join below its big side's ``coalesce(1)``, onto the
      bare scan of a file (a table of :class:`Handover`); it moves nothing below a limit.

    The group family's blocked partitions and carried rows read their joins the same way (its
    SQL writes ``COALESCE(1)`` under this limit: ``groups._family_sql``): a cycle with groups
    at the LSO would otherwise run 2 to 5 stages more than one without. The
    classification's chain does not: see ``families.classification.classified_frame`` for what
    it cost there."""
    return one_partition(frame).limit(UNREACHED_LIMIT)


#: Tables of at least this many rows leave the plan: as files on an embedded JVM, as
#: checkpoints elsewhere (see the module's doc).
FILE_MIN_ROWS = 2_000


class Handover:
    """How one computation's input tables reach the JVM: small ones in the plan, large ones
    out of it. On an embedded session those are Parquet files in a directory of their own,
    removed by :meth:`close` once the computation's action has run; on a remote master or a
    Spark Connect server, lazy local checkpoints. The computation's other checkpoints
    (:meth:`checkpoint`, :meth:`keep`) are released by :meth:`close` too. Use as a context
    manager."""

    def __init__(self, spark: SparkSession, min_rows: int | None = None) -> None:
        self._spark = spark
        self._files = _reads_our_files(spark)
        self._jvm = _jvm_of(spark) if self._files else None
        self._first = self._jvm is not None and self._jvm not in _READERS_STARTED
        self._min_rows = _file_min_rows(spark, self._first) if min_rows is None else min_rows
        self._dir: str | None = None
        self._checkpoints: list[DataFrame] = []

    def frame(self, table: pa.Table, schema: StructType, session: SparkSession | None = None) -> DataFrame:
        """The table as a one-partition DataFrame (:func:`one_partition`), of ``session``
        (another session of the same SparkContext) if given."""
        spark = session if session is not None else self._spark
        if self._first and table.num_rows >= FILE_MIN_ROWS and self._jvm is not None:
            _READERS_STARTED.add(self._jvm)  # the next computation hands its tables over as files
        if table.num_rows < self._min_rows:
            return one_partition(in_plan(spark, table, schema))
        if not self._files:
            return self.checkpoint(one_partition(in_plan(spark, table, schema)))
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="kte-inputs-")
        path = f"{self._dir}/{uuid.uuid4().hex}.parquet"
        # Plain values, no statistics: the file lives for one computation, and its readers
        # read every row. A dictionary and statistics per column cost Python the time to
        # build them and the JVM the time to decode the dictionary's bit-packed indices (64
        # of 575 JVM samples in a profile of 20 x 10k rounds: bench/results/fleet.md).
        pq.write_table(table, path, compression="none", use_dictionary=False, write_statistics=False)
        return one_partition(spark.read.schema(schema).parquet(path))

    def checkpoint(self, frame: DataFrame) -> DataFrame:
        """``frame`` as a lazy local checkpoint of one partition: a leaf of the plan that the
        engine computes once inside the computation's action, released by :meth:`close`."""
        return one_partition(self.keep(frame.localCheckpoint(eager=False)))

    def keep(self, checkpoint: DataFrame) -> DataFrame:
        """``checkpoint`` (a frame ``localCheckpoint`` made, of any session of this
        SparkContext), released by :meth:`close`.

        A classic driver keeps a checkpoint's blocks until its ContextCleaner finds the RDD
        unreachable, which takes a full collection of the JVM's heap (Spark asks for one every
        ``spark.cleaner.periodicGC.interval``). Between the rounds of 100 clusters x 10k
        partitions the heap held ~160 MiB of the last round's checkpoints, 1M rows of the
        partition frame among them (255 MiB live after a full collection, 94 MiB with them
        released: bench/results/fleet.md). A Spark Connect server releases a checkpoint with
        the last client object that names it."""
        self._checkpoints.append(checkpoint)
        return checkpoint

    def close(self) -> None:
        checkpoints, self._checkpoints = self._checkpoints, []
        for checkpoint in checkpoints:
            _release(checkpoint)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> Handover:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _release(checkpoint: DataFrame) -> None:
    """Drop the blocks of a classic session's checkpoint (its plan's ``LogicalRDD``), without
    waiting for the removal. Nothing to do on Spark Connect (no JVM object here)."""
    jdf = getattr(checkpoint, "_jdf", None)
    if jdf is None:
        return
    try:
        plan = jdf.logicalPlan()
        if plan.getClass().getSimpleName() == "LogicalRDD":
            plan.rdd().unpersist(False)
    except Exception as e:  # the JVM gone or going (a session stopped under the computation)
        log.debug("a checkpoint's blocks were not released: %s", e)


#: The embedded JVMs (by their application id) that have had a computation whose tables
#: would have been files. The first such computation of a JVM keeps its tables of fewer than
#: ``session.SHORT_LIVED_FILE_MIN_ROWS`` rows in the plan: on a fresh JVM the first Parquet
#: file costs the reader's start (classes loaded, code interpreted), about a second of the
#: daemon's first cycle at 3000 partitions (bench/results/first_cycle.md); the next cycles,
#: warm, read their large tables as files.
_READERS_STARTED: set[str] = set()


def _jvm_of(spark: SparkSession) -> str | None:
    context = getattr(spark, "_sc", None)
    app = getattr(context, "applicationId", None)
    return app if isinstance(app, str) else None


def _file_min_rows(spark: SparkSession, first: bool) -> int:
    """The session's own bound (``session.FILE_MIN_ROWS_CONF``), else :data:`FILE_MIN_ROWS`
    (``first``: the first computation of a JVM, ``session.SHORT_LIVED_FILE_MIN_ROWS``)."""
    own = spark.conf.get(FILE_MIN_ROWS_CONF, None)
    if own and own.isdigit():
        return int(own)
    return SHORT_LIVED_FILE_MIN_ROWS if first else FILE_MIN_ROWS


def _reads_our_files(spark: SparkSession) -> bool:
    """A classic session whose driver and executors run in a JVM on this host."""
    context = getattr(spark, "_sc", None)  # Spark Connect sessions have none
    master = getattr(context, "master", None)
    return isinstance(master, str) and is_local_master(master)


@functools.cache
def _reading(record: type) -> tuple[tuple[str, ...], tuple[tuple[str, type], ...]]:
    """How a row becomes a ``record``: its column names, and those holding an enum."""
    cols = columns_of(record)
    return tuple(c.name for c in cols), tuple(
        (c.name, typing.cast(type, c.python)) for c in cols if c.is_enum
    )


def record_of(record: type[R], row: Mapping[str, Any], **extra: Any) -> R:
    """One result row (by column name) as a record; enum columns become their enum."""
    names, enums = _reading(typing.cast(type, record))
    values = {name: row[name] for name in names}
    for name, kind in enums:
        if values[name] is not None:
            values[name] = kind(values[name])
    values.update(extra)
    return record(**values)


def records_of(record: type[R], rows: Iterable[Mapping[str, Any]]) -> tuple[R, ...]:
    return tuple(record_of(record, row) for row in rows)


# --- the snapshot's tables ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TransactionPartitionRow:
    """One partition of one described transaction (flattened from its ``partitions``)."""

    coordinator_id: int
    transactional_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class BrokerRow:
    broker_id: int


@dataclass(frozen=True, slots=True)
class PartitionRow:
    topic: str
    partition: int


def _transaction_partitions(s: ClusterSnapshot) -> list[TransactionPartitionRow]:
    return [
        TransactionPartitionRow(t.coordinator_id, t.transactional_id, tp.topic, tp.partition)
        for t in s.transactions
        for tp in t.partitions
    ]


@dataclass(frozen=True, slots=True)
class TopicRow:
    topic: str


#: Every snapshot table: its name, its record type and how to read its rows off a snapshot.
SNAPSHOT_TABLES: dict[str, tuple[type, Callable[[ClusterSnapshot], Sequence[Any]]]] = {
    "brokers": (Broker, lambda s: s.brokers),
    "broker_configs": (BrokerConfig, lambda s: s.broker_configs),
    "partitions": (PartitionOffsets, lambda s: s.partitions),
    "producers": (ProducerState, lambda s: s.producers),
    "listed_transactions": (ListedTransaction, lambda s: s.listed_transactions),
    "transactions": (TransactionDescription, lambda s: s.transactions),
    "transaction_partitions": (TransactionPartitionRow, _transaction_partitions),
    "batch_timestamps": (BatchTimestamp, lambda s: s.batch_timestamps),
    "coordinators_listed": (
        BrokerRow,
        lambda s: [BrokerRow(c) for c in sorted(s.coordinators_listed)],
    ),
    "reread_producers": (ProducerState, lambda s: s.reread_producers),
    "reread_partitions": (
        PartitionRow,
        lambda s: [PartitionRow(t, p) for t, p in sorted(s.reread_partitions)],
    ),
    "unread_partitions": (
        PartitionRow,
        lambda s: [PartitionRow(t, p) for t, p in sorted(s.unread_partitions())],
    ),
    "unread_topics": (TopicRow, lambda s: [TopicRow(t) for t in sorted(s.unread_topics())]),
}


#: The column every table of a round carries: the position of its cluster in the round
#: (``runs[i]``). Every join, window and aggregation of a family lists it among its keys
#: (:func:`keyed`), so that one plan computes every cluster of the round at once and the one
#: action's rows are split per cluster on the way out.
CLUSTER = "cluster"
_CLUSTER_FIELD = StructField(CLUSTER, LongType(), False)


def keyed(*columns: str) -> list[str]:
    """Join, grouping or window keys: ``columns`` within each cluster of the round."""
    return [CLUSTER, *columns]


@functools.cache
def keyed_schema(record: type) -> StructType:
    """The schema of a round's table of ``record``: the cluster, then the record's columns."""
    return StructType([_CLUSTER_FIELD, *schema_of(record).fields])


def keyed_arrow(record: type, per_cluster: Sequence[Sequence[Any]]) -> pa.Table:
    """The rows of every cluster of a round as one Arrow table: the cluster's position in
    ``per_cluster``, then the record's columns (:func:`arrow_of`)."""
    field = pa.field(CLUSTER, pa.int64(), False)
    parts = [
        table.add_column(0, field, pa.array([index] * table.num_rows, pa.int64()))
        for index, table in ((i, arrow_of(record, rows)) for i, rows in enumerate(per_cluster) if rows)
    ]
    if not parts:
        return arrow_of(record, []).add_column(0, field, pa.array([], pa.int64()))
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


#: A table of a round besides the snapshot's: its record, and its rows for the cluster at a
#: position of the round (what a cycle remembered, what is derived from its snapshot).
RoundSource = tuple[type, Callable[[int], Sequence[Any]]]


class Tables:
    """The round's tables as DataFrames, read by name (``tables["producers"]``): every
    cluster's rows in one table, each row with its cluster (:data:`CLUSTER`).

    ``snapshots``: the snapshot of each cluster of the round (one snapshot: a round of one),
    whose tables are :data:`SNAPSHOT_TABLES`; ``sources``: the round's other tables by name.
    Each DataFrame is made on first use, so a table the round never reads costs nothing;
    ``empty(name)`` says whether no cluster has rows for it, without a Spark job."""

    def __init__(
        self,
        spark: SparkSession,
        snapshots: ClusterSnapshot | Sequence[ClusterSnapshot],
        handover: Handover | None = None,
        sources: Mapping[str, RoundSource] | None = None,
    ) -> None:
        self._spark = spark
        self._snapshots = (snapshots,) if isinstance(snapshots, ClusterSnapshot) else tuple(snapshots)
        self._handover = handover
        self._sources = dict(sources or {})
        self._frames: dict[str, DataFrame] = {}
        self._rows: dict[str, tuple[Sequence[Any], ...]] = {}

    def record(self, name: str) -> type:
        return SNAPSHOT_TABLES[name][0] if name in SNAPSHOT_TABLES else self._sources[name][0]

    def rows(self, name: str) -> tuple[Sequence[Any], ...]:
        """Each cluster's rows of the table, in the round's order."""
        if name not in self._rows:
            if name in SNAPSHOT_TABLES:
                of = SNAPSHOT_TABLES[name][1]
                self._rows[name] = tuple(of(s) for s in self._snapshots)
            else:
                at = self._sources[name][1]
                self._rows[name] = tuple(at(i) for i in range(len(self._snapshots)))
        return self._rows[name]

    def empty(self, name: str) -> bool:
        return not any(self.rows(name))

    def __getitem__(self, name: str) -> DataFrame:
        if name not in self._frames:
            self._frames[name] = self.frame_in(name, self._spark)
        return self._frames[name]

    def frame_in(self, name: str, session: SparkSession) -> DataFrame:
        """The table as a new DataFrame of ``session`` (another session of the same
        SparkContext: ``session.compiled_leaf``)."""
        record = self.record(name)
        table = keyed_arrow(record, self.rows(name))
        schema = keyed_schema(record)
        if self._handover is not None:
            frame = self._handover.frame(table, schema, session=session)
        else:
            frame = one_partition(in_plan(session, table, schema))
        return frame

    def put(self, name: str, frame: DataFrame) -> None:
        """Give the table as a frame of the round (with the cluster column): a family computed
        over tables of its own (``families.groups.compute_groups``)."""
        self._frames[name] = frame
