"""The consumer-group family on Spark: lag split for read_committed, blocked consumers, and
open transactions per application.

Inputs (DataFrames; :func:`group_input_frames` builds the group-side ones from records):

* group offsets: ``group, topic, partition, committed_offset, coordinator_id, group_state,
  pending_transactional_commit`` (:class:`~exporter.model.GroupOffset`);
* partitions: ``topic, partition, high_watermark, last_stable_offset`` (-1: unknown);
* classified open transactions: ``topic, partition, start_offset, transactional_id,
  producer_id, txn_class, duration_ms`` and ``application`` (added from the attribution rules
  when absent);
* consumable checks (:class:`~exporter.model.ConsumableCheck`, the "lag stuck at 1" evidence)
  and the previous cycle's :class:`~exporter.model.GroupsCarry`.

Definitions (docs/metrics.md):

* ``consumable`` lag of a group partition: LSO - committed, never negative; when a consumable
  check read the batches between exactly that committed offset and that LSO, the number of
  records a read_committed consumer gets there instead (0 when only transaction markers or
  aborted data lie before the LSO).
* ``blocked`` lag: HWM - max(committed, LSO), never negative: the records behind open
  transactions the group has not read. A read_uncommitted consumer past the LSO has read part
  of them, so only the rest counts.
* A group partition is *blocked by a transaction* when committed == LSO (a committed offset
  past the LSO is a read_uncommitted consumer: never blocked), LSO < HWM, and the LSO has been
  seen unchanged (while below the HWM) in at least ``blocked_after_cycles`` consecutive
  cycles. The finding names the open transaction whose start offset is the LSO, and the group
  is blocked since the first cycle it was seen at that LSO.

:func:`group_frames` builds lazy DataFrames only; :meth:`GroupFrames.single` folds them into
one DataFrame so the caller reads everything in one action, and :func:`groups_result` turns
its rows into records. :func:`compute_groups` does both, for callers with no action of their
own to share.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from exporter.groups_config import BUILTIN_RULES, AttributionRule, GroupsConfig
from exporter.model import (
    ApplicationTransactions,
    BlockedGroupPartition,
    ConsumableCheck,
    GroupAtLso,
    GroupLag,
    GroupOffset,
    GroupOffsets,
    GroupsCarry,
    GroupsResult,
    GroupSummary,
    LsoHistory,
    TxnClass,
)
from exporter.pipeline.attribution import application_column
from exporter.pipeline.session import codegen_session, rehome
from exporter.pipeline.tables import Handover, build_side, in_place, one_partition

#: The application label of a transaction no rule attributes (or whose id is unknown).
UNKNOWN_APPLICATION = "unknown"


def _schema(*cols: tuple[str, DataType, bool]) -> StructType:
    return StructType([StructField(n, t, nullable) for n, t, nullable in cols])


_INT, _LONG, _STR, _BOOL = IntegerType(), LongType(), StringType(), BooleanType()
_ARROW: dict[type[DataType], pa.DataType] = {
    IntegerType: pa.int32(),
    LongType: pa.int64(),
    StringType: pa.string(),
    BooleanType: pa.bool_(),
}

GROUP_OFFSETS = _schema(
    ("group", _STR, False),
    ("topic", _STR, False),
    ("partition", _INT, False),
    ("committed_offset", _LONG, False),
    ("coordinator_id", _INT, False),
    ("group_state", _STR, False),
    ("pending_transactional_commit", _BOOL, False),
)
CONSUMABLE_CHECKS = _schema(
    ("topic", _STR, False),
    ("partition", _INT, False),
    ("from_offset", _LONG, False),
    ("to_offset", _LONG, False),
    ("consumable_records", _LONG, False),
)
LSO_HISTORY = _schema(
    ("topic", _STR, False),
    ("partition", _INT, False),
    ("last_stable_offset", _LONG, False),
    ("cycles", _INT, False),
)
AT_LSO = _schema(
    ("group", _STR, False),
    ("topic", _STR, False),
    ("partition", _INT, False),
    ("last_stable_offset", _LONG, False),
    ("since_ms", _LONG, False),
)


def _frame(
    spark: SparkSession,
    rows: Sequence[tuple[object, ...]],
    schema: StructType,
    handover: Handover | None = None,
) -> DataFrame:
    """Rows (tuples in the schema's order) as a DataFrame: :func:`_columns_frame`."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(schema.fields)
    return _columns_frame(spark, columns, schema, handover)


def _columns_frame(
    spark: SparkSession,
    columns: Sequence[Sequence[object]],
    schema: StructType,
    handover: Handover | None = None,
) -> DataFrame:
    """Columns as a DataFrame through Arrow (no Python worker), an empty table too.

    An empty table made by ``createDataFrame([])`` is an RDD scan, which Spark sizes at
    ``spark.sql.defaultSizeInBytes`` (8 EiB) for want of statistics. A join's estimate is
    the product of its sides', so every join above such a table passed
    ``spark.sql.maxSinglePartitionBytes`` and the planner shuffled its one-partition inputs
    again: the family's plan at 1000 groups x 100 partitions, with no consumable check and
    no carry (the usual cycle), had 14 exchanges, two of them over the 100k offset rows.
    An empty Arrow table is a ``LocalRelation`` of size 0: none."""
    table = pa.Table.from_arrays(
        [pa.array(col, type=_ARROW[type(f.dataType)]) for col, f in zip(columns, schema.fields, strict=True)],
        schema=pa.schema([pa.field(f.name, _ARROW[type(f.dataType)], f.nullable) for f in schema.fields]),
    )
    if handover is not None:
        return handover.frame(table, schema, session=spark)
    return one_partition(spark.createDataFrame(table, schema))


@dataclass(frozen=True, slots=True)
class GroupInputs:
    """The group side of one cycle as DataFrames."""

    offsets: DataFrame
    checks: DataFrame
    lso_history: DataFrame
    at_lso: DataFrame


def group_input_frames(
    spark: SparkSession,
    offsets: Sequence[GroupOffset],
    checks: Sequence[ConsumableCheck] = (),
    carry: GroupsCarry | None = None,
    handover: Handover | None = None,
) -> GroupInputs:
    """The snapshot's group records and the previous cycle's carry as DataFrames."""
    carry = carry or GroupsCarry()
    return GroupInputs(
        # made in the code-generating session: the family's one large step reads it there
        offsets=_columns_frame(
            codegen_session(spark),
            GroupOffsets.of(offsets).columns(),
            GROUP_OFFSETS,
            handover,
        ),
        checks=_frame(
            spark,
            [(c.topic, c.partition, c.from_offset, c.to_offset, c.consumable_records) for c in checks],
            CONSUMABLE_CHECKS,
            handover,
        ),
        lso_history=_frame(
            spark,
            [(h.topic, h.partition, h.last_stable_offset, h.cycles) for h in carry.lso_history],
            LSO_HISTORY,
            handover,
        ),
        at_lso=_frame(
            spark,
            [(a.group, a.topic, a.partition, a.last_stable_offset, a.since_ms) for a in carry.at_lso],
            AT_LSO,
            handover,
        ),
    )


@dataclass(frozen=True, slots=True)
class GroupFrames:
    """The outputs of the group family, lazy; one field per :class:`GroupsResult` part."""

    lags: DataFrame
    partition_lags: DataFrame
    blocked: DataFrame
    groups: DataFrame
    by_application: DataFrame
    lso_history: DataFrame
    at_lso: DataFrame

    def named(self) -> dict[str, DataFrame]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def single(self) -> DataFrame:
        """Every output in one DataFrame ``(kind string, row string)``, each row as JSON, so
        that one action reads them all (feed its rows to :func:`groups_result`). One SQL
        union over the frames, not a chain of ``unionByName``: see ``compute._collect``."""
        frames: dict[str, Any] = self.named()
        union = "\nUNION ALL\n".join(
            f"SELECT '{name}' AS kind, to_json(struct(*)) AS row FROM {{{name}}}" for name in frames
        )
        return self.lags.sparkSession.sql(union, **frames)


def group_frames(
    inputs: GroupInputs,
    partitions: DataFrame,
    open_transactions: DataFrame,
    config: GroupsConfig,
    now_ms: int,
    rules: Sequence[AttributionRule] = BUILTIN_RULES,
    *,
    offsets_incomplete: bool = False,
) -> GroupFrames:
    """The group family's output DataFrames (no action runs here). ``offsets_incomplete``:
    the cycle's group collection lost a part (a ListGroups or OffsetFetch error), so a group
    absent from ``inputs.offsets`` may just not have been read."""
    c = F.col
    parts = partitions.select("topic", "partition", "high_watermark", "last_stable_offset")
    txns = open_transactions
    if "application" not in txns.columns:
        txns = txns.withColumn("application", application_column("transactional_id", rules))

    checks = inputs.checks.select(
        "topic",
        "partition",
        c("from_offset").alias("committed_offset"),
        c("to_offset").alias("last_stable_offset"),
        "consumable_records",
    )
    joined = inputs.offsets.join(build_side(parts), ["topic", "partition"], "left").join(
        build_side(checks), ["topic", "partition", "committed_offset", "last_stable_offset"], "left"
    )
    # A negative committed offset (none committed) counts for the group's summary only.
    known = (c("committed_offset") >= 0) & (c("last_stable_offset") >= 0) & (c("high_watermark") >= 0)
    consumable = F.when(
        known,
        F.coalesce(
            c("consumable_records"),
            F.greatest(F.lit(0).cast("long"), c("last_stable_offset") - c("committed_offset")),
        ),
    )
    blocked_lag = F.when(
        known,
        F.greatest(
            F.lit(0).cast("long"),
            c("high_watermark") - F.greatest(c("committed_offset"), c("last_stable_offset")),
        ),
    )
    at = (
        (c("last_stable_offset") >= 0)
        & (c("committed_offset") == c("last_stable_offset"))
        & (c("last_stable_offset") < c("high_watermark"))
    )
    # The offsets are read ONCE: one aggregation per (group, topic), which keeps apart the
    # partitions every other output needs row by row (those at the LSO; all of them when
    # partition series are on), made one leaf of the plan (a lazy local checkpoint). Every
    # output below reads that leaf, one partition like every table (tables.one_partition):
    # the 100k offset rows of 1000 groups x 100 partitions are scanned once instead of once
    # per output, and no output shuffles them again.
    #
    # The offsets are a frame of the code-generating session (session.codegen_session), so
    # this step, whose plan holds no clock, is planned there and runs compiled; the leaf is
    # then read by the rest of the family, planned by the cycle's own session. 1000 groups x
    # 100 partitions, cycles alternating in one session (median of 11): the family added
    # 1.16 s to a cycle interpreted, 0.70 s compiled; after the first two cycles nothing
    # more is compiled.
    apart = at | F.lit(config.per_partition)
    aggregated = (
        joined.select(
            "group",
            "topic",
            F.when(apart, c("partition")).alias("partition"),
            F.when(at, c("last_stable_offset")).alias("at_lso"),
            F.when(at, c("high_watermark")).alias("at_hwm"),
            consumable.alias("consumable"),
            blocked_lag.alias("blocked"),
            "coordinator_id",
            "group_state",
            c("pending_transactional_commit").cast("int").alias("unstable"),
        )
        # The group's state is a key, not a max(): a string aggregate has no fixed-width
        # buffer, so Spark would sort the 100k rows for it (a sort aggregate) instead of
        # hashing them. The collector gives every row of a group the same state; were two
        # states ever mixed, the rows without a partition would split in two, and every
        # output below sums or takes the max over them again, to the same values.
        .groupBy("group", "topic", "partition", "group_state")
        .agg(
            F.sum("consumable").alias("consumable_lag"),
            F.sum("blocked").alias("blocked_lag"),
            F.max("at_lso").alias("at_lso"),
            F.max("at_hwm").alias("at_hwm"),
            F.max("coordinator_id").alias("coordinator_id"),
            F.sum("unstable").alias("unstable"),
        )
        .localCheckpoint(eager=False)
    )
    by_topic = one_partition(rehome(aggregated, partitions.sparkSession))

    lags = (
        by_topic.groupBy("group", "topic")
        .agg(F.sum("consumable_lag").alias("consumable_lag"), F.sum("blocked_lag").alias("blocked_lag"))
        .where(c("consumable_lag").isNotNull())
        .orderBy((c("consumable_lag") + c("blocked_lag")).desc(), "group", "topic")
        .limit(config.max_group_series)
    )
    partition_limit = config.max_partition_series if config.per_partition else 0
    partition_lags = (
        by_topic.where(c("partition").isNotNull() & c("consumable_lag").isNotNull())
        .select("group", "topic", "partition", "consumable_lag", "blocked_lag")
        .orderBy((c("consumable_lag") + c("blocked_lag")).desc(), "group", "topic", "partition")
        .limit(partition_limit)
    )

    lso_history = _lso_history(parts, inputs.lso_history)
    at_lso = _at_lso(by_topic, inputs.at_lso, parts, offsets_incomplete, now_ms)
    blocked_all = _blocked(at_lso, lso_history, txns, config.blocked_after_cycles, now_ms)
    blocked = blocked_all.orderBy(c("blocked_ms").desc(), "group", "topic", "partition").limit(
        config.max_blocked
    )

    # One aggregation over the per-topic rows and the blocked partitions together (a group is
    # blocked only on partitions it has offsets for): no separate job for per-group counts.
    none_int = F.lit(None).cast("int")
    groups = (
        one_partition(
            by_topic.select(
                "group",
                "coordinator_id",
                "group_state",
                "unstable",
                F.lit(0).alias("blocked"),
            ).unionByName(
                blocked_all.select(
                    "group",
                    none_int.alias("coordinator_id"),
                    F.lit(None).cast("string").alias("group_state"),
                    F.lit(None).cast("long").alias("unstable"),
                    F.lit(1).alias("blocked"),
                )
            )
        )
        .groupBy("group")
        .agg(
            F.max("coordinator_id").alias("coordinator_id"),
            F.max("group_state").alias("group_state"),
            F.sum("blocked").alias("blocked_partitions"),
            F.sum("unstable").alias("unstable_offset_commits"),
        )
    )

    by_application = txns.groupBy(
        F.coalesce(c("application"), F.lit(UNKNOWN_APPLICATION)).alias("application"), "txn_class"
    ).agg(F.count(F.lit(1)).alias("count"))
    return GroupFrames(
        lags=lags,
        partition_lags=partition_lags,
        blocked=blocked,
        groups=groups,
        by_application=by_application,
        lso_history=lso_history,
        at_lso=at_lso.drop("high_watermark"),
    )


def _lso_history(parts: DataFrame, previous: DataFrame) -> DataFrame:
    """Partitions whose LSO is below the HWM, with how many consecutive cycles the LSO has
    been seen there unchanged. A partition whose offsets were not read this cycle keeps its
    row; a partition gone from the snapshot (or caught up) drops it."""
    c = F.col
    prev = previous.select(
        "topic", "partition", c("last_stable_offset").alias("prev_lso"), c("cycles").alias("prev_cycles")
    )
    joined = parts.join(build_side(prev), ["topic", "partition"], "left")
    unread = (c("last_stable_offset") < 0) | (c("high_watermark") < 0)
    open_gap = ~unread & (c("last_stable_offset") < c("high_watermark"))
    cycles = (
        F.when(unread, c("prev_cycles"))
        .when(c("prev_lso") == c("last_stable_offset"), c("prev_cycles") + 1)
        .otherwise(F.lit(1))
    )
    return joined.where((unread & c("prev_lso").isNotNull()) | open_gap).select(
        "topic",
        "partition",
        F.when(unread, c("prev_lso")).otherwise(c("last_stable_offset")).alias("last_stable_offset"),
        cycles.cast("int").alias("cycles"),
    )


def _at_lso(
    by_topic: DataFrame, previous: DataFrame, parts: DataFrame, offsets_incomplete: bool, now_ms: int
) -> DataFrame:
    """Group partitions whose committed offset is the LSO, with the LSO below the HWM, and
    since when they have been there (kept from the previous cycle while the LSO is the same).

    A previous row without evidence this cycle is kept as it was: its partition's offsets
    were not read, or its group's offsets were not (absent while the group collection lost a
    part: ``offsets_incomplete``) and the partition's LSO has not moved. Only evidence (the
    committed offset or the LSO moved, the group gone from a complete collection) ends it,
    so one lost cycle does not restart a blocked page's clock."""
    c = F.col
    keys = ["group", "topic", "partition"]
    prev = previous.select(*keys, c("last_stable_offset").alias("prev_lso"), "since_ms")
    at = by_topic.where(c("at_lso").isNotNull()).select(
        *keys,
        c("at_lso").alias("last_stable_offset"),
        c("at_hwm").alias("high_watermark"),
    )
    current = at.join(build_side(prev), keys, "left").select(
        *keys,
        "last_stable_offset",
        "high_watermark",
        F.when(c("prev_lso") == c("last_stable_offset"), c("since_ms"))
        .otherwise(F.lit(now_ms).cast("long"))
        .alias("since_ms"),
    )
    offsets = parts.select(
        "topic",
        "partition",
        c("high_watermark").alias("hwm"),
        c("last_stable_offset").alias("lso"),
        ((c("last_stable_offset") < 0) | (c("high_watermark") < 0)).alias("offsets_unread"),
    )
    carried = (
        in_place(prev)
        .join(build_side(at.select(*keys)), keys, "left_anti")
        .join(build_side(offsets), ["topic", "partition"], "left")
    )
    no_evidence = c("offsets_unread")
    if offsets_incomplete:
        # The group was not read, but its partition was: kept only while the LSO is where
        # the group waited (an LSO that moved ends the wait whatever the group did).
        read = by_topic.select("group").distinct().select("group", F.lit(True).alias("group_read"))
        carried = carried.join(build_side(read), "group", "left")
        no_evidence = no_evidence | (c("group_read").isNull() & (c("lso") == c("prev_lso")))
    kept = carried.where(no_evidence).select(
        *keys,
        c("prev_lso").alias("last_stable_offset"),
        F.coalesce(c("hwm"), F.lit(-1).cast("long")).alias("high_watermark"),
        "since_ms",
    )
    return one_partition(current.unionByName(kept))


def _blocked(
    at_lso: DataFrame, history: DataFrame, txns: DataFrame, after_cycles: int, now_ms: int
) -> DataFrame:
    c = F.col
    stuck = history.where(c("cycles") >= after_cycles).select("topic", "partition", "last_stable_offset")
    # The transaction AT the LSO: the open one whose first offset is the LSO. At most one
    # can start at an offset; min() over a struct picks it deterministically all the same.
    at_start = txns.groupBy("topic", "partition", c("start_offset").alias("last_stable_offset")).agg(
        F.min(
            F.struct(
                c("producer_id"), c("transactional_id"), c("txn_class"), c("duration_ms"), c("application")
            )
        ).alias("txn")
    )
    return (
        in_place(at_lso.join(build_side(stuck), ["topic", "partition", "last_stable_offset"]))
        # the open transactions come from the classification, whose estimate passes the bound
        .join(build_side(in_place(at_start)), ["topic", "partition", "last_stable_offset"], "left")
        .select(
            "group",
            "topic",
            "partition",
            c("last_stable_offset").alias("committed_offset"),
            "last_stable_offset",
            "high_watermark",
            "since_ms",
            F.greatest(F.lit(0).cast("long"), F.lit(now_ms) - c("since_ms")).alias("blocked_ms"),
            c("txn.transactional_id").alias("transactional_id"),
            F.coalesce(c("txn.producer_id"), F.lit(-1).cast("long")).alias("producer_id"),
            F.when(c("txn").isNotNull(), c("last_stable_offset"))
            .otherwise(F.lit(-1).cast("long"))
            .alias("start_offset"),
            c("txn.txn_class").alias("txn_class"),
            F.coalesce(c("txn.duration_ms"), F.lit(-1).cast("long")).alias("txn_duration_ms"),
            c("txn.application").alias("application"),
        )
    )


def groups_result(rows: Iterable[Any]) -> GroupsResult:
    """Records from the rows of :meth:`GroupFrames.single` (``(kind, json)`` pairs)."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_kind.setdefault(str(row["kind"]), []).append(json.loads(row["row"]))
    return groups_result_from_dicts(by_kind)


def groups_result_from_dicts(by_kind: Mapping[str, Sequence[Mapping[str, Any]]]) -> GroupsResult:
    """Records from each output's rows as dicts (``Row.asDict()`` works too)."""

    def rows(kind: str) -> Sequence[Mapping[str, Any]]:
        return by_kind.get(kind, ())

    def lag(r: Mapping[str, Any]) -> GroupLag:
        return GroupLag(
            group=r["group"],
            topic=r["topic"],
            consumable_lag=int(r["consumable_lag"]),
            blocked_lag=int(r["blocked_lag"]),
            partition=int(r.get("partition", -1)),
        )

    def blocked(r: Mapping[str, Any]) -> BlockedGroupPartition:
        cls = r.get("txn_class")
        return BlockedGroupPartition(
            group=r["group"],
            topic=r["topic"],
            partition=int(r["partition"]),
            committed_offset=int(r["committed_offset"]),
            last_stable_offset=int(r["last_stable_offset"]),
            high_watermark=int(r["high_watermark"]),
            blocked_since_ms=int(r["since_ms"]),
            blocked_ms=int(r["blocked_ms"]),
            transactional_id=r.get("transactional_id"),
            producer_id=int(r.get("producer_id", -1)),
            start_offset=int(r.get("start_offset", -1)),
            txn_class=TxnClass(cls) if cls is not None else None,
            txn_duration_ms=int(r.get("txn_duration_ms", -1)),
            application=r.get("application"),
        )

    return GroupsResult(
        lags=tuple(sorted((lag(r) for r in rows("lags")), key=lambda x: (x.group, x.topic))),
        partition_lags=tuple(
            sorted((lag(r) for r in rows("partition_lags")), key=lambda x: (x.group, x.topic, x.partition))
        ),
        blocked=tuple(
            sorted((blocked(r) for r in rows("blocked")), key=lambda x: (x.group, x.topic, x.partition))
        ),
        groups=tuple(
            sorted(
                (
                    GroupSummary(
                        group=r["group"],
                        # -1: a group kept blocked through a cycle that did not read it
                        coordinator_id=int(r.get("coordinator_id", -1)),
                        group_state=r.get("group_state") or "",
                        blocked_partitions=int(r["blocked_partitions"]),
                        unstable_offset_commits=int(r.get("unstable_offset_commits", 0)),
                    )
                    for r in rows("groups")
                ),
                key=lambda x: x.group,
            )
        ),
        by_application=tuple(
            sorted(
                (
                    ApplicationTransactions(
                        application=r["application"],
                        txn_class=TxnClass(r["txn_class"]),
                        count=int(r["count"]),
                    )
                    for r in rows("by_application")
                ),
                key=lambda x: (x.application, x.txn_class),
            )
        ),
        carry=GroupsCarry(
            lso_history=tuple(
                sorted(
                    (
                        LsoHistory(
                            topic=r["topic"],
                            partition=int(r["partition"]),
                            last_stable_offset=int(r["last_stable_offset"]),
                            cycles=int(r["cycles"]),
                        )
                        for r in rows("lso_history")
                    ),
                    key=lambda x: (x.topic, x.partition),
                )
            ),
            at_lso=tuple(
                sorted(
                    (
                        GroupAtLso(
                            group=r["group"],
                            topic=r["topic"],
                            partition=int(r["partition"]),
                            last_stable_offset=int(r["last_stable_offset"]),
                            since_ms=int(r["since_ms"]),
                        )
                        for r in rows("at_lso")
                    ),
                    key=lambda x: (x.group, x.topic, x.partition),
                )
            ),
        ),
    )


def compute_groups(
    spark: SparkSession,
    offsets: Sequence[GroupOffset],
    partitions: DataFrame,
    open_transactions: DataFrame,
    config: GroupsConfig,
    now_ms: int,
    *,
    checks: Sequence[ConsumableCheck] = (),
    carry: GroupsCarry | None = None,
    rules: Sequence[AttributionRule] = BUILTIN_RULES,
    offsets_incomplete: bool = False,
) -> GroupsResult:
    """The whole group family in one Spark action."""
    with Handover(spark) as handover:
        inputs = group_input_frames(spark, offsets, checks, carry, handover)
        frames = group_frames(
            inputs,
            partitions,
            open_transactions,
            config,
            now_ms,
            rules,
            offsets_incomplete=offsets_incomplete,
        )
        return groups_result(frames.single().collect())
