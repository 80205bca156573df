"""The consumer-group family: lag split for read_committed and blocked consumers.

Inputs, each a table of the round (keyed by cluster):

* the snapshot's group offsets (:class:`~exporter.model.GroupOffset`) and consumable checks
  (:class:`~exporter.model.ConsumableCheck`: what a read_committed consumer gets between a
  committed offset and the LSO, read from the batches);
* the partitions' offsets (``high_watermark``, ``last_stable_offset``; -1: unknown);
* the classified open transactions (``start_offset``, ``transactional_id``, ``producer_id``,
  ``txn_class``, ``duration_ms``, ``application``), to name the transaction a group waits for;
* the previous cycle's :class:`~exporter.model.GroupsCarry` (``lso_history``, ``at_lso``).

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

The offsets' aggregation is DataFrame steps, run compiled (``session.compiled_leaf``); the
rest is one SQL statement over the declared tables (:func:`_family_sql`), keyed by cluster
like every family, each cluster's config and clock as values of the round
(``Context.sql_value``).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from exporter.config.groups import BUILTIN_RULES, AttributionRule, GroupsConfig
from exporter.model import (
    BlockedGroupPartition,
    ClusterSnapshot,
    CollectionError,
    ConsumableCheck,
    Finding,
    GroupAtLso,
    GroupLag,
    GroupOffset,
    GroupsCarry,
    GroupsResult,
    GroupSummary,
    LsoHistory,
    PipelineMemory,
)
from exporter.pipeline import transport
from exporter.pipeline.families.attribution import round_application_column
from exporter.pipeline.families.base import (
    Assembly,
    ClusterRun,
    Context,
    Family,
    Input,
    Output,
    Parts,
    Rows,
)
from exporter.pipeline.session import compiled_leaf
from exporter.pipeline.tables import (
    CLUSTER,
    UNREACHED_LIMIT,
    Handover,
    build_side,
    in_plan,
    keyed,
    keyed_arrow,
    keyed_schema,
    one_partition,
    records_of,
)

R = TypeVar("R")

#: The APIs of the group collection: a failure may leave groups out of the snapshot.
GROUP_APIS = frozenset({"ListGroups", "OffsetFetch"})


def _enabled(run: ClusterRun) -> bool:
    """The family runs every cycle when groups are on, a cycle that read no group offsets
    too: groups waiting at an LSO are kept through a lost group collection (their blocked
    series and page go on) or ended by a complete one that no longer shows them, the LSO
    history goes on, and the families are on the page (empty) as soon as groups are on."""
    return run.groups is not None and run.groups.enabled


def _config(run: ClusterRun) -> GroupsConfig:
    return run.groups if run.groups is not None else GroupsConfig()


def _offsets_incomplete(run: ClusterRun) -> bool:
    """The cycle's group collection lost a part (a ListGroups or OffsetFetch error), so a
    group absent from the offsets may just not have been read."""
    return any(e.api in GROUP_APIS for e in run.snapshot.errors)


def _aggregated(ctx: Context) -> DataFrame:
    """The offsets joined with their partitions (and the consumable checks), aggregated per
    (group, topic), one leaf of the plan run compiled (:func:`compiled_leaf`)."""
    c = F.col
    parts = ctx["partitions"].select(CLUSTER, "topic", "partition", "high_watermark", "last_stable_offset")
    checks = ctx["consumable_checks"].select(
        CLUSTER,
        "topic",
        "partition",
        c("from_offset").alias("committed_offset"),
        c("to_offset").alias("last_stable_offset"),
        "consumable_records",
        c("exact").alias("check_exact"),
    )
    per_partition = ctx.value(lambda run: _config(run).per_partition, "boolean")

    def step(session: SparkSession) -> DataFrame:
        offsets = ctx.frame_in("group_offsets", session)
        joined = offsets.join(build_side(parts), keyed("topic", "partition"), "left").join(
            build_side(checks), keyed("topic", "partition", "committed_offset", "last_stable_offset"), "left"
        )
        return _per_topic(joined, per_partition)

    return one_partition(ctx.keep(compiled_leaf(ctx.spark, step)))


def _per_topic(joined: DataFrame, per_partition: Any) -> DataFrame:
    c = F.col
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
    # partition series are on), made one leaf of the plan. Every output reads that leaf, one
    # partition like every table (tables.one_partition): the 100k offset rows of 1000 groups
    # x 100 partitions are scanned once instead of once per output, and no output shuffles
    # them again.
    apart = at | undecided | per_partition
    return (
        joined.select(
            CLUSTER,
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
        .groupBy(*keyed("group", "topic", "partition", "group_state"))
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
    )


def _family_sql(ctx: Context) -> tuple[str, dict[str, str]]:
    """The family after the aggregation, as SQL: a ``WITH`` clause naming its tables, and one
    query per output over them (placeholders: the frames of :func:`_frames`).

    SQL rather than DataFrame steps: a classic session analyses every step eagerly over the
    whole plan beneath it, with a round trip to the JVM per column and per step. The steps
    took ~690 round trips and ~0.26 s of plan building a cycle at 1000 groups x 100
    partitions; the statement is analysed once. Every table of the ``WITH`` clause is
    deterministic, so Spark inlines it where it is read, and the physical plan is the one
    the steps built.

    Every join and aggregation is keyed by the cluster, and every limit is a limit per
    cluster (``ROW_NUMBER() OVER (PARTITION BY cluster ...)``). Hints as in ``tables``:
    ``SHUFFLE_HASH`` names a join's small side (``build_side``), ``COALESCE(1)`` is
    ``one_partition``, and ``COALESCE(1)`` under the unreached ``LIMIT`` is ``in_place``.
    Only integers and booleans (each cluster's config and clock) are written into the text."""
    keys = f"{CLUSTER}, `group`, topic, `partition`"
    on_partition = f"{CLUSTER}, topic, `partition`"
    unread = "(last_stable_offset < 0 OR high_watermark < 0)"
    never = UNREACHED_LIMIT
    now = ctx.sql_value(lambda run: run.now_ms)
    blocked_after = ctx.sql_value(lambda run: _config(run).blocked_after_cycles)
    tables: dict[str, str] = {
        "by_topic": "SELECT * FROM {by_topic}",
        "txns": "SELECT * FROM {txns}",
        "parts": f"SELECT {on_partition}, high_watermark, last_stable_offset FROM {{partitions}}",
    }
    # Partitions whose LSO is below the HWM, with how many consecutive cycles the LSO has been
    # seen there unchanged. A partition whose offsets were not read this cycle keeps its row;
    # a partition gone from the snapshot (or caught up) drops it.
    tables["lso_history"] = f"""
    SELECT {on_partition},
      CASE WHEN {unread} THEN prev_lso ELSE last_stable_offset END AS last_stable_offset,
      CASE WHEN {unread} THEN prev_cycles
        WHEN prev_lso = last_stable_offset THEN prev_cycles + 1 ELSE CAST(1 AS BIGINT) END AS cycles
    FROM (
      SELECT /*+ SHUFFLE_HASH(prev) */ * FROM parts LEFT JOIN (
        SELECT {on_partition}, last_stable_offset AS prev_lso, cycles AS prev_cycles
        FROM {{previous_history}}
      ) prev USING ({on_partition})
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
        CASE WHEN prev_lso = last_stable_offset THEN since_ms ELSE {now} END AS at_since
      FROM at_now LEFT JOIN previous_at prev USING ({keys})
    ) WHERE decided OR (prev_lso = last_stable_offset
      AND (prev_committed = committed_offset OR prev_committed < 0))"""
    # A previous row without evidence this cycle is kept as it was: its partition's offsets
    # were not read, or its group's offsets were not (absent while the group collection lost
    # a part: ``_offsets_incomplete``) and the partition's LSO has not moved. Only evidence
    # (the committed offset or the LSO moved, the group gone from a complete collection) ends
    # it, so one lost cycle does not restart a blocked page's clock.
    read_check, read_hint, no_evidence = "", "", "offsets_unread"
    if ctx.any(_offsets_incomplete):
        # The group was not read, but its partition was: kept only while the LSO is where
        # the group waited (an LSO that moved ends the wait whatever the group did).
        read_check = f"""
    LEFT JOIN (
      SELECT {CLUSTER}, `group`, TRUE AS group_read FROM (SELECT DISTINCT {CLUSTER}, `group` FROM by_topic)
    ) group_read USING ({CLUSTER}, `group`)"""
        read_hint = ", SHUFFLE_HASH(group_read)"
        incomplete = ctx.sql_value(_offsets_incomplete)
        no_evidence = f"offsets_unread OR ({incomplete} AND group_read IS NULL AND lso = prev_lso)"
    tables["carried_at"] = f"""
    SELECT /*+ SHUFFLE_HASH(now_keys), SHUFFLE_HASH(offsets){read_hint} */ *
    FROM (SELECT /*+ COALESCE(1) */ * FROM previous_at LIMIT {never}) carried
    LEFT ANTI JOIN (SELECT {keys} FROM at_now) now_keys USING ({keys})
    LEFT JOIN (
      SELECT {on_partition}, high_watermark AS hwm, last_stable_offset AS lso, {unread} AS offsets_unread
      FROM parts
    ) offsets USING ({on_partition}){read_check}"""
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
    tables["at_start"] = f"""
    SELECT {on_partition}, start_offset AS last_stable_offset,
      MIN(STRUCT(producer_id, transactional_id, txn_class, duration_ms, application)) AS txn
    FROM txns GROUP BY {on_partition}, start_offset"""
    # The open transactions come from the classification, whose size estimate passes the
    # bound of a join kept in place: both sides of the second join go through in_place.
    tables["blocked_all"] = f"""
    SELECT /*+ SHUFFLE_HASH(txn_at_start) */
      {keys},
      CASE WHEN committed_offset >= 0 THEN committed_offset ELSE last_stable_offset END AS committed_offset,
      last_stable_offset,
      high_watermark, since_ms AS blocked_since_ms,
      GREATEST(CAST(0 AS BIGINT), {now} - since_ms) AS blocked_ms,
      txn.transactional_id AS transactional_id,
      COALESCE(txn.producer_id, CAST(-1 AS BIGINT)) AS producer_id,
      CASE WHEN txn IS NOT NULL THEN last_stable_offset ELSE CAST(-1 AS BIGINT) END AS start_offset,
      txn.txn_class AS txn_class,
      COALESCE(txn.duration_ms, CAST(-1 AS BIGINT)) AS txn_duration_ms,
      txn.application AS application
    FROM (
      SELECT /*+ COALESCE(1) */ * FROM (
        SELECT /*+ SHUFFLE_HASH(stuck) */ * FROM at_lso JOIN (
          SELECT {on_partition}, last_stable_offset FROM lso_history
          WHERE cycles >= {blocked_after}
        ) stuck USING ({on_partition}, last_stable_offset)
      ) LIMIT {never}
    ) at_lso_stuck
    LEFT JOIN (SELECT /*+ COALESCE(1) */ * FROM at_start LIMIT {never}) txn_at_start
      USING ({on_partition}, last_stable_offset)"""
    queries = {
        "lags": _first(
            ctx,
            lambda run: _config(run).max_group_series,
            f"""
      SELECT * FROM (
        SELECT {CLUSTER}, `group`, topic, CAST(-1 AS BIGINT) AS `partition`,
          SUM(consumable_lag) AS consumable_lag, SUM(blocked_lag) AS blocked_lag,
          COALESCE(SUM(upper_bound_partitions), CAST(0 AS BIGINT)) AS upper_bound_partitions
        FROM by_topic GROUP BY {CLUSTER}, `group`, topic
      ) WHERE consumable_lag IS NOT NULL""",
            "consumable_lag + blocked_lag DESC, `group`, topic",
        ),
        "partition_lags": _first(
            ctx,
            lambda run: _config(run).max_partition_series if _config(run).per_partition else 0,
            f"""
      SELECT {keys}, consumable_lag, blocked_lag,
        COALESCE(upper_bound_partitions, CAST(0 AS BIGINT)) AS upper_bound_partitions
      FROM by_topic WHERE `partition` IS NOT NULL AND consumable_lag IS NOT NULL""",
            "consumable_lag + blocked_lag DESC, `group`, topic, `partition`",
        ),
        "blocked": _first(
            ctx,
            lambda run: _config(run).max_blocked,
            "SELECT * FROM blocked_all",
            "blocked_ms DESC, `group`, topic, `partition`",
        ),
        # One aggregation over the per-topic rows and the blocked partitions together (a group
        # is blocked only on partitions it has offsets for): no separate job for per-group
        # counts. -1: a group kept blocked through a cycle that did not read it.
        "groups": f"""
    SELECT {CLUSTER}, `group`, COALESCE(MAX(coordinator_id), CAST(-1 AS BIGINT)) AS coordinator_id,
      COALESCE(MAX(group_state), '') AS group_state, SUM(blocked) AS blocked_partitions,
      COALESCE(SUM(unstable), CAST(0 AS BIGINT)) AS unstable_offset_commits
    FROM (
      SELECT /*+ COALESCE(1) */ * FROM (
        SELECT {CLUSTER}, `group`, coordinator_id, group_state, unstable, 0 AS blocked FROM by_topic
        UNION ALL
        SELECT {CLUSTER}, `group`, CAST(NULL AS BIGINT) AS coordinator_id,
          CAST(NULL AS STRING) AS group_state, CAST(NULL AS BIGINT) AS unstable, 1 AS blocked
        FROM blocked_all
      )
    ) GROUP BY {CLUSTER}, `group`""",
        "lso_history": "SELECT * FROM lso_history",
        "at_lso": f"""
    SELECT {keys}, last_stable_offset, since_ms,
      COALESCE(committed_offset, CAST(-1 AS BIGINT)) AS committed_offset
    FROM at_lso""",
    }
    with_clause = "WITH\n" + ",\n".join(f"{name} AS ({query}\n)" for name, query in tables.items())
    return with_clause, queries


def _first(ctx: Context, limit: Any, query: str, order: str) -> str:
    """``query``'s first rows of each cluster by ``order``: a limit per cluster of the round."""
    return f"""
    SELECT * FROM (
      SELECT *, ROW_NUMBER() OVER (PARTITION BY {CLUSTER} ORDER BY {order}) AS _rank FROM ({query})
    ) WHERE _rank <= {ctx.sql_value(limit)}"""


#: Each output's record (its rows are read back by the record's columns).
_OUTPUTS: Mapping[str, type] = {
    "lags": GroupLag,
    "partition_lags": GroupLag,
    "blocked": BlockedGroupPartition,
    "groups": GroupSummary,
    "lso_history": LsoHistory,
    "at_lso": GroupAtLso,
}


def _txns(ctx: Context) -> DataFrame:
    classified = ctx.classified_frame
    if classified is not None:
        return classified
    empty = keyed_arrow(Finding, [])
    return one_partition(in_plan(ctx.spark, empty, keyed_schema(Finding)))


def _frames(ctx: Context, selected: frozenset[str]) -> dict[str, DataFrame]:
    tables, queries = _family_sql(ctx)
    sources: dict[str, DataFrame] = {
        "by_topic": _aggregated(ctx),
        "partitions": ctx["partitions"],
        "txns": _txns(ctx),
        "previous_history": ctx["previous_lso_history"],
        "previous_at_lso": ctx["previous_at_lso"],
    }
    return {name: ctx.sql(f"{tables}\n{queries[name]}", **sources) for name in queries if name in selected}


def _sorted(record: type[R], rows: Rows, *key: str) -> tuple[R, ...]:
    return tuple(sorted(records_of(record, rows), key=operator.attrgetter(*key)))


def _assemble(a: Assembly) -> Parts:
    if not a.ran:
        return Parts(result={"groups": None}, memory={"groups": a.run.previous.groups})
    carry = GroupsCarry(
        lso_history=_sorted(LsoHistory, a.of("lso_history"), "topic", "partition"),
        at_lso=_sorted(GroupAtLso, a.of("at_lso"), "group", "topic", "partition"),
    )
    family = GroupsResult(
        lags=_sorted(GroupLag, a.of("lags"), "group", "topic"),
        partition_lags=_sorted(GroupLag, a.of("partition_lags"), "group", "topic", "partition"),
        blocked=_sorted(BlockedGroupPartition, a.of("blocked"), "group", "topic", "partition"),
        groups=_sorted(GroupSummary, a.of("groups"), "group"),
        carry=carry,
    )
    return Parts(result={"groups": family}, memory={"groups": carry})


FAMILY = Family(
    name="groups",
    reads=(
        "partitions",
        "group_offsets",
        "consumable_checks",
        "previous_lso_history",
        "previous_at_lso",
    ),
    classified=True,
    outputs=tuple(Output(name, record) for name, record in _OUTPUTS.items()),
    inputs={
        "group_offsets": Input(GroupOffset, lambda run: run.snapshot.group_offsets),
        "consumable_checks": Input(ConsumableCheck, lambda run: run.snapshot.consumable_checks),
        "previous_lso_history": Input(LsoHistory, lambda run: run.previous.groups.lso_history),
        "previous_at_lso": Input(GroupAtLso, lambda run: run.previous.groups.at_lso),
    },
    carry=("groups",),
    frames=_frames,
    assemble=_assemble,
    applies=_enabled,
)


def family_run(
    offsets: Sequence[GroupOffset],
    config: GroupsConfig,
    now_ms: int,
    *,
    checks: Sequence[ConsumableCheck] = (),
    carry: GroupsCarry | None = None,
    rules: Sequence[AttributionRule] = BUILTIN_RULES,
    offsets_incomplete: bool = False,
) -> ClusterRun:
    """A cluster's run that holds only what the family reads of it: its group offsets and
    consumable checks, whether its group collection lost a part, the carry, its config."""
    return ClusterRun(
        ClusterSnapshot(
            cluster="groups",
            taken_at_ms=now_ms,
            group_offsets=offsets,
            consumable_checks=tuple(checks),
            errors=(CollectionError("OffsetFetch", "UNKNOWN"),) if offsets_incomplete else (),
        ),
        PipelineMemory(groups=carry or GroupsCarry()),
        now_ms,
        groups=config,
        rules=tuple(rules),
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
    """The family alone, in one Spark action, over given partitions (``topic, partition,
    high_watermark, last_stable_offset``) and open transactions (``topic, partition,
    start_offset, transactional_id, producer_id, txn_class, duration_ms``; ``application``
    from ``rules`` when absent): a round of one cluster (:func:`family_run`)."""
    run = family_run(
        offsets,
        config,
        now_ms,
        checks=checks,
        carry=carry,
        rules=rules,
        offsets_incomplete=offsets_incomplete,
    )
    with Handover(spark) as handover:
        frames = group_frames(spark, run, partitions, open_transactions, handover)
        out = {o.name: (o.columns, frames[o.name]) for o in FAMILY.outputs}
        rows = transport.collect({}, out)
    parts = FAMILY.assemble(Assembly(run, {name: rows.get(name, {}).get(0, []) for name in frames}, True, {}))
    result: GroupsResult = parts.result["groups"]
    return result


def group_frames(
    spark: SparkSession,
    run: ClusterRun,
    partitions: DataFrame,
    open_transactions: DataFrame,
    handover: Handover | None = None,
) -> dict[str, DataFrame]:
    """Every output of the family for one cluster's ``run`` (no action runs here), over the
    given partitions and open transactions (see :func:`compute_groups`)."""
    ctx = Context(spark, [run], handover, FAMILY.inputs)
    txns = open_transactions
    if "application" not in txns.columns:
        txns = txns.withColumn("application", round_application_column(ctx, F.col("transactional_id")))
    ctx.tables.put("partitions", one_partition(partitions.select(F.lit(0).cast("long").alias(CLUSTER), "*")))
    ctx.classified = one_partition(txns.select(F.lit(0).cast("long").alias(CLUSTER), "*"))
    return dict(_frames(ctx.within([0], FAMILY.reads), FAMILY.output_names))
