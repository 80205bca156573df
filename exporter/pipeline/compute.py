"""One cycle's snapshot in, metrics and findings out: the single definition of the
classification, shared by the daemon and the operator CLI's ``find-hanging``.

Every definition is documented in ``docs/metrics.md``; the short version:

* an *open transaction* is a DescribeProducers row with ``CurrentTxnStartOffset >= 0``;
* it is matched to its coordinator through ListTransactions (producer id -> transactional
  id) and DescribeTransactions;
* it is a *hanging candidate* when no coordinator owns it (KIP-664 / ``find-hanging``) AND the
  partition, read again after the coordinators, still shows the same open transaction; it is
  *hanging* once the same candidate was seen in ``hanging_confirm_cycles`` consecutive cycles;
* it is *unknown* when the evidence is missing (a coordinator could not be read, not every
  coordinator answered, the principal may not see every transactional id, the candidate could
  not be re-read); a remembered candidate keeps its class and count through missing evidence,
  and only positive evidence (the transaction closed, its coordinator owns it) clears it;
* it is *late* when older than the leader's ``transaction.max.timeout.ms`` plus padding.

Everything runs on the DataFrame API only (no RDDs, no SparkContext), so it works on Spark
Connect too. Each output table is declared once as a record of ``exporter.model`` and every
output of a cycle comes back in ONE Spark action: the tables are packed side by side as
struct columns of one union and brought back with one ``toArrow()`` (see :func:`_collect`).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, LongType, StringType, StructField, StructType

from exporter.groups_config import BUILTIN_RULES, AttributionRule, GroupsConfig
from exporter.model import (
    COORDINATOR_OPEN_CARRY_MS,
    COORDINATOR_STATES,
    DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
    OPEN_COORDINATOR_STATES,
    PREPARE_STATES,
    TRANSACTION_STATE_TOPIC,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    ApplicationTransactions,
    BrokerMetrics,
    ClassCount,
    ClusterSnapshot,
    CoordinatorCount,
    CoordinatorMetrics,
    CoordinatorOpenSince,
    CoordinatorStateCount,
    CoordinatorTimeoutAbort,
    CycleResult,
    Finding,
    HangingCandidate,
    HangingReason,
    PartitionMetrics,
    PipelineMemory,
    PipelineSettings,
    PreparingTransaction,
    StartTimeSource,
    TxnClass,
    UnknownCount,
    UnknownReason,
    WatchedTransaction,
)
from exporter.pipeline.attribution import application_column, by_application
from exporter.pipeline.groups import group_frames, group_input_frames, groups_result
from exporter.pipeline.tables import Column as TableColumn
from exporter.pipeline.tables import (
    Handover,
    Tables,
    arrow_of,
    build_side,
    columns_of,
    frame_of,
    one_partition,
    record_of,
    records_of,
    schema_of,
)

log = logging.getLogger(__name__)

#: DescribeTransactions errors that mean "this coordinator does not know the id": an
#: authoritative answer (hanging candidate), unlike e.g. COORDINATOR_NOT_AVAILABLE (unknown).
NOT_FOUND_ERRORS = frozenset({"TRANSACTIONAL_ID_NOT_FOUND"})
#: Coordinator states a KIP-588 timeout abort passes through.
ABORT_STATES = ("PrepareAbort", "CompleteAbort")
#: The API whose failure makes "no coordinator lists this producer id" inconclusive.
LIST_TRANSACTIONS_API = "ListTransactions"
#: The APIs of the group collection: a failure may leave groups out of the snapshot.
GROUP_APIS = frozenset({"ListGroups", "OffsetFetch"})

#: Identity of an open partition-level transaction across cycles.
KEY = ("topic", "partition", "producer_id", "start_offset")

# How an open partition transaction matched its coordinator, best match first. When several
# transactional ids are listed for one producer id, the best one decides: a legitimate owner
# wins, then an unreadable one (it might be the owner), then the hanging reasons.
_LEGIT = 0  # described, same producer id, open, includes the partition
_UNREADABLE = 1  # listed, but DescribeTransactions failed (not not-found) or is missing
_NOT_IN_TXN = 2
_NOT_OPEN = 3
_PID_CHANGED = 4
_ID_NOT_FOUND = 5
_NOT_LISTED = 6

_CANDIDATE_REASON = {
    _NOT_IN_TXN: HangingReason.PARTITION_NOT_IN_TRANSACTION,
    _NOT_OPEN: HangingReason.COORDINATOR_NOT_OPEN,
    _PID_CHANGED: HangingReason.PRODUCER_ID_CHANGED,
    _ID_NOT_FOUND: HangingReason.TRANSACTIONAL_ID_NOT_FOUND,
}

#: Finding order: most severe class first (then late first, then oldest).
SEVERITY = (
    TxnClass.HANGING,
    TxnClass.SUSPECTED_HANGING,
    TxnClass.LATE,
    TxnClass.UNKNOWN,
    TxnClass.TWO_PHASE_COMMIT,
    TxnClass.ONGOING,
)

_FINDING_COLUMNS = tuple(c.name for c in columns_of(Finding))

#: Every output table of a cycle, by the name :func:`compute` collects it under.
OUTPUT_TABLES = frozenset(
    {
        "findings",
        "class_counts",
        "unknown_counts",
        "by_application",
        "candidates",
        "partitions",
        "brokers",
        "preparing",
        "coordinators",
        "coordinator_states",
        "coordinator_open",
        "watched",
        "aborts",
        "groups",
    }
)
#: What the operator CLI reads of a cycle (``find-hanging``, ``abort``): the findings, and
#: the partitions for their LSO lag. The same classification; the daemon's other tables
#: (brokers, coordinators, counts, the memory carried to a next cycle) are not planned.
FINDINGS_OUTPUTS = frozenset({"findings", "partitions"})
#: The outputs that read the classification (brokers through the partition table).
_READ_CLASSIFIED = frozenset(
    {
        "findings",
        "class_counts",
        "unknown_counts",
        "by_application",
        "candidates",
        "partitions",
        "brokers",
        "groups",
    }
)
#: The coordinator family: one frame of the coordinators' open-since carry feeds all three.
_COORDINATOR_OUTPUTS = frozenset({"coordinators", "coordinator_states", "coordinator_open"})


@dataclass
class ComputeStats:
    """What one :func:`compute` call cost: Spark actions and wall time."""

    actions: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _GroupRow:
    """One output row of the consumer-group family (:meth:`GroupFrames.single`)."""

    kind: str
    row: str


@dataclass(frozen=True, slots=True)
class _CandidateRow:
    """A remembered candidate as a table: the finding's columns and its cycle count."""

    previous_cycles: int


def listing_incomplete(snapshot: ClusterSnapshot) -> bool:
    """True when "no coordinator lists this producer id" cannot be trusted this cycle.

    Every broker is a coordinator for some ``__transaction_state`` partitions, so the listing
    is complete only when every known broker answered ListTransactions. When no broker is
    known (Metadata failed) an empty ``coordinators_listed`` proves nothing either. Nor does
    it when ``__transaction_state`` is left out of the metadata (no Describe on it): a
    leaderless partition of it, whose ids nobody lists, could not be seen.
    """
    listed = snapshot.coordinators_listed
    if not listed:
        return True
    if {b.broker_id for b in snapshot.brokers} - listed:
        return True
    return any(
        e.api == LIST_TRANSACTIONS_API or (e.api == "Metadata" and e.topic == TRANSACTION_STATE_TOPIC)
        for e in snapshot.errors
    )


def compute(
    spark: SparkSession,
    snapshot: ClusterSnapshot,
    settings: PipelineSettings,
    memory: PipelineMemory | None,
    now_ms: int,
    *,
    stats: ComputeStats | None = None,
    groups: GroupsConfig | None = None,
    rules: Sequence[AttributionRule] = BUILTIN_RULES,
    outputs: frozenset[str] = OUTPUT_TABLES,
) -> CycleResult:
    """Classify the cycle's open transactions and compute every metric table.

    ``groups``: the cluster's consumer-group family (blast radius), computed in the same
    action when enabled (also in a cycle that read no group offsets); ``rules``: the
    transactional id -> application attribution (counted per application whether or not
    groups are on); ``outputs``: the tables to compute (a subset of
    :data:`OUTPUT_TABLES`; the others are left empty in the result and never planned: the CLI
    asks for :data:`FINDINGS_OUTPUTS`). Only a daemon's cycle, which computes them all, may
    hand ``result.memory`` to the next cycle.

    ``memory`` is what the previous cycle of this cluster returned (``result.memory``), or
    None on the first cycle. Never raises because of what the snapshot lacks: a table whose
    source failed is empty, and transactions whose evidence is missing are ``UNKNOWN``.
    """
    unknown = outputs - OUTPUT_TABLES
    if unknown:
        raise ValueError(f"no such output table: {', '.join(sorted(unknown))}")
    st = stats if stats is not None else ComputeStats()
    mem = memory if memory is not None else PipelineMemory()
    with Handover(spark) as handover:
        rows = _compute_rows(spark, snapshot, settings, mem, now_ms, st, groups, rules, handover, outputs)
    result = _assemble(snapshot, settings, mem, rows, now_ms)
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "cluster %s: %d partitions, %d findings, %d Spark action(s) in %.2f s",
            snapshot.cluster,
            len(result.partitions),
            len(result.findings),
            st.actions,
            sum(st.seconds.values()),
        )
    return result


def _compute_rows(
    spark: SparkSession,
    snapshot: ClusterSnapshot,
    settings: PipelineSettings,
    mem: PipelineMemory,
    now_ms: int,
    st: ComputeStats,
    groups: GroupsConfig | None,
    rules: Sequence[AttributionRule],
    handover: Handover,
    outputs: frozenset[str],
) -> dict[str, list[Any]]:
    """The output tables' rows, by table name, from one Spark action."""
    t = Tables(spark, snapshot, handover)
    out: dict[str, tuple[type, DataFrame]] = {}
    want = outputs.__contains__

    classified: DataFrame | None = None
    if any(p.current_txn_start_offset >= 0 for p in snapshot.producers) or mem.candidates:
        classified = _classified(spark, t, snapshot, settings, mem, now_ms, rules)
        if len(outputs & _READ_CLASSIFIED) > 1:
            classified = _shared(classified, st)
        if want("findings"):
            out["findings"] = (Finding, _findings(classified, settings.max_findings))
        if want("class_counts"):
            out["class_counts"] = (ClassCount, classified.groupBy("txn_class").count())
        if want("unknown_counts"):
            out["unknown_counts"] = (
                UnknownCount,
                classified.where(F.col("unknown_reason").isNotNull())
                .groupBy(F.col("unknown_reason").alias("reason"))
                .count(),
            )
        if want("by_application"):
            out["by_application"] = (ApplicationTransactions, by_application(classified))
        if want("candidates"):
            out["candidates"] = (
                _CandidateRow,
                classified.where(F.col("candidate_cycles").isNotNull()).select(
                    *_FINDING_COLUMNS, F.col("candidate_cycles").alias("previous_cycles")
                ),
            )
    if not t.empty("partitions") or classified is not None:
        partitions = _partition_frame(t, classified)
        if want("partitions"):
            out["partitions"] = (PartitionMetrics, _published_partitions(partitions, settings))
        if want("brokers"):
            out["brokers"] = (BrokerMetrics, _broker_frame(t, classified, partitions))
    elif want("brokers") and not (t.empty("brokers") and t.empty("broker_configs")):
        out["brokers"] = (BrokerMetrics, _broker_frame(t, None, None))
    preparing = None
    if (want("preparing") or want("coordinators")) and (
        mem.preparing or any(x.state in PREPARE_STATES for x in snapshot.listed_transactions)
    ):
        preparing = _preparing_frame(spark, t, mem, snapshot.taken_at_ms)
        if want("preparing"):
            out["preparing"] = (PreparingTransaction, preparing)
    if outputs & _COORDINATOR_OUTPUTS and (
        snapshot.coordinators_listed
        or snapshot.transactions
        or snapshot.listed_transactions
        or mem.coordinator_open
    ):
        open_since = _coordinator_open_frame(
            spark, t, mem, _unread_coordinators(snapshot), snapshot.taken_at_ms
        )
        if want("coordinators"):
            out["coordinators"] = (
                CoordinatorMetrics,
                _coordinator_frame(t, now_ms, preparing, open_since),
            )
        if want("coordinator_states"):
            out["coordinator_states"] = (CoordinatorStateCount, _coordinator_state_frame(t))
        if want("coordinator_open"):
            out["coordinator_open"] = (CoordinatorOpenSince, open_since)
    if want("watched") and any(d.state == "Ongoing" for d in snapshot.transactions):
        out["watched"] = (WatchedTransaction, _watched_frame(t, snapshot.taken_at_ms))
    if want("aborts") and mem.watched and not t.empty("transactions"):
        out["aborts"] = (
            CoordinatorTimeoutAbort,
            _timeout_abort_frame(spark, t, mem, _transaction_version(snapshot), now_ms),
        )

    # A cycle that read no group offsets runs the family too: groups waiting at an LSO are
    # kept through a lost group collection (their blocked series and page go on) or ended by
    # a complete one that no longer shows them, the LSO history goes on, and the families
    # are on the page (empty) as soon as groups are on.
    if want("groups") and groups is not None and groups.enabled:
        inputs = group_input_frames(
            spark, snapshot.group_offsets, snapshot.consumable_checks, mem.groups, handover
        )
        txns = classified if classified is not None else frame_of(spark, Finding, [])
        family = group_frames(
            inputs,
            t["partitions"],
            txns,
            groups,
            now_ms,
            rules,
            offsets_incomplete=any(e.api in GROUP_APIS for e in snapshot.errors),
        )
        out["groups"] = (_GroupRow, family.single())

    return _collect(st, out)


def _shared(frame: DataFrame, st: ComputeStats) -> DataFrame:
    """A frame several outputs of the cycle read, made one leaf of the cycle's plan: a lazy
    local checkpoint (``localCheckpoint(eager=False)``), computed once inside the cycle's one
    action and kept in the driver's block manager until the frame is collected.

    A classic session analyses every DataFrame step eagerly over the whole plan beneath it:
    with the classification (nine joins and a window) under each of the dozen output steps,
    and under the final union, that re-analysis was most of a cycle's plan building (the
    union alone: ~0.2 s of analysis at 10k partitions, ~0.03 s over the leaf). Cached with
    ``persist`` instead, the plan stayed whole and was planned once more for the cache.
    Spark Connect sends a plan as a tree, so there a frame read by six outputs travelled and
    was analysed six times with every input table inside each copy (a 512m server ran out of
    heap at 10k partitions): the checkpoint is one relation on the server, read by id.
    Measured with bench/pipeline_bench.py (docs/operations.md, "The embedded driver").

    The CLI's two outputs (findings and partitions) read the classification too, and the
    checkpoint pays there as well: on a warm Connect engine at 3000 partitions those two
    outputs took 0.9-1.3 s with it and 1.3-1.6 s with the classification in the plan twice.

    Building the leaf plans the classification; the time is recorded as ``checkpoint``."""
    started = time.perf_counter()
    pinned = one_partition(frame.localCheckpoint(eager=False))
    st.seconds["checkpoint"] = time.perf_counter() - started
    return pinned


# --- one action for every output -----------------------------------------------------------


def _collect(st: ComputeStats, out: dict[str, tuple[type, DataFrame]]) -> dict[str, list[Any]]:
    """Every output table in one Spark action.

    The tables are stacked in one ``UNION ALL`` with a ``_table`` tag; one ``toArrow()``
    brings the whole result back, and each table is cut out of it by its tag. One plan, one
    job submission, one transfer: Spark's per-action cost is paid once per cycle instead of
    once per table.

    The union's columns are typed slots shared by the tables (``bigint_0``, ``bigint_1``, ...,
    ``string_0``, ..., ``boolean_0``, ...): each table puts its columns, by its record's
    field order, into the slots of their type, and leaves the others null. Arrow allocates
    every column's values for every row, null or not, so a column per table's field made
    the result as wide as all the tables together (~70 columns for the 100k rows of the
    partition table at 100k partitions); the slots make it as wide as the widest table.
    (Flat columns rather than one struct per table: Arrow cannot hand back a null struct whose
    fields are declared non-null.)

    The union is one SQL statement over the output frames (``spark.sql`` with the frames as
    arguments) rather than a chain of ``unionByName``: a classic session analyses every
    DataFrame step eagerly, and a dozen growing unions cost more than the rest of the plan.
    """
    if not out:
        return {}
    placed = {table: _slots(_output_columns(record)) for table, (record, _) in out.items()}
    width: dict[str, int] = {}
    types: dict[str, DataType] = {}
    for slots in placed.values():
        for column, slot in slots:
            kind, index = slot.rsplit("_", 1)
            width[kind] = max(width.get(kind, 0), int(index) + 1)
            types[kind] = column.spark
    every = [(f"{kind}_{i}", kind) for kind in sorted(width) for i in range(width[kind])]
    selects: dict[str, list[str]] = {}
    for table, slots in placed.items():
        own = {slot: c for c, slot in slots}
        values = [f"'{table}' AS _table"]
        for slot, kind in every:
            c = own.get(slot)
            value = f"`{c.name}`" if c is not None else "NULL"
            values.append(f"CAST({value} AS {kind}) AS {slot}")
        selects[table] = values
    frames: dict[str, Any] = {table: frame for table, (_, frame) in out.items()}
    if _is_connect(next(iter(frames.values()))):
        schema = [("_table", StringType()), *((slot, types[kind]) for slot, kind in every)]
        union = _connect_union(frames, selects, schema)
    else:
        branches = [f"SELECT {', '.join(values)} FROM {{{table}}}" for table, values in selects.items()]
        union = next(iter(frames.values())).sparkSession.sql("\nUNION ALL\n".join(branches), **frames)
    started = time.perf_counter()
    arrow: pa.Table = union.toArrow()
    st.seconds["collect"] = time.perf_counter() - started
    st.actions += 1
    tags = arrow.column("_table")
    return {
        table: arrow.filter(pc.equal(tags, table))
        .select([slot for _, slot in slots])
        .rename_columns([c.name for c, _ in slots])
        .to_pylist()
        for table, slots in placed.items()
    }


def _is_connect(frame: DataFrame) -> bool:
    return type(frame).__module__.startswith("pyspark.sql.connect")


def _connect_union(
    frames: dict[str, DataFrame], selects: dict[str, list[str]], schema: list[tuple[str, DataType]]
) -> DataFrame:
    """The same union on Spark Connect, where DataFrame steps are lazy (the plan is built in
    the client) but ``spark.sql`` is a command the server runs at once, and ``toArrow``
    asks the server for the result's schema before running it: each a round trip in which
    the server analyses the whole plan again (0.38 s and 0.25 s of compute's 2.7 s in one
    profiled CLI run on a warm engine at 3000 partitions). The schema is known here: the
    union carries it."""
    parts = [frames[table].selectExpr(*values) for table, values in selects.items()]
    union = functools.reduce(lambda a, b: a.unionAll(b), parts)
    # The Connect DataFrame's schema cache (pyspark/sql/connect/dataframe.py), as its own
    # steps fill it; checked by tests/unit/test_pipeline_connect_seam.py.
    union._cached_schema = StructType([StructField(name, kind, True) for name, kind in schema])  # type: ignore[attr-defined]
    return union


def _slots(columns: Sequence[TableColumn]) -> list[tuple[TableColumn, str]]:
    """Each column with the union slot it takes: the n-th column of a type takes slot n."""
    taken: dict[str, int] = {}
    placed = []
    for c in columns:
        kind = c.spark.simpleString()
        placed.append((c, f"{kind}_{taken.get(kind, 0)}"))
        taken[kind] = taken.get(kind, 0) + 1
    return placed


def _output_columns(record: type) -> tuple[TableColumn, ...]:
    """The columns an output table brings back: its record's, by name."""
    if record is _CandidateRow:
        return (*columns_of(Finding), TableColumn("previous_cycles", int, False))
    return columns_of(record)


def _assemble(
    snapshot: ClusterSnapshot,
    settings: PipelineSettings,
    mem: PipelineMemory,
    rows: dict[str, list[Any]],
    now_ms: int,
) -> CycleResult:
    findings = sorted(records_of(Finding, rows.get("findings", [])), key=_finding_order)
    by_class = dict.fromkeys(TxnClass, 0)
    for c in records_of(ClassCount, rows.get("class_counts", [])):
        by_class[c.txn_class] = c.count
    unknown = dict.fromkeys(UnknownReason, 0)
    for u in records_of(UnknownCount, rows.get("unknown_counts", [])):
        unknown[u.reason] = u.count
    states: dict[int, dict[str, int]] = {}
    for s in records_of(CoordinatorStateCount, rows.get("coordinator_states", [])):
        states.setdefault(s.coordinator_id, {})[s.state] = s.count
    coordinators = tuple(
        sorted(
            (
                record_of(
                    CoordinatorMetrics,
                    r,
                    transactions_by_state=tuple(
                        (state, states.get(r["coordinator_id"], {}).get(state, 0))
                        for state in COORDINATOR_STATES
                    ),
                )
                for r in rows.get("coordinators", [])
            ),
            key=lambda c: c.coordinator_id,
        )
    )
    aborts = tuple(
        sorted(
            records_of(CoordinatorTimeoutAbort, rows.get("aborts", [])),
            key=lambda a: a.transactional_id,
        )
    )
    group_family = groups_result(rows["groups"]) if "groups" in rows else None
    memory = PipelineMemory(
        groups=group_family.carry if group_family is not None else mem.groups,
        candidates=tuple(
            sorted(
                (
                    HangingCandidate(record_of(Finding, r), r["previous_cycles"])
                    for r in rows.get("candidates", [])
                ),
                key=lambda c: (
                    c.finding.topic,
                    c.finding.partition,
                    c.finding.producer_id,
                    c.finding.start_offset,
                ),
            )
        ),
        watched=_next_watched(snapshot, mem, rows.get("watched", []), aborts),
        timeout_aborts_total=_abort_totals(mem, coordinators, aborts),
        preparing=tuple(
            sorted(
                records_of(PreparingTransaction, rows.get("preparing", [])),
                key=lambda p: (p.coordinator_id, p.transactional_id),
            )
        ),
        coordinator_open=tuple(
            sorted(
                (
                    o
                    for o in records_of(CoordinatorOpenSince, rows.get("coordinator_open", []))
                    if o.open_since_ms is not None or o.two_phase_since_ms is not None
                ),
                key=lambda o: o.coordinator_id,
            )
        ),
    )
    return CycleResult(
        cluster=snapshot.cluster,
        computed_at_ms=now_ms,
        partitions=tuple(
            sorted(
                records_of(PartitionMetrics, rows.get("partitions", [])), key=lambda p: (p.topic, p.partition)
            )
        ),
        brokers=tuple(sorted(records_of(BrokerMetrics, rows.get("brokers", [])), key=lambda b: b.broker_id)),
        coordinators=coordinators,
        findings=tuple(findings[: max(0, settings.max_findings)]),
        open_transactions_by_class=tuple(by_class.items()),
        open_transactions_unknown=tuple(unknown.items()),
        open_transactions_by_application=tuple(
            sorted(
                records_of(ApplicationTransactions, rows.get("by_application", [])),
                key=lambda a: (a.application, a.txn_class),
            )
        ),
        timeout_aborts=aborts,
        transactional_ids_visible=snapshot.transactional_ids_visible,
        transaction_version=_transaction_version(snapshot),
        groups=group_family,
        memory=memory,
    )


def _transaction_version(snapshot: ClusterSnapshot) -> int | None:
    """The finalized transaction.version of the cluster (every broker reports the same)."""
    versions = [c.transaction_version for c in snapshot.broker_configs if c.transaction_version >= 0]
    return max(versions) if versions else None


def _finding_order(f: Finding) -> tuple[int, bool, int, str, int, int]:
    return (SEVERITY.index(f.txn_class), not f.late, -f.duration_ms, f.topic, f.partition, f.producer_id)


# --- open partition-level transactions ----------------------------------------------------


def _classified(
    spark: SparkSession,
    t: Tables,
    snapshot: ClusterSnapshot,
    settings: PipelineSettings,
    mem: PipelineMemory,
    now_ms: int,
    rules: Sequence[AttributionRule],
) -> DataFrame:
    """One row per open partition-level transaction (and per remembered candidate whose
    partition could not be read), with every :class:`Finding` column.

    The open transactions are the big side of every join; the coordinator-side tables are
    each its build side (:func:`~exporter.pipeline.tables.build_side`) and every table is
    one partition: no broadcast, and a shuffle only where the planner's size estimate of a
    join of joins passes its bound (see ``session.PLAN_DEFAULTS``).
    """
    c = F.col
    b = build_side
    open_txns = (
        t["producers"]
        .where(c("current_txn_start_offset") >= 0)
        .select(
            "topic",
            "partition",
            c("broker_id").alias("answered_by"),
            "producer_id",
            "producer_epoch",
            "coordinator_epoch",
            c("current_txn_start_offset").alias("start_offset"),
            "last_timestamp_ms",
        )
    )
    leaders = t["partitions"].select(
        "topic",
        "partition",
        "leader",
        c("last_stable_offset").alias("partition_lso"),
        c("log_start_offset").alias("partition_log_start"),
    )
    max_timeouts = t["broker_configs"].select("broker_id", "transaction_max_timeout_ms")
    # Duplicate rows (a producer id listed by two coordinators during a move) are harmless:
    # the window below keeps one row per open transaction.
    listed = t["listed_transactions"].select("producer_id", "transactional_id")
    described = t["transactions"].select(
        "transactional_id",
        c("coordinator_id").alias("txn_coordinator_id"),
        c("error").alias("txn_error"),
        c("state").alias("txn_state"),
        c("timeout_ms").alias("txn_timeout_ms"),
        c("start_time_ms").alias("txn_start_time_ms"),
        c("producer_id").alias("txn_producer_id"),
        F.lit(True).alias("described"),
    )
    in_txn = t["transaction_partitions"].select(
        "transactional_id",
        c("coordinator_id").alias("txn_coordinator_id"),
        "topic",
        "partition",
        F.lit(True).alias("in_txn"),
    )
    batches = (
        t["batch_timestamps"]
        .where(c("timestamp_ms") >= 0)
        .select("topic", "partition", c("offset").alias("start_offset"), c("timestamp_ms").alias("batch_ms"))
    )
    still_open = (
        t["reread_producers"]
        .where(c("current_txn_start_offset") >= 0)
        .select(
            "topic",
            "partition",
            "producer_id",
            c("current_txn_start_offset").alias("start_offset"),
            F.lit(True).alias("verified"),
        )
        .dropDuplicates(list(KEY))
    )
    reread = t["reread_partitions"].select("topic", "partition", F.lit(True).alias("reread"))
    previous = _previous_candidates(spark, mem)
    # The chain's estimate passes maxSinglePartitionBytes from ~2000 partitions on, and the
    # planner then shuffles the last joins' sides (5 one-partition shuffles at 10k). Read
    # through tables.in_place, the chain ran as one stage, ~0.05 s faster at 10k, but the
    # daemon's RSS peak at 10k partitions rose from 748-754 to 779-784 MiB
    # (bench/daemon_memory.py, 3 runs against 2; likely the one task holding every join's
    # hash table at once), past the 768 MiB the chart is sized for. Tried again with 1 MiB
    # memory pages (2026-11-27; in_place before the described join and before the window):
    # one stage, the driver's RSS unchanged (568-571 MiB after 30 cycles, with and without),
    # but no faster with cycles alternating in one session (median of 20: 0.92 s against
    # 0.88 s).
    joined = (
        open_txns.join(b(leaders), ["topic", "partition"], "left")
        .select(
            "*",
            F.when(c("leader") >= 0, c("leader")).otherwise(c("answered_by")).alias("broker_id"),
        )
        .join(b(max_timeouts), "broker_id", "left")
        .join(b(batches), ["topic", "partition", "start_offset"], "left")
        .join(b(listed), "producer_id", "left")
        .join(b(described), "transactional_id", "left")
        .join(b(in_txn), ["transactional_id", "txn_coordinator_id", "topic", "partition"], "left")
        .join(b(still_open), list(KEY), "left")
        .join(b(reread), ["topic", "partition"], "left")
        .join(b(previous), list(KEY), "left")
    )
    match = _match_rank()
    best_first = Window.partitionBy(*KEY).orderBy(match, c("transactional_id"))
    best = joined.select("*", match.alias("match"), F.row_number().over(best_first).alias("_n")).where(
        c("_n") == 1
    )
    current = (
        _classify(best, snapshot, settings, now_ms, rules)
        .where(~c("closed_meanwhile"))
        .drop("closed_meanwhile")
    )
    if not mem.candidates:
        return current
    # A remembered candidate whose partition could not be read at all this cycle (its
    # DescribeProducers failed, or its topic was left out of the metadata with an error): no
    # evidence either way, so it stays as it was (its age moves on). A failed re-read is no
    # such case: the first read of the partition stands, and if it shows the transaction
    # gone, the candidate is cleared.
    unread = t["unread_partitions"].select("topic", "partition", F.lit(True).alias("_unread"))
    unread_topics = t["unread_topics"].select("topic", F.lit(True).alias("_topic_unread"))
    absent = (
        previous.join(open_txns.select(*KEY), list(KEY), "left_anti")
        .join(b(unread), ["topic", "partition"], "left")
        .join(b(unread_topics), "topic", "left")
        .where(c("_unread").isNotNull() | c("_topic_unread").isNotNull())
    )
    return current.unionByName(absent.select(*_kept_columns(now_ms)))


def _match_rank() -> Column:
    c = F.col
    return (
        F.when(c("transactional_id").isNull(), _NOT_LISTED)
        .when(c("described").isNull(), _UNREADABLE)
        .when(c("txn_error").isin(*NOT_FOUND_ERRORS), _ID_NOT_FOUND)
        .when(c("txn_error").isNotNull(), _UNREADABLE)
        .when(c("txn_producer_id") != c("producer_id"), _PID_CHANGED)
        .when(~c("txn_state").isin(*OPEN_COORDINATOR_STATES), _NOT_OPEN)
        .when(c("in_txn").isNull(), _NOT_IN_TXN)
        .otherwise(_LEGIT)
    )


def _previous_candidates(spark: SparkSession, mem: PipelineMemory) -> DataFrame:
    """Last cycle's candidates: their finding's columns prefixed ``prev_``, and their count."""
    schema = StructType([*schema_of(Finding).fields, StructField("previous_cycles", LongType(), False)])
    arrow = arrow_of(Finding, [m.finding for m in mem.candidates]).append_column(
        pa.field("previous_cycles", pa.int64(), False),
        pa.array([m.cycles for m in mem.candidates], type=pa.int64()),
    )
    frame = one_partition(spark.createDataFrame(arrow, schema))
    return frame.select(
        *KEY,
        *(F.col(name).alias(f"prev_{name}") for name in _FINDING_COLUMNS if name not in KEY),
        "previous_cycles",
    )


def _severity(txn_class: Column) -> Column:
    """The class's rank in :data:`SEVERITY` (most severe 0), one ``CASE`` over the column."""
    first, *others = list(enumerate(SEVERITY))
    severity = F.when(txn_class == first[1].value, first[0])
    for rank, cls in others:
        severity = severity.when(txn_class == cls.value, rank)
    return severity.otherwise(len(SEVERITY))


def _classify(
    best: DataFrame,
    snapshot: ClusterSnapshot,
    settings: PipelineSettings,
    now_ms: int,
    rules: Sequence[AttributionRule],
) -> DataFrame:
    """The classification (see docs/metrics.md for each rule), in four projections: each
    names what the next one reads (``_reason``, ``_missing``, ``_cycles``, ``_class``), so
    every rule is in the plan once.

    A Column object is an expression tree, and a rule built on another copies it: written as
    one projection, the severity repeated the class six times, the class repeated the
    candidate count twice and the missing evidence once, and so on down to the match. That
    projection held ~9500 expression nodes (the severity alone ~6500), which Spark analysed
    every cycle and, interpreted and without subexpression elimination, evaluated per row.
    The optimizer keeps the projections apart (an expression read more than once is not
    inlined), so a row evaluates each rule once too."""
    c = F.col
    match = c("match")
    incomplete = listing_incomplete(snapshot)
    visible = snapshot.transactional_ids_visible is True

    # 1. The evidence: start, age, lateness, and the hanging reason the match gives.
    legit = match == _LEGIT
    from_coordinator = legit & (c("txn_start_time_ms") >= 0)
    from_batch = c("batch_ms").isNotNull()
    start_time = (
        F.when(from_coordinator, c("txn_start_time_ms"))
        .when(from_batch, c("batch_ms"))
        .otherwise(c("last_timestamp_ms"))
    )
    source = (
        F.when(from_coordinator, F.lit(StartTimeSource.COORDINATOR.value))
        .when(from_batch, F.lit(StartTimeSource.BATCH_TIMESTAMP.value))
        .otherwise(F.lit(StartTimeSource.LAST_TIMESTAMP.value))
    )
    # An unknown start (-1) gives no age rather than an age of 55 years; a start in the
    # future (client clock skew) gives 0.
    known_start = start_time >= 0
    duration = F.when(known_start, F.greatest(F.lit(0), F.lit(now_ms) - start_time)).otherwise(F.lit(0))
    max_timeout = F.coalesce(c("transaction_max_timeout_ms"), F.lit(DEFAULT_TRANSACTION_MAX_TIMEOUT_MS))
    late = known_start & (duration > max_timeout + F.lit(settings.late_padding_ms))
    two_phase = legit & (c("txn_timeout_ms") == TWO_PHASE_COMMIT_TIMEOUT_MS)

    # "No coordinator lists the producer id" needs a complete listing, a principal that may
    # see every id, and an age no live transaction reaches: the visibility probe cannot see a
    # DENY rule (or a custom authorizer) that hides some ids only, and a live transaction
    # outlives its leader's transaction.max.timeout.ms plus padding only under two-phase
    # commit (KIP-939). The leader's own maximum must be known (read this cycle): clusters
    # that run Flink raise it well above the default. Otherwise, or younger, it is unknown
    # (unlisted_within_timeout), never a candidate.
    unlisted = match == _NOT_LISTED
    listing_trusted = visible and not incomplete
    past_any_timeout = late & c("transaction_max_timeout_ms").isNotNull()
    not_listed_reason = (
        F.when(past_any_timeout, F.lit(HangingReason.NO_TRANSACTIONAL_ID.value))
        if listing_trusted
        else F.lit(None).cast("string")
    )
    reason = F.when(unlisted, not_listed_reason)
    for rank, why in _CANDIDATE_REASON.items():
        reason = reason.when(match == rank, F.lit(why.value))
    evidence = best.select(
        "*",
        start_time.alias("_start"),
        source.alias("_source"),
        duration.alias("_duration"),
        late.alias("_late"),
        two_phase.alias("_two_phase"),
        reason.alias("_reason"),
    )

    # 2. The evidence that is missing, if any.
    reason = c("_reason")
    not_listed_unknown = (
        UnknownReason.UNLISTED_WITHIN_TIMEOUT
        if listing_trusted
        else UnknownReason.LISTING_INCOMPLETE
        if incomplete
        else UnknownReason.OWNER_MAY_BE_INVISIBLE
    )
    missing_evidence = (
        F.when(match == _UNREADABLE, F.lit(UnknownReason.COORDINATOR_UNREADABLE.value))
        .when(unlisted & reason.isNull(), F.lit(not_listed_unknown.value))
        .when(reason.isNotNull() & c("reread").isNull(), F.lit(UnknownReason.UNVERIFIED.value))
    )
    missing = evidence.select("*", missing_evidence.alias("_missing"))

    # 3. The candidate's count of cycles. Evidence missing and the transaction remembered as
    # a candidate: keep it as it was.
    remembered = c("previous_cycles").isNotNull()
    verified_candidate = reason.isNotNull() & c("reread").isNotNull() & c("verified").isNotNull()
    kept = remembered & c("_missing").isNotNull()
    cycles = F.when(verified_candidate, F.coalesce(c("previous_cycles"), F.lit(0)) + 1).when(
        kept, c("previous_cycles")
    )
    counted = missing.select("*", kept.alias("_kept"), cycles.alias("_cycles"))

    # 4. The class.
    kept, cycles = c("_kept"), c("_cycles")
    confirmed = cycles >= settings.hanging_confirm_cycles
    txn_class = (
        F.when(cycles.isNotNull() & confirmed, TxnClass.HANGING.value)
        .when(cycles.isNotNull(), TxnClass.SUSPECTED_HANGING.value)
        .when(c("_missing").isNotNull(), TxnClass.UNKNOWN.value)
        .when(c("_two_phase"), TxnClass.TWO_PHASE_COMMIT.value)
        .when(c("_late"), TxnClass.LATE.value)
        .otherwise(TxnClass.ONGOING.value)
    )
    classed = counted.select("*", txn_class.alias("_class"))

    described_ok = c("described").isNotNull() & c("txn_error").isNull()
    transactional_id = F.coalesce(c("transactional_id"), c("prev_transactional_id"))
    return classed.select(
        c("topic"),
        c("partition"),
        c("broker_id"),
        c("producer_id"),
        c("producer_epoch"),
        c("coordinator_epoch"),
        c("start_offset"),
        c("last_timestamp_ms"),
        c("_start").alias("start_time_ms"),
        c("_source").alias("start_time_source"),
        c("_duration").alias("duration_ms"),
        c("_class").alias("txn_class"),
        c("_late").alias("late"),
        F.when(kept, c("prev_hanging_reason")).otherwise(reason).alias("hanging_reason"),
        F.when(cycles.isNull(), c("_missing")).alias("unknown_reason"),
        transactional_id.alias("transactional_id"),
        F.when(kept, c("prev_coordinator_id"))
        .when(c("described").isNotNull(), c("txn_coordinator_id"))
        .otherwise(-1)
        .alias("coordinator_id"),
        F.when(kept, c("prev_coordinator_state"))
        .when(described_ok, c("txn_state"))
        .alias("coordinator_state"),
        F.when(described_ok, c("txn_timeout_ms")).otherwise(-1).alias("transaction_timeout_ms"),
        application_column(transactional_id, rules).alias("application"),
        cycles.alias("candidate_cycles"),
        _severity(c("_class")).alias("severity"),
        # A candidate (or an unlisted transaction) whose partition, read again after the
        # coordinators, no longer shows it: it closed between the reads (markers written
        # meanwhile), so it is not open at all. Nor is any transaction that starts below the
        # partition's last stable offset (ListOffsets, from the leader): the LSO stops at the
        # first offset of the oldest open transaction, so it passed this one only once it
        # closed. That covers a DescribeProducers answer from a lagging replica (Kafka
        # answers it from any replica's log, and stale metadata can name a former leader).
        # Not when the log start (read after the LSO) is past the start: retention or
        # DeleteRecords lift the LSO to the log start over a transaction still open.
        (
            ((reason.isNotNull() | unlisted) & c("reread").isNotNull() & c("verified").isNull())
            | F.coalesce(
                (c("partition_lso") > c("start_offset"))
                & (c("partition_log_start") >= 0)
                & (c("start_offset") >= c("partition_log_start")),
                F.lit(False),
            )
        ).alias("closed_meanwhile"),
    )


def _kept_columns(now_ms: int) -> list[Column]:
    """A remembered candidate re-emitted unchanged (no evidence this cycle); its age moves on."""
    c = F.col
    start = c("prev_start_time_ms")
    cols: list[Column] = []
    for name in _FINDING_COLUMNS:
        if name in KEY:
            cols.append(c(name))
        elif name == "duration_ms":
            cols.append(
                F.when(start >= 0, F.greatest(F.lit(0), F.lit(now_ms) - start))
                .otherwise(c("prev_duration_ms"))
                .alias(name)
            )
        else:
            cols.append(c(f"prev_{name}").alias(name))
    cols.append(c("previous_cycles").alias("candidate_cycles"))
    cols.append(_severity(c("prev_txn_class")).alias("severity"))
    return cols


def _findings(classified: DataFrame, max_findings: int) -> DataFrame:
    c = F.col
    return (
        classified.where(c("txn_class") != TxnClass.ONGOING.value)
        .orderBy(
            c("severity"),
            c("late").desc(),
            c("duration_ms").desc(),
            "topic",
            "partition",
            "producer_id",
        )
        .limit(max(0, max_findings))
    )


# --- partitions and brokers ----------------------------------------------------------------
# Each table is one aggregation over a union of its sources (one shuffle), not a chain of
# outer joins: the zero-filling and the "appears in any source" rule come for free.


def _partition_frame(t: Tables, classified: DataFrame | None) -> DataFrame:
    """Every partition (offsets read, or an open transaction seen), with its leader, LSO lag,
    the age of its oldest open transaction and whether any open transaction is late."""
    c = F.col
    offsets = t["partitions"].select(
        "topic",
        "partition",
        c("leader").alias("offsets_leader"),
        # The two ListOffsets calls are not atomic: an LSO read after the high watermark moved
        # on can pass it; the lag is then 0, never negative.
        F.when(
            (c("high_watermark") >= 0) & (c("last_stable_offset") >= 0),
            F.greatest(F.lit(0), c("high_watermark") - c("last_stable_offset")),
        ).alias("lso_lag"),
    )
    if classified is not None:
        offsets = one_partition(
            offsets.unionByName(
                classified.select(
                    "topic",
                    "partition",
                    c("broker_id").alias("txn_leader"),
                    "duration_ms",
                    c("late").cast("int").alias("late"),
                ),
                allowMissingColumns=True,
            )
        )
    else:
        offsets = offsets.select(
            "*",
            F.lit(None).cast("long").alias("txn_leader"),
            F.lit(None).cast("long").alias("duration_ms"),
            F.lit(None).cast("int").alias("late"),
        )
    return offsets.groupBy("topic", "partition").agg(
        F.coalesce(F.max("offsets_leader"), F.max("txn_leader"), F.lit(-1)).alias("leader"),
        F.max("lso_lag").alias("lso_lag"),
        F.max("duration_ms").alias("max_active_transaction_duration_ms"),
        F.coalesce(F.max("late"), F.lit(0)).alias("has_late"),
    )


def _published_partitions(partitions: DataFrame, settings: PipelineSettings) -> DataFrame:
    """The partitions a series or a reader of the result needs: those with an LSO lag, an
    open transaction, or offsets that could not be read. A caught-up partition without an
    open transaction is left out unless every partition gets a LastStableOffsetLag series
    (``lso_lag_series: all``): on a large cluster that is most of them, and bringing each back
    to Python only to drop it cost more than the rest of the table (at 100k partitions,
    ~0.5 s of a cycle on the driver and in Python). The brokers' aggregates read the whole
    table, before this cut."""
    if settings.lso_lag_series == "all":
        return partitions
    c = F.col
    return partitions.where(
        c("lso_lag").isNull() | (c("lso_lag") > 0) | c("max_active_transaction_duration_ms").isNotNull()
    )


def _broker_frame(t: Tables, classified: DataFrame | None, partitions: DataFrame | None) -> DataFrame:
    """Every known broker (metadata, configs, partition leaders), zero-filled. A broker whose
    configs were not read has no verification or 2PC value (null, never a guess)."""
    c = F.col
    none_int, none_long = F.lit(None).cast("int"), F.lit(None).cast("long")
    blank = {
        "verification": none_int,
        "two_phase": none_int,
        "transaction_max_timeout_ms": none_long,
        "late": none_int,
        "lso_lag": none_long,
        "hanging": none_int,
    }

    def source(frame: DataFrame, broker: Column, **given: Column) -> DataFrame:
        return frame.select(
            broker.alias("broker_id"), *((given.get(k, v)).alias(k) for k, v in blank.items())
        )

    sources = [
        source(t["brokers"], c("broker_id")),
        source(
            t["broker_configs"],
            c("broker_id"),
            verification=c("verification_enabled").cast("int"),
            two_phase=c("two_phase_commit_enabled").cast("int"),
            transaction_max_timeout_ms=c("transaction_max_timeout_ms"),
        ),
    ]
    if partitions is not None:
        sources.append(
            source(
                partitions.where(c("leader") >= 0),
                c("leader"),
                late=c("has_late").cast("int"),
                lso_lag=c("lso_lag"),
            )
        )
    if classified is not None:
        sources.append(
            source(
                classified.where(c("txn_class") == TxnClass.HANGING.value), c("broker_id"), hanging=F.lit(1)
            )
        )
    union = sources[0]
    for more in sources[1:]:
        union = union.union(more)
    union = one_partition(union)
    min_verification = F.min("verification")
    max_two_phase = F.max("two_phase")
    return union.groupBy("broker_id").agg(
        F.coalesce(F.sum("late"), F.lit(0)).alias("partitions_with_late_transactions"),
        F.coalesce(F.sum("hanging"), F.lit(0)).alias("hanging_transactions"),
        F.coalesce(F.max("lso_lag"), F.lit(0)).alias("max_last_stable_offset_lag"),
        F.when(min_verification.isNotNull(), min_verification == 1).alias("verification_enabled"),
        F.coalesce(F.max("transaction_max_timeout_ms"), F.lit(DEFAULT_TRANSACTION_MAX_TIMEOUT_MS)).alias(
            "transaction_max_timeout_ms"
        ),
        F.when(max_two_phase.isNotNull(), max_two_phase == 1).alias("two_phase_commit_enabled"),
    )


# --- coordinators --------------------------------------------------------------------------


def _described_ok(t: Tables) -> DataFrame:
    return t["transactions"].where(F.col("error").isNull())


def _unread_coordinators(snapshot: ClusterSnapshot) -> tuple[int, ...] | None:
    """Coordinators whose transactions this cycle could not read: not answering
    ListTransactions, or with a DescribeTransactions error. None: every one (a describe stage
    cut by the deadline, or an error no broker is named for)."""
    failed = {
        e.broker_id for e in snapshot.errors if e.api == "DescribeTransactions" and not e.of_visibility_probe
    }
    if -1 in failed:
        return None
    known = {b.broker_id for b in snapshot.brokers}
    return tuple(sorted((known - set(snapshot.coordinators_listed)) | failed))


def _coordinator_open_frame(
    spark: SparkSession, t: Tables, mem: PipelineMemory, unread: tuple[int, ...] | None, seen_at_ms: int
) -> DataFrame:
    """Each coordinator's oldest open transaction start (:class:`CoordinatorOpenSince`):
    this cycle's, and for a coordinator this cycle could not read (``unread``; None: all)
    the remembered one too, while it is still a known broker and for
    :data:`COORDINATOR_OPEN_CARRY_MS` at most."""
    c = F.col
    is_2pc = c("timeout_ms") == TWO_PHASE_COMMIT_TIMEOUT_MS
    current = (
        _described_ok(t)
        .where(c("state").isin(*OPEN_COORDINATOR_STATES) & (c("start_time_ms") >= 0))
        .select(
            "coordinator_id",
            F.when(~is_2pc, c("start_time_ms")).alias("open_since_ms"),
            F.when(is_2pc, c("start_time_ms")).alias("two_phase_since_ms"),
            F.lit(seen_at_ms).cast("long").alias("read_at_ms"),
        )
    )
    if mem.coordinator_open:
        known = build_side(t["brokers"].select(c("broker_id").alias("coordinator_id")))
        carried = (
            frame_of(spark, CoordinatorOpenSince, mem.coordinator_open)
            .where(c("read_at_ms") >= seen_at_ms - COORDINATOR_OPEN_CARRY_MS)
            .join(known, "coordinator_id", "left_semi")
        )
        if unread is not None:
            carried = carried.where(c("coordinator_id").isin(*unread)) if unread else carried.limit(0)
        current = one_partition(current.unionByName(carried))
    return current.groupBy("coordinator_id").agg(
        F.min("open_since_ms").alias("open_since_ms"),
        F.min("two_phase_since_ms").alias("two_phase_since_ms"),
        F.min("read_at_ms").alias("read_at_ms"),
    )


def _coordinator_frame(
    t: Tables, now_ms: int, preparing: DataFrame | None, open_since: DataFrame
) -> DataFrame:
    """Every coordinator that answered ListTransactions (or appears in a result, or is kept
    from the previous cycle while unread), zero-filled. The open-time gauge leaves
    two-phase-commit transactions out: they get their own."""
    c = F.col

    def age(since: str) -> Column:
        return F.greatest(F.lit(0), F.lit(now_ms) - c(since))

    union = (
        t["coordinators_listed"]
        .select(c("broker_id").alias("coordinator_id"))
        .unionByName(t["listed_transactions"].select("coordinator_id"))
        .unionByName(
            open_since.select(
                "coordinator_id",
                age("open_since_ms").alias("open_age"),
                age("two_phase_since_ms").alias("two_phase_age"),
            ),
            allowMissingColumns=True,
        )
    )
    if preparing is not None:
        union = union.unionByName(
            preparing.select(
                "coordinator_id", F.greatest(F.lit(0), F.lit(now_ms) - c("since_ms")).alias("prepare_age")
            ),
            allowMissingColumns=True,
        )
    else:
        union = union.select("*", F.lit(None).cast("long").alias("prepare_age"))
    return (
        one_partition(union)
        .groupBy("coordinator_id")
        .agg(
            F.coalesce(F.max("open_age"), F.lit(0)).alias("active_transaction_open_time_max_ms"),
            F.coalesce(F.max("two_phase_age"), F.lit(0)).alias("two_phase_commit_open_time_max_ms"),
            F.coalesce(F.max("prepare_age"), F.lit(0)).alias("prepare_time_max_ms"),
        )
    )


def _preparing_frame(spark: SparkSession, t: Tables, mem: PipelineMemory, seen_at_ms: int) -> DataFrame:
    """Markers pending: every id listed in PrepareCommit/PrepareAbort, since the first cycle
    that listed it in the same state with the same producer id (a new sighting starts at
    this snapshot's time). The coordinator is no part of the sighting: when
    ``__transaction_state`` leadership moves, the new coordinator loads the id in the same
    state and writes the same markers, so the wait goes on. A remembered id whose coordinator
    did not answer ListTransactions this cycle, and that no coordinator lists now, is kept as
    it was while its coordinator is still a broker of the cluster: no evidence either way."""
    c = F.col
    sighting = ["transactional_id", "producer_id", "state"]
    previous = frame_of(spark, PreparingTransaction, mem.preparing)
    listed = (
        t["listed_transactions"]
        .where(c("state").isin(*PREPARE_STATES))
        .select("coordinator_id", *sighting)
        .dropDuplicates()
    )
    first_seen = previous.groupBy(*sighting).agg(F.min("since_ms").alias("previous_since_ms"))
    current = listed.join(build_side(first_seen), sighting, "left").select(
        "coordinator_id",
        *sighting,
        F.coalesce(c("previous_since_ms"), F.lit(seen_at_ms).cast("long")).alias("since_ms"),
    )
    answered = t["coordinators_listed"].select(c("broker_id").alias("coordinator_id"))
    known = t["brokers"].select(c("broker_id").alias("coordinator_id"))
    unanswered = (
        previous.join(build_side(answered), "coordinator_id", "left_anti")
        .join(build_side(known), "coordinator_id", "left_semi")
        .join(build_side(listed.select(*sighting)), sighting, "left_anti")
    )
    return one_partition(current.unionByName(unanswered.select("coordinator_id", *sighting, "since_ms")))


def _coordinator_state_frame(t: Tables) -> DataFrame:
    return t["listed_transactions"].groupBy("coordinator_id", "state").count()


def _watched_frame(t: Tables, seen_at_ms: int) -> DataFrame:
    """KIP-588: every Ongoing transaction with its deadline (start + its own timeout); 2PC
    transactions never time out and are left out."""
    c = F.col
    return (
        _described_ok(t)
        .where(
            (c("state") == "Ongoing")
            & (c("start_time_ms") >= 0)
            & (c("timeout_ms") >= 0)
            & (c("timeout_ms") != TWO_PHASE_COMMIT_TIMEOUT_MS)
        )
        .select(
            "transactional_id",
            "coordinator_id",
            "producer_id",
            "producer_epoch",
            (c("start_time_ms") + c("timeout_ms")).alias("deadline_ms"),
            F.lit(seen_at_ms).alias("seen_at_ms"),
        )
    )


def _timeout_abort_frame(
    spark: SparkSession,
    t: Tables,
    mem: PipelineMemory,
    transaction_version: int | None,
    now_ms: int,
) -> DataFrame:
    """KIP-588: last cycle's Ongoing transactions the coordinator has since aborted on timeout.

    The transactional id is next seen with a bumped epoch (or a new producer id), and either
    * in PrepareAbort/CompleteAbort after its deadline passed (the abort itself), or
    * Empty after its deadline passed (the producer re-initialised after the abort), or
    * Ongoing again, when it was already past its deadline when last seen Ongoing (so the
      coordinator aborted it within its cleanup interval) and the epoch moved as only a
      re-initialisation moves it: by 2 or more (abort + InitProducerId) with transactions
      v2, where every commit bumps the epoch by 1; by any step with transactions v1.
    A commit is never counted: a late commit bumps the epoch too (v2). docs/metrics.md says
    what cannot be seen (a timeout abort followed, within one interval, by a re-init and a
    new transaction that was never seen overdue).
    """
    c = F.col
    before = frame_of(spark, WatchedTransaction, mem.watched).select(
        "transactional_id",
        c("producer_id").alias("old_producer_id"),
        c("producer_epoch").alias("old_epoch"),
        "deadline_ms",
        "seen_at_ms",
    )
    now = _described_ok(t).select(
        "transactional_id", "coordinator_id", "state", "producer_id", "producer_epoch"
    )
    new_producer = (c("producer_id") != c("old_producer_id")) & (c("producer_id") >= 0)
    same_producer = c("producer_id") == c("old_producer_id")
    bumped = (same_producer & (c("producer_epoch") > c("old_epoch"))) | new_producer
    reinit_step = 1 if transaction_version == 1 else 2
    reinitialised = new_producer | (same_producer & (c("producer_epoch") >= c("old_epoch") + reinit_step))
    due = c("deadline_ms") <= F.lit(now_ms)
    overdue_when_seen = c("deadline_ms") <= c("seen_at_ms")
    counted = (bumped & due & c("state").isin(*ABORT_STATES, "Empty")) | (
        overdue_when_seen & (c("state") == "Ongoing") & reinitialised
    )
    return (
        before.join(now, "transactional_id")
        .where(counted)
        .select(
            "transactional_id",
            "coordinator_id",
            c("old_producer_id").alias("producer_id"),
            "old_epoch",
            c("producer_epoch").alias("new_epoch"),
        )
    )


def _next_watched(
    snapshot: ClusterSnapshot,
    mem: PipelineMemory,
    rows: list[Any],
    aborts: tuple[CoordinatorTimeoutAbort, ...],
) -> tuple[WatchedTransaction, ...]:
    """This cycle's Ongoing transactions, plus last cycle's whose id could not be read now:
    a coordinator that is unreadable for a cycle does not hide a timeout abort."""
    found = {w.transactional_id: w for w in records_of(WatchedTransaction, rows)}
    counted = {a.transactional_id for a in aborts}
    unreadable = _unreadable_transactional_ids(snapshot)
    for w in mem.watched:
        if w.transactional_id in unreadable and w.transactional_id not in found.keys() | counted:
            found[w.transactional_id] = w
    return tuple(sorted(found.values(), key=lambda w: w.transactional_id))


def _unreadable_transactional_ids(snapshot: ClusterSnapshot) -> set[str]:
    """Ids this cycle listed or tried to describe without getting an answer."""
    failed = {
        t.transactional_id
        for t in snapshot.transactions
        if t.error is not None and t.error not in NOT_FOUND_ERRORS
    }
    described = {t.transactional_id for t in snapshot.transactions}
    listed = {t.transactional_id for t in snapshot.listed_transactions}
    return failed | (listed - described)


def _abort_totals(
    mem: PipelineMemory,
    coordinators: tuple[CoordinatorMetrics, ...],
    aborts: tuple[CoordinatorTimeoutAbort, ...],
) -> tuple[CoordinatorCount, ...]:
    """Running KIP-588 totals per coordinator; every coordinator seen has a total (0 before
    its first abort), so the counter series exist before anything happens."""
    totals = {c.coordinator_id: c.count for c in mem.timeout_aborts_total}
    for c in coordinators:
        totals.setdefault(c.coordinator_id, 0)
    for a in aborts:
        totals[a.coordinator_id] = totals.get(a.coordinator_id, 0) + 1
    return tuple(CoordinatorCount(k, v) for k, v in sorted(totals.items()))
