"""One cycle's snapshot in, metrics and findings out: the single definition of the
classification, shared by the daemon and the operator CLI's ``find-hanging``.

Every definition is documented in ``docs/metrics.md``; the short version:

* an *open transaction* is a DescribeProducers row with ``CurrentTxnStartOffset >= 0``;
* it is matched to its coordinator through ListTransactions (producer id -> transactional
  id) and DescribeTransactions;
* it is a *hanging candidate* when no coordinator owns it (KIP-664 / ``find-hanging``), and
  *hanging* once the same candidate was seen in ``hanging_confirm_cycles`` consecutive cycles;
* it is *late* when older than the leader's ``transaction.max.timeout.ms`` plus padding.

Everything runs on the DataFrame API only (no RDDs, no SparkContext), so it works on Spark
Connect too. Spark actions are few and fixed: at most one ``collect`` per output table (see
:class:`ComputeStats`); tables whose inputs are empty are not computed at all.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from exporter.model import (
    COORDINATOR_STATES,
    DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
    OPEN_COORDINATOR_STATES,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    BrokerMetrics,
    ClusterSnapshot,
    CoordinatorMetrics,
    CoordinatorTimeoutAbort,
    CycleResult,
    Finding,
    HangingReason,
    PartitionMetrics,
    PipelineSettings,
    StartTimeSource,
    TxnClass,
)
from exporter.pipeline.tables import SnapshotFrames, arrow_table, snapshot_frames

log = logging.getLogger(__name__)

#: DescribeTransactions errors that mean "this coordinator does not know the id": an
#: authoritative answer (hanging candidate), unlike e.g. COORDINATOR_NOT_AVAILABLE (unknown).
NOT_FOUND_ERRORS = frozenset({"TRANSACTIONAL_ID_NOT_FOUND"})
#: Coordinator states a KIP-588 timeout abort ends in.
ABORT_STATES = ("PrepareAbort", "CompleteAbort")
#: The API whose failure makes "no coordinator lists this producer id" inconclusive.
LIST_TRANSACTIONS_API = "ListTransactions"

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

_CANDIDATES_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("producer_id", LongType(), False),
        StructField("start_offset", LongType(), False),
        StructField("previous_cycles", IntegerType(), False),
    ]
)
_WATCHED_SCHEMA = StructType(
    [
        StructField("transactional_id", StringType(), False),
        StructField("old_producer_id", LongType(), False),
        StructField("old_epoch", IntegerType(), False),
        StructField("deadline_ms", LongType(), False),
    ]
)


@dataclass
class ComputeStats:
    """What one :func:`compute` call cost: Spark actions and wall time per output table."""

    actions: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def collect(self, name: str, frame: DataFrame) -> list[Row]:
        started = time.perf_counter()
        rows: list[Row] = frame.collect()
        self.seconds[name] = time.perf_counter() - started
        self.actions += 1
        return rows


def listing_incomplete(snapshot: ClusterSnapshot) -> bool:
    """True when "no coordinator lists this producer id" cannot be trusted this cycle.

    Every broker is a coordinator for some ``__transaction_state`` partitions, so the listing
    is complete only when every known broker answered ListTransactions. When no broker is
    known (Metadata failed) an empty ``coordinators_listed`` proves nothing either.
    """
    listed = snapshot.coordinators_listed
    if not listed:
        return True
    if {b.broker_id for b in snapshot.brokers} - listed:
        return True
    return any(e.api == LIST_TRANSACTIONS_API for e in snapshot.errors)


def compute(
    spark: SparkSession,
    snapshot: ClusterSnapshot,
    settings: PipelineSettings,
    previous: CycleResult | None,
    now_ms: int,
    *,
    stats: ComputeStats | None = None,
) -> CycleResult:
    """Classify the cycle's open transactions and compute every metric table.

    Never raises because of what the snapshot lacks: a table whose source failed is empty,
    and transactions whose coordinator could not be read are classed ``UNKNOWN``.
    """
    st = stats if stats is not None else ComputeStats()
    frames = snapshot_frames(spark, snapshot).persist()
    txns: DataFrame | None = None
    partition_frame: DataFrame | None = None
    try:
        if any(p.current_txn_start_offset >= 0 for p in snapshot.producers):
            txns = _classified_open_transactions(
                spark, frames, snapshot, settings, previous, now_ms
            ).persist()
        partition_frame = _partition_frame(frames, txns).persist()
        partitions: tuple[PartitionMetrics, ...] = ()
        if snapshot.partitions or txns is not None:
            partitions = _partition_metrics(st, partition_frame)
        brokers: tuple[BrokerMetrics, ...] = ()
        if snapshot.partitions or snapshot.brokers or snapshot.broker_configs or txns is not None:
            brokers = _broker_metrics(st, frames, txns, partition_frame)
        findings: tuple[Finding, ...] = ()
        by_class: dict[TxnClass, int] = dict.fromkeys(TxnClass, 0)
        candidates: tuple[tuple[tuple[str, int, int, int], int], ...] = ()
        if txns is not None:
            findings = _findings(st, txns, settings.max_findings)
            counts = st.collect("open_transactions_by_class", txns.groupBy("txn_class").count())
            for cls, count in counts:
                by_class[TxnClass(cls)] = count
            candidates = _hanging_candidates(st, txns)
        coordinators = _coordinator_metrics(st, frames, snapshot, now_ms)
        watched = _watched_ongoing(st, frames, snapshot, previous)
        aborts = _timeout_aborts(st, spark, frames, snapshot, previous, now_ms)
    finally:
        for frame in (partition_frame, txns):
            if frame is not None:
                frame.unpersist()
        frames.unpersist()
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "cluster %s: %d partitions, %d findings, %d Spark actions (%s)",
            snapshot.cluster,
            len(partitions),
            len(findings),
            st.actions,
            ", ".join(f"{name} {secs:.2f}s" for name, secs in st.seconds.items()),
        )
    return CycleResult(
        cluster=snapshot.cluster,
        computed_at_ms=now_ms,
        partitions=partitions,
        brokers=brokers,
        coordinators=coordinators,
        findings=findings,
        open_transactions_by_class=tuple(by_class.items()),
        timeout_aborts=aborts,
        watched_ongoing=watched,
        hanging_candidates=candidates,
    )


# --- open partition-level transactions ----------------------------------------------------


def _classified_open_transactions(
    spark: SparkSession,
    f: SnapshotFrames,
    snapshot: ClusterSnapshot,
    settings: PipelineSettings,
    previous: CycleResult | None,
    now_ms: int,
) -> DataFrame:
    """One row per open partition-level transaction, with every :class:`Finding` column.

    The open transactions are the big side of every join; the coordinator-side tables are
    broadcast (a snapshot's coordinator tables are small), so the only shuffle is the one
    that picks the best coordinator match per transaction.
    """
    c = F.col
    open_txns = f.producers.where(c("current_txn_start_offset") >= 0).select(
        "topic",
        "partition",
        c("broker_id").alias("answered_by"),
        "producer_id",
        "producer_epoch",
        "coordinator_epoch",
        c("current_txn_start_offset").alias("start_offset"),
        "last_timestamp_ms",
    )
    leaders = f.partitions.select("topic", "partition", "leader")
    max_timeouts = f.broker_configs.select("broker_id", "transaction_max_timeout_ms")
    # Duplicate rows (a producer id listed by two coordinators during a move) are harmless:
    # the window below keeps one row per open transaction.
    listed = f.listed_transactions.select("producer_id", "transactional_id")
    described = f.transactions.select(
        "transactional_id",
        c("coordinator_id").alias("txn_coordinator_id"),
        c("error").alias("txn_error"),
        c("state").alias("txn_state"),
        c("timeout_ms").alias("txn_timeout_ms"),
        c("start_time_ms").alias("txn_start_time_ms"),
        c("producer_id").alias("txn_producer_id"),
        F.lit(True).alias("described"),
    )
    in_txn = f.transaction_partitions.select(
        "transactional_id",
        c("coordinator_id").alias("txn_coordinator_id"),
        "topic",
        "partition",
        F.lit(True).alias("in_txn"),
    )
    batches = f.batch_timestamps.where(c("timestamp_ms") >= 0).select(
        "topic", "partition", c("offset").alias("start_offset"), c("timestamp_ms").alias("batch_ms")
    )
    b = F.broadcast
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
        .join(b(_previous_candidates(spark, previous)), list(KEY), "left")
    )
    match = _match_rank()
    best_first = Window.partitionBy(*KEY).orderBy(match, c("transactional_id"))
    best = (
        joined.select("*", match.alias("match"), F.row_number().over(best_first).alias("_n"))
        .where(c("_n") == 1)
    )
    return best.select(*_classified_columns(snapshot, settings, now_ms))


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


def _previous_candidates(spark: SparkSession, previous: CycleResult | None) -> DataFrame:
    rows = [
        (topic, partition, producer_id, start_offset, cycles)
        for (topic, partition, producer_id, start_offset), cycles in (
            previous.hanging_candidates if previous is not None else ()
        )
    ]
    if not rows:
        return spark.emptyDataFrame(_CANDIDATES_SCHEMA)
    return spark.createDataFrame(arrow_table(rows, _CANDIDATES_SCHEMA), _CANDIDATES_SCHEMA)


def _classified_columns(
    snapshot: ClusterSnapshot, settings: PipelineSettings, now_ms: int
) -> list[Column]:
    """The classification, as one projection (see docs/metrics.md for each rule)."""
    c = F.col
    match = c("match")
    not_listed_reason = (
        F.lit(None).cast("string")
        if listing_incomplete(snapshot)
        else F.lit(HangingReason.NO_TRANSACTIONAL_ID.value)
    )
    reason = F.when(match == _NOT_LISTED, not_listed_reason)
    for rank, why in _CANDIDATE_REASON.items():
        reason = reason.when(match == rank, F.lit(why.value))

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
    duration = F.when(known_start, F.greatest(F.lit(0), F.lit(now_ms) - start_time)).otherwise(
        F.lit(0)
    )
    max_timeout = F.coalesce(
        c("transaction_max_timeout_ms"), F.lit(DEFAULT_TRANSACTION_MAX_TIMEOUT_MS)
    )
    late = known_start & (duration > max_timeout + F.lit(settings.late_padding_ms))
    unknown = (match == _UNREADABLE) | ((match == _NOT_LISTED) & reason.isNull())
    two_phase = legit & (c("txn_timeout_ms") == TWO_PHASE_COMMIT_TIMEOUT_MS)
    cycles = F.when(reason.isNotNull(), F.coalesce(c("previous_cycles"), F.lit(0)) + 1)
    txn_class = (
        F.when(cycles >= settings.hanging_confirm_cycles, TxnClass.HANGING.value)
        .when(cycles.isNotNull(), TxnClass.SUSPECTED_HANGING.value)
        .when(unknown, TxnClass.UNKNOWN.value)
        .when(two_phase, TxnClass.TWO_PHASE_COMMIT.value)
        .when(late, TxnClass.LATE.value)
        .otherwise(TxnClass.ONGOING.value)
    )
    severity = F.lit(len(SEVERITY))
    for rank, cls in reversed(list(enumerate(SEVERITY))):
        severity = F.when(txn_class == cls.value, rank).otherwise(severity)
    described_ok = c("described").isNotNull() & c("txn_error").isNull()
    return [
        c("topic"),
        c("partition"),
        c("broker_id").cast("int").alias("broker_id"),
        c("producer_id"),
        c("producer_epoch"),
        c("coordinator_epoch"),
        c("start_offset"),
        c("last_timestamp_ms"),
        start_time.alias("start_time_ms"),
        source.alias("start_time_source"),
        duration.alias("duration_ms"),
        txn_class.alias("txn_class"),
        late.alias("late"),
        reason.alias("hanging_reason"),
        c("transactional_id"),
        F.when(c("described").isNotNull(), c("txn_coordinator_id"))
        .otherwise(-1)
        .alias("coordinator_id"),
        F.when(described_ok, c("txn_state")).alias("coordinator_state"),
        F.when(described_ok, c("txn_timeout_ms")).otherwise(-1).alias("transaction_timeout_ms"),
        cycles.alias("candidate_cycles"),
        severity.alias("severity"),
    ]


_FINDING_COLUMNS = (
    "topic",
    "partition",
    "broker_id",
    "producer_id",
    "producer_epoch",
    "coordinator_epoch",
    "start_offset",
    "last_timestamp_ms",
    "start_time_ms",
    "start_time_source",
    "duration_ms",
    "txn_class",
    "late",
    "hanging_reason",
    "transactional_id",
    "coordinator_id",
    "coordinator_state",
    "transaction_timeout_ms",
)


def _findings(st: ComputeStats, txns: DataFrame, max_findings: int) -> tuple[Finding, ...]:
    if max_findings <= 0:
        return ()
    c = F.col
    ordered = (
        txns.where(c("txn_class") != TxnClass.ONGOING.value)
        .orderBy(
            c("severity"),
            c("late").desc(),
            c("duration_ms").desc(),
            "topic",
            "partition",
            "producer_id",
        )
        .limit(max_findings)
        .select(*_FINDING_COLUMNS)
    )
    return tuple(
        Finding(
            topic=r[0],
            partition=r[1],
            broker_id=r[2],
            producer_id=r[3],
            producer_epoch=r[4],
            coordinator_epoch=r[5],
            start_offset=r[6],
            last_timestamp_ms=r[7],
            start_time_ms=r[8],
            start_time_source=StartTimeSource(r[9]),
            duration_ms=r[10],
            txn_class=TxnClass(r[11]),
            late=r[12],
            hanging_reason=HangingReason(r[13]) if r[13] is not None else None,
            transactional_id=r[14],
            coordinator_id=r[15],
            coordinator_state=r[16],
            transaction_timeout_ms=r[17],
        )
        for r in st.collect("findings", ordered)
    )


def _hanging_candidates(
    st: ComputeStats, txns: DataFrame
) -> tuple[tuple[tuple[str, int, int, int], int], ...]:
    rows = st.collect(
        "hanging_candidates",
        txns.where(F.col("candidate_cycles").isNotNull()).select(*KEY, "candidate_cycles"),
    )
    return tuple(sorted(((r[0], r[1], r[2], r[3]), r[4]) for r in rows))


# --- partitions and brokers ----------------------------------------------------------------
# Each table is one aggregation over a union of its sources (one shuffle), not a chain of
# outer joins: the zero-filling and the "appears in any source" rule come for free.


def _partition_frame(f: SnapshotFrames, txns: DataFrame | None) -> DataFrame:
    """Every partition (offsets read, or an open transaction seen), with its leader, LSO lag,
    the age of its oldest open transaction and whether any open transaction is late."""
    c = F.col
    offsets = f.partitions.select(
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
    if txns is not None:
        offsets = offsets.unionByName(
            txns.select(
                "topic",
                "partition",
                c("broker_id").alias("txn_leader"),
                "duration_ms",
                c("late").cast("int").alias("late"),
            ),
            allowMissingColumns=True,
        )
    else:
        offsets = offsets.select(
            "*",
            F.lit(None).cast("int").alias("txn_leader"),
            F.lit(None).cast("long").alias("duration_ms"),
            F.lit(None).cast("int").alias("late"),
        )
    return offsets.groupBy("topic", "partition").agg(
        F.coalesce(F.max("offsets_leader"), F.max("txn_leader"), F.lit(-1)).alias("leader"),
        F.max("lso_lag").alias("lso_lag"),
        F.max("duration_ms").alias("max_duration_ms"),
        F.coalesce(F.max("late"), F.lit(0)).alias("has_late"),
    )


def _partition_metrics(st: ComputeStats, partitions: DataFrame) -> tuple[PartitionMetrics, ...]:
    rows = st.collect(
        "partitions",
        partitions.select("topic", "partition", "leader", "lso_lag", "max_duration_ms"),
    )
    rows.sort(key=lambda r: (r[0], r[1]))
    return tuple(
        PartitionMetrics(
            topic=t,
            partition=p,
            leader=leader,
            lso_lag=lag,
            max_active_transaction_duration_ms=duration,
        )
        for t, p, leader, lag, duration in rows
    )


def _broker_metrics(
    st: ComputeStats, f: SnapshotFrames, txns: DataFrame | None, partitions: DataFrame
) -> tuple[BrokerMetrics, ...]:
    """Every known broker (metadata, configs, partition leaders), zero-filled."""
    c = F.col
    none_int, none_long = F.lit(None).cast("int"), F.lit(None).cast("long")
    sources = [
        f.brokers.select(
            "broker_id",
            none_int.alias("verification"),
            none_long.alias("transaction_max_timeout_ms"),
            none_int.alias("late"),
            none_long.alias("lso_lag"),
            none_int.alias("hanging"),
        ),
        f.broker_configs.select(
            "broker_id",
            c("verification_enabled").cast("int").alias("verification"),
            "transaction_max_timeout_ms",
            none_int.alias("late"),
            none_long.alias("lso_lag"),
            none_int.alias("hanging"),
        ),
        partitions.where(c("leader") >= 0).select(
            c("leader").alias("broker_id"),
            none_int.alias("verification"),
            none_long.alias("transaction_max_timeout_ms"),
            c("has_late").cast("int").alias("late"),
            "lso_lag",
            none_int.alias("hanging"),
        ),
    ]
    if txns is not None:
        sources.append(
            txns.where(c("txn_class") == TxnClass.HANGING.value).select(
                "broker_id",
                none_int.alias("verification"),
                none_long.alias("transaction_max_timeout_ms"),
                none_int.alias("late"),
                none_long.alias("lso_lag"),
                F.lit(1).alias("hanging"),
            )
        )
    union = sources[0]
    for source in sources[1:]:
        union = union.union(source)
    frame = union.groupBy("broker_id").agg(
        F.coalesce(F.sum("late"), F.lit(0)).alias("late"),
        F.coalesce(F.sum("hanging"), F.lit(0)).alias("hanging"),
        F.coalesce(F.max("lso_lag"), F.lit(0)).alias("lso_lag"),
        F.coalesce(F.min("verification"), F.lit(1)).alias("verification"),
        F.coalesce(
            F.max("transaction_max_timeout_ms"), F.lit(DEFAULT_TRANSACTION_MAX_TIMEOUT_MS)
        ).alias("timeout"),
    )
    rows = st.collect("brokers", frame)
    rows.sort(key=lambda r: r[0])
    return tuple(
        BrokerMetrics(
            broker_id=r[0],
            partitions_with_late_transactions=r[1],
            hanging_transactions=r[2],
            max_last_stable_offset_lag=r[3],
            verification_enabled=bool(r[4]),
            transaction_max_timeout_ms=r[5],
        )
        for r in rows
    )


# --- coordinators --------------------------------------------------------------------------


def _described_ok(f: SnapshotFrames) -> DataFrame:
    return f.transactions.where(F.col("error").isNull())


def _coordinator_metrics(
    st: ComputeStats, f: SnapshotFrames, snapshot: ClusterSnapshot, now_ms: int
) -> tuple[CoordinatorMetrics, ...]:
    """Every coordinator that answered ListTransactions (or appears in a result), zero-filled."""
    if not (snapshot.coordinators_listed or snapshot.transactions or snapshot.listed_transactions):
        return ()
    c = F.col
    open_age = F.greatest(F.lit(0), F.lit(now_ms) - c("start_time_ms"))
    is_open = c("state").isin(*OPEN_COORDINATOR_STATES) & (c("start_time_ms") >= 0)
    is_2pc = c("timeout_ms") == TWO_PHASE_COMMIT_TIMEOUT_MS
    union = (
        f.coordinators_listed.select("coordinator_id")
        .unionByName(f.listed_transactions.select("coordinator_id", "state"),
                     allowMissingColumns=True)
        .unionByName(
            _described_ok(f)
            .where(is_open)
            .select(
                "coordinator_id",
                open_age.alias("open_age"),
                F.when(is_2pc, open_age).alias("two_phase_age"),
            ),
            allowMissingColumns=True,
        )
    )
    frame = union.groupBy("coordinator_id").agg(
        F.coalesce(F.max("open_age"), F.lit(0)),
        F.coalesce(F.max("two_phase_age"), F.lit(0)),
        *(F.count(F.when(c("state") == s, 1)) for s in COORDINATOR_STATES),
    )
    rows = st.collect("coordinators", frame)
    rows.sort(key=lambda r: r[0])
    return tuple(
        CoordinatorMetrics(
            coordinator_id=r[0],
            active_transaction_open_time_max_ms=r[1],
            two_phase_commit_open_time_max_ms=r[2],
            transactions_by_state=tuple(zip(COORDINATOR_STATES, r[3:], strict=True)),
        )
        for r in rows
    )


def _watched_ongoing(
    st: ComputeStats,
    f: SnapshotFrames,
    snapshot: ClusterSnapshot,
    previous: CycleResult | None,
) -> tuple[tuple[str, int, int, int], ...]:
    """KIP-588: every Ongoing transaction with its deadline (start + its own timeout); 2PC
    transactions never time out and are left out.

    A transaction remembered last cycle whose id could not be described this cycle is kept,
    so a coordinator that is unreadable for a cycle does not hide a timeout abort."""
    found: list[tuple[str, int, int, int]] = []
    if any(t.state == "Ongoing" for t in snapshot.transactions):
        c = F.col
        ongoing = _described_ok(f).where(
            (c("state") == "Ongoing")
            & (c("start_time_ms") >= 0)
            & (c("timeout_ms") >= 0)
            & (c("timeout_ms") != TWO_PHASE_COMMIT_TIMEOUT_MS)
        )
        rows = st.collect(
            "watched_ongoing",
            ongoing.select("transactional_id", "producer_id", "producer_epoch",
                           (c("start_time_ms") + c("timeout_ms")).alias("deadline_ms")),
        )
        found = sorted((r[0], r[1], r[2], r[3]) for r in rows)
    if previous is not None and previous.watched_ongoing:
        unreadable = _unreadable_transactional_ids(snapshot)
        seen = {entry[0] for entry in found}
        found.extend(
            entry
            for entry in previous.watched_ongoing
            if entry[0] in unreadable and entry[0] not in seen
        )
    return tuple(found)


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


def _timeout_aborts(
    st: ComputeStats,
    spark: SparkSession,
    f: SnapshotFrames,
    snapshot: ClusterSnapshot,
    previous: CycleResult | None,
    now_ms: int,
) -> tuple[CoordinatorTimeoutAbort, ...]:
    """KIP-588: last cycle's Ongoing transactions whose deadline has passed, now aborting or
    aborted with a bumped epoch (or moved to a new producer id). A producer cannot abort
    after its deadline (the coordinator does, within its cleanup interval); a producer's
    own abort shortly before the deadline, seen only after it, is the one case counted
    wrongly (see docs/metrics.md)."""
    if previous is None or not previous.watched_ongoing:
        return ()
    if not any(t.state in ABORT_STATES for t in snapshot.transactions):
        return ()
    c = F.col
    before = spark.createDataFrame(arrow_table(previous.watched_ongoing, _WATCHED_SCHEMA),
                                   _WATCHED_SCHEMA)
    now = _described_ok(f).where(c("state").isin(*ABORT_STATES))
    same_producer = c("producer_id") == c("old_producer_id")
    bumped = (same_producer & (c("producer_epoch") > c("old_epoch"))) | (
        ~same_producer & (c("producer_id") >= 0)
    )
    rows = st.collect(
        "timeout_aborts",
        before.join(now, "transactional_id")
        .where(bumped & (c("deadline_ms") <= F.lit(now_ms)))
        .select("transactional_id", "coordinator_id", "old_producer_id", "old_epoch",
                "producer_epoch"),
    )
    rows.sort(key=lambda r: r[0])
    return tuple(
        CoordinatorTimeoutAbort(
            transactional_id=r[0],
            coordinator_id=r[1],
            producer_id=r[2],
            old_epoch=r[3],
            new_epoch=r[4],
        )
        for r in rows
    )
