"""The consumer-group family on Spark: lag split for read_committed and blocked consumers.

Inputs (DataFrames; :func:`group_input_frames` builds the group-side ones from records):

* group offsets: ``group, topic, partition, committed_offset, coordinator_id, group_state,
  pending_transactional_commit`` (:class:`~exporter.model.GroupOffset`);
* partitions: ``topic, partition, high_watermark, last_stable_offset`` (-1: unknown);
* classified open transactions: ``topic, partition, start_offset, transactional_id,
  producer_id, txn_class, duration_ms`` and ``application`` (added from the attribution rules
  when absent), to name the transaction a group waits for;
* consumable checks (:class:`~exporter.model.ConsumableCheck`: what a read_committed consumer
  gets between a committed offset and the LSO, read from the batches) and the previous
  cycle's :class:`~exporter.model.GroupsCarry`.

Definitions (docs/groups.md):

* ``consumable`` lag of a group partition: when a consumable check read the batches between
  exactly that committed offset and that LSO, the number of records a read_committed
  consumer gets there (0 when only transaction markers or aborted data lie before the LSO);
  else LSO - committed, never negative. Either is an *upper bound* (counted in
  ``upper_bound_partitions``) unless the check read every batch up to the LSO or the group is
  at or past the LSO.
* ``blocked`` lag: HWM - max(committed, LSO), never negative: the records behind open
  transactions the group has not read. A read_uncommitted consumer past the LSO has read part
  of them, so only the rest counts.
* A group partition is *at the LSO* when nothing is consumable before it: committed == LSO,
  or committed < LSO with a check that read every batch between and found nothing a
  read_committed consumer gets (the markers of the transactions it read, aborted data), or
  the same committed offset and LSO as a previous cycle that found that. A committed offset
  past the LSO is a read_uncommitted consumer: never at the LSO.
* It is *blocked by a transaction* when it is at the LSO, LSO < HWM, and the LSO has been
  seen unchanged (while below the HWM) in at least ``blocked_after_cycles`` consecutive
  cycles. The finding names the open transaction whose start offset is the LSO, and the group
  is blocked since the first cycle it was seen at that LSO.

:func:`group_frames` builds lazy frames only (the offsets' aggregation with DataFrame steps,
the rest one SQL statement); :meth:`GroupFrames.single` reads every output in one DataFrame so
that the caller reads everything in one action, and :func:`groups_result` turns
its rows into records. :func:`compute_groups` does both, for callers with no action of their
own to share.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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
from exporter.pipeline.tables import UNREACHED_LIMIT, Handover, build_side, one_partition


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
    ("exact", _BOOL, False),
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
    ("committed_offset", _LONG, False),
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
            [
                (c.topic, c.partition, c.from_offset, c.to_offset, c.consumable_records, c.exact)
                for c in checks
            ],
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
            [
                (a.group, a.topic, a.partition, a.last_stable_offset, a.since_ms, a.committed_offset)
                for a in carry.at_lso
            ],
            AT_LSO,
            handover,
        ),
    )


@dataclass(frozen=True, slots=True)
class GroupFrames:
    """The outputs of the group family, lazy: one SQL query per :class:`GroupsResult` part,
    over the tables of a ``WITH`` clause, which read the family's inputs (``sources``,
    DataFrames by placeholder name); :func:`_family_sql` writes both."""

    sources: Mapping[str, DataFrame]
    tables: str
    queries: Mapping[str, str]

    def frame(self, name: str) -> DataFrame:
        """One output as a DataFrame."""
        return self._sql(f"{self.tables}\n{self.queries[name]}")

    def single(self) -> DataFrame:
        """Every output in one DataFrame ``(kind string, row string)``, each row as JSON, so
        that one action reads them all (feed its rows to :func:`groups_result`)."""
        union = "\nUNION ALL\n".join(
            f"SELECT '{name}' AS kind, to_json(struct(*)) AS row FROM (\n{query}\n)"
            for name, query in self.queries.items()
        )
        return self._sql(f"{self.tables}\n{union}")

    def _sql(self, query: str) -> DataFrame:
        sources: dict[str, Any] = dict(self.sources)
        session: SparkSession = next(iter(self.sources.values())).sparkSession
        return session.sql(query, **sources)


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
    """The group family's outputs (no action runs here). ``offsets_incomplete``: the cycle's
    group collection lost a part (a ListGroups or OffsetFetch error), so a group absent from
    ``inputs.offsets`` may just not have been read."""
    txns = open_transactions
    if "application" not in txns.columns:
        txns = txns.withColumn("application", application_column("transactional_id", rules))
    by_topic = one_partition(rehome(_aggregated(inputs, partitions, config), partitions.sparkSession))
    tables, queries = _family_sql(config, now_ms, offsets_incomplete)
    return GroupFrames(
        sources={
            "by_topic": by_topic,
            "partitions": partitions,
            "txns": txns,
            "previous_history": inputs.lso_history,
            "previous_at_lso": inputs.at_lso,
        },
        tables=tables,
        queries=queries,
    )


def _aggregated(inputs: GroupInputs, partitions: DataFrame, config: GroupsConfig) -> DataFrame:
    """The offsets joined with their partitions (and the consumable checks), aggregated per
    (group, topic), a lazy local checkpoint of the code-generating session."""
    c = F.col
    parts = partitions.select("topic", "partition", "high_watermark", "last_stable_offset")
    checks = inputs.checks.select(
        "topic",
        "partition",
        c("from_offset").alias("committed_offset"),
        c("to_offset").alias("last_stable_offset"),
        "consumable_records",
        c("exact").alias("check_exact"),
    )
    joined = inputs.offsets.join(build_side(parts), ["topic", "partition"], "left").join(
        build_side(checks), ["topic", "partition", "committed_offset", "last_stable_offset"], "left"
    )
    # A negative committed offset (none committed) counts for the group's summary only.
    known = (c("committed_offset") >= 0) & (c("last_stable_offset") >= 0) & (c("high_watermark") >= 0)
    behind = known & (c("committed_offset") < c("last_stable_offset"))
    read_to_lso = F.coalesce(c("check_exact"), F.lit(False))
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
    # An open transaction holds the LSO below the HWM; the group is at it when nothing it
    # could read lies before it (committed there, or only markers and aborted data between:
    # a consumer that commits its last record + 1 on a transactional topic), undecided when
    # the batches between were not all read this cycle (the SQL keeps such a row at the LSO
    # when the previous cycle saw it there with the same committed offset).
    held = known & (c("last_stable_offset") < c("high_watermark"))
    at = held & (
        (c("committed_offset") == c("last_stable_offset"))
        | (behind & read_to_lso & (c("consumable_records") == 0))
    )
    undecided = held & behind & ~read_to_lso
    upper_bound = F.when(known, (behind & ~read_to_lso).cast("int"))
    # The offsets are read ONCE: one aggregation per (group, topic), which keeps apart the
    # partitions every other output needs row by row (those at the LSO or undecided; all when
    # partition series are on), made one leaf of the plan (a lazy local checkpoint). Every
    # output reads that leaf, one partition like every table (tables.one_partition): the
    # 100k offset rows of 1000 groups x 100 partitions are scanned once instead of once per
    # output, and no output shuffles them again.
    #
    # The offsets are a frame of the code-generating session (session.codegen_session), so
    # this step, whose plan holds no clock, is planned there and runs compiled; the leaf is
    # then read by the rest of the family, planned by the cycle's own session. 1000 groups x
    # 100 partitions, cycles alternating in one session (median of 11): the family added
    # 1.16 s to a cycle interpreted, 0.70 s compiled; after the first two cycles nothing
    # more is compiled.
    apart = at | undecided | F.lit(config.per_partition)
    return (
        joined.select(
            "group",
            "topic",
            F.when(apart, c("partition")).alias("partition"),
            F.when(at, c("last_stable_offset")).alias("at_lso"),
            F.when(undecided, c("last_stable_offset")).alias("undecided_lso"),
            F.when(at | undecided, c("high_watermark")).alias("at_hwm"),
            F.when(at | undecided, c("committed_offset")).alias("at_committed"),
            consumable.alias("consumable"),
            blocked_lag.alias("blocked"),
            upper_bound.alias("upper_bound"),
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
            F.sum("upper_bound").alias("upper_bound_partitions"),
            F.max("at_lso").alias("at_lso"),
            F.max("undecided_lso").alias("undecided_lso"),
            F.max("at_hwm").alias("at_hwm"),
            F.max("at_committed").alias("at_committed"),
            F.max("coordinator_id").alias("coordinator_id"),
            F.sum("unstable").alias("unstable"),
        )
        .localCheckpoint(eager=False)
    )


def _family_sql(config: GroupsConfig, now_ms: int, offsets_incomplete: bool) -> tuple[str, dict[str, str]]:
    """The family after the aggregation, as SQL: a ``WITH`` clause naming its tables, and one
    query per output over them (placeholders: the :class:`GroupFrames` sources).

    SQL rather than DataFrame steps: a classic session analyses every step eagerly over the
    whole plan beneath it, with a round trip to the JVM per column and per step. The steps
    took ~690 round trips and ~0.26 s of plan building a cycle at 1000 groups x 100
    partitions; the statement is analysed once. Every table of the ``WITH`` clause is
    deterministic, so Spark inlines it where it is read, and the physical plan is the one
    the steps built.

    Hints as in ``tables``: ``SHUFFLE_HASH`` names a join's small side (``build_side``),
    ``COALESCE(1)`` is ``one_partition``, and ``COALESCE(1)`` under the unreached ``LIMIT``
    is ``in_place``. Only integers (the config's and the clock) are written into the text."""
    keys = "`group`, topic, `partition`"
    unread = "(last_stable_offset < 0 OR high_watermark < 0)"
    never = UNREACHED_LIMIT
    tables: dict[str, str] = {
        "by_topic": "SELECT * FROM {by_topic}",
        "txns": "SELECT * FROM {txns}",
        "parts": "SELECT topic, `partition`, high_watermark, last_stable_offset FROM {partitions}",
    }
    # Partitions whose LSO is below the HWM, with how many consecutive cycles the LSO has been
    # seen there unchanged. A partition whose offsets were not read this cycle keeps its row;
    # a partition gone from the snapshot (or caught up) drops it.
    tables["lso_history"] = f"""
    SELECT topic, `partition`,
      CASE WHEN {unread} THEN prev_lso ELSE last_stable_offset END AS last_stable_offset,
      CAST(CASE WHEN {unread} THEN prev_cycles
        WHEN prev_lso = last_stable_offset THEN prev_cycles + 1 ELSE 1 END AS INT) AS cycles
    FROM (
      SELECT /*+ SHUFFLE_HASH(prev) */ * FROM parts LEFT JOIN (
        SELECT topic, `partition`, last_stable_offset AS prev_lso, cycles AS prev_cycles
        FROM {{previous_history}}
      ) prev USING (topic, `partition`)
    )
    WHERE ({unread} AND prev_lso IS NOT NULL) OR (NOT {unread} AND last_stable_offset < high_watermark)"""
    # Group partitions at the LSO (nothing consumable before it), with the LSO below the
    # HWM, and since when they have been there (kept from the previous cycle while the LSO is
    # the same). A row whose batches were not all read this cycle (``undecided``) is at the
    # LSO only when the previous cycle saw it there with the same committed offset: nothing
    # before an LSO that has not moved can become consumable.
    tables["previous_at"] = (
        f"SELECT {keys}, last_stable_offset AS prev_lso, since_ms, committed_offset AS prev_committed "
        "FROM {previous_at_lso}"
    )
    tables["at_now"] = f"""
    SELECT {keys}, COALESCE(at_lso, undecided_lso) AS last_stable_offset, at_hwm AS high_watermark,
      at_committed AS committed_offset, at_lso IS NOT NULL AS decided
    FROM by_topic WHERE at_lso IS NOT NULL OR undecided_lso IS NOT NULL"""
    tables["current_at"] = f"""
    SELECT {keys}, last_stable_offset, high_watermark, committed_offset, at_since AS since_ms FROM (
      SELECT /*+ SHUFFLE_HASH(prev) */ *,
        CASE WHEN prev_lso = last_stable_offset THEN since_ms ELSE CAST({now_ms} AS BIGINT) END AS at_since
      FROM at_now LEFT JOIN previous_at prev USING ({keys})
    ) WHERE decided OR (prev_lso = last_stable_offset
      AND (prev_committed = committed_offset OR prev_committed < 0))"""
    # A previous row without evidence this cycle is kept as it was: its partition's offsets
    # were not read, or its group's offsets were not (absent while the group collection lost
    # a part: ``offsets_incomplete``) and the partition's LSO has not moved. Only evidence
    # (the committed offset or the LSO moved, the group gone from a complete collection) ends
    # it, so one lost cycle does not restart a blocked page's clock.
    read_check, read_hint, no_evidence = "", "", "offsets_unread"
    if offsets_incomplete:
        # The group was not read, but its partition was: kept only while the LSO is where
        # the group waited (an LSO that moved ends the wait whatever the group did).
        read_check = """
    LEFT JOIN (SELECT `group`, TRUE AS group_read FROM (SELECT DISTINCT `group` FROM by_topic)) group_read
      USING (`group`)"""
        read_hint = ", SHUFFLE_HASH(group_read)"
        no_evidence = "offsets_unread OR (group_read IS NULL AND lso = prev_lso)"
    tables["carried_at"] = f"""
    SELECT /*+ SHUFFLE_HASH(now_keys), SHUFFLE_HASH(offsets){read_hint} */ *
    FROM (SELECT /*+ COALESCE(1) */ * FROM previous_at LIMIT {never}) carried
    LEFT ANTI JOIN (SELECT {keys} FROM at_now) now_keys USING ({keys})
    LEFT JOIN (
      SELECT topic, `partition`, high_watermark AS hwm, last_stable_offset AS lso, {unread} AS offsets_unread
      FROM parts
    ) offsets USING (topic, `partition`){read_check}"""
    tables["at_lso"] = f"""
    SELECT /*+ COALESCE(1) */ * FROM (
      SELECT * FROM current_at
      UNION ALL
      SELECT {keys}, prev_lso AS last_stable_offset,
        COALESCE(hwm, CAST(-1 AS BIGINT)) AS high_watermark, prev_committed AS committed_offset, since_ms
      FROM carried_at WHERE {no_evidence}
    )"""
    # The transaction AT the LSO: the open one whose first offset is the LSO. At most one can
    # start at an offset; min() over a struct picks it deterministically all the same.
    tables["at_start"] = """
    SELECT topic, `partition`, start_offset AS last_stable_offset,
      MIN(STRUCT(producer_id, transactional_id, txn_class, duration_ms, application)) AS txn
    FROM txns GROUP BY topic, `partition`, start_offset"""
    # The open transactions come from the classification, whose size estimate passes the
    # bound of a join kept in place: both sides of the second join go through in_place.
    tables["blocked_all"] = f"""
    SELECT /*+ SHUFFLE_HASH(txn_at_start) */
      `group`, topic, `partition`,
      CASE WHEN committed_offset >= 0 THEN committed_offset ELSE last_stable_offset END AS committed_offset,
      last_stable_offset,
      high_watermark, since_ms,
      GREATEST(CAST(0 AS BIGINT), {now_ms} - since_ms) AS blocked_ms,
      txn.transactional_id AS transactional_id,
      COALESCE(txn.producer_id, CAST(-1 AS BIGINT)) AS producer_id,
      CASE WHEN txn IS NOT NULL THEN last_stable_offset ELSE CAST(-1 AS BIGINT) END AS start_offset,
      txn.txn_class AS txn_class,
      COALESCE(txn.duration_ms, CAST(-1 AS BIGINT)) AS txn_duration_ms,
      txn.application AS application
    FROM (
      SELECT /*+ COALESCE(1) */ * FROM (
        SELECT /*+ SHUFFLE_HASH(stuck) */ * FROM at_lso JOIN (
          SELECT topic, `partition`, last_stable_offset FROM lso_history
          WHERE cycles >= {config.blocked_after_cycles}
        ) stuck USING (topic, `partition`, last_stable_offset)
      ) LIMIT {never}
    ) at_lso_stuck
    LEFT JOIN (SELECT /*+ COALESCE(1) */ * FROM at_start LIMIT {never}) txn_at_start
      USING (topic, `partition`, last_stable_offset)"""
    partition_limit = config.max_partition_series if config.per_partition else 0
    queries = {
        "lags": f"""
    SELECT * FROM (
      SELECT `group`, topic, SUM(consumable_lag) AS consumable_lag, SUM(blocked_lag) AS blocked_lag,
        SUM(upper_bound_partitions) AS upper_bound_partitions
      FROM by_topic GROUP BY `group`, topic
    ) WHERE consumable_lag IS NOT NULL
    ORDER BY consumable_lag + blocked_lag DESC, `group`, topic
    LIMIT {config.max_group_series}""",
        "partition_lags": f"""
    SELECT {keys}, consumable_lag, blocked_lag, upper_bound_partitions FROM by_topic
    WHERE `partition` IS NOT NULL AND consumable_lag IS NOT NULL
    ORDER BY consumable_lag + blocked_lag DESC, {keys}
    LIMIT {partition_limit}""",
        "blocked": f"SELECT * FROM blocked_all ORDER BY blocked_ms DESC, {keys} LIMIT {config.max_blocked}",
        # One aggregation over the per-topic rows and the blocked partitions together (a group
        # is blocked only on partitions it has offsets for): no separate job for per-group
        # counts.
        "groups": """
    SELECT `group`, MAX(coordinator_id) AS coordinator_id, MAX(group_state) AS group_state,
      SUM(blocked) AS blocked_partitions, SUM(unstable) AS unstable_offset_commits
    FROM (
      SELECT /*+ COALESCE(1) */ * FROM (
        SELECT `group`, coordinator_id, group_state, unstable, 0 AS blocked FROM by_topic
        UNION ALL
        SELECT `group`, CAST(NULL AS INT) AS coordinator_id, CAST(NULL AS STRING) AS group_state,
          CAST(NULL AS BIGINT) AS unstable, 1 AS blocked
        FROM blocked_all
      )
    ) GROUP BY `group`""",
        "lso_history": "SELECT * FROM lso_history",
        "at_lso": f"SELECT {keys}, last_stable_offset, since_ms, committed_offset FROM at_lso",
    }
    with_clause = "WITH\n" + ",\n".join(f"{name} AS ({query}\n)" for name, query in tables.items())
    return with_clause, queries


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
            upper_bound_partitions=int(r.get("upper_bound_partitions") or 0),
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
                            committed_offset=int(r.get("committed_offset", -1)),
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
