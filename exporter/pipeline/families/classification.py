"""The one classification of open partition-level transactions, shared by the daemon and the
operator CLI's ``find-hanging``; its findings, counts by class and by missing evidence, and
the hanging candidates carried to the next cycle.

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

The classified frame (:func:`classified_frame`) is read by other families too (partitions,
brokers, consumer groups, attribution); the orchestrator makes it one leaf of the round's
plan when more than one output reads it (``compute._shared``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from exporter.columns import columns_of
from exporter.model import (
    DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
    OPEN_COORDINATOR_STATES,
    TRANSACTION_STATE_TOPIC,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    ClassCount,
    ClusterSnapshot,
    Finding,
    HangingCandidate,
    HangingReason,
    StartTimeSource,
    TxnClass,
    UnknownCount,
    UnknownReason,
)
from exporter.pipeline.families.attribution import round_application_column
from exporter.pipeline.families.base import (
    Assembly,
    ClusterRun,
    Context,
    Family,
    Input,
    Output,
    Parts,
    first_per_cluster,
)
from exporter.pipeline.tables import CLUSTER, build_side, keyed, record_of, records_of

#: DescribeTransactions errors that mean "this coordinator does not know the id": an
#: authoritative answer (hanging candidate), unlike e.g. COORDINATOR_NOT_AVAILABLE (unknown).
NOT_FOUND_ERRORS = frozenset({"TRANSACTIONAL_ID_NOT_FOUND"})
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

_FINDING_COLUMNS = tuple(c.name for c in columns_of(Finding))


@dataclass(frozen=True, slots=True)
class CandidateRow(Finding):
    """A hanging candidate as a table: the finding's columns and its count of cycles."""

    previous_cycles: int = 0


def _remembered(run: ClusterRun) -> list[CandidateRow]:
    return [
        CandidateRow(
            **{name: getattr(c.finding, name) for name in _FINDING_COLUMNS}, previous_cycles=c.cycles
        )
        for c in run.previous.candidates
    ]


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


def _listing_trusted(run: ClusterRun) -> bool:
    return run.snapshot.transactional_ids_visible is True and not listing_incomplete(run.snapshot)


def _not_listed_unknown(run: ClusterRun) -> str:
    if _listing_trusted(run):
        return UnknownReason.UNLISTED_WITHIN_TIMEOUT.value
    if listing_incomplete(run.snapshot):
        return UnknownReason.LISTING_INCOMPLETE.value
    return UnknownReason.OWNER_MAY_BE_INVISIBLE.value


def _has_open_transactions(run: ClusterRun) -> bool:
    return bool(run.previous.candidates) or any(
        p.current_txn_start_offset >= 0 for p in run.snapshot.producers
    )


# --- the classified frame ---------------------------------------------------------------------


def classified_frame(ctx: Context) -> DataFrame:
    """One row per open partition-level transaction (and per remembered candidate whose
    partition could not be read), with every :class:`Finding` column, its cluster, its
    ``candidate_cycles`` and its ``severity``.

    The open transactions are the big side of every join; the coordinator-side tables are
    each its build side (:func:`~exporter.pipeline.tables.build_side`) and every table is
    one partition: no broadcast, and a shuffle only where the planner's size estimate of a
    join of joins passes its bound (see ``session.PLAN_DEFAULTS``).
    """
    c = F.col
    b = build_side
    open_txns = (
        ctx["producers"]
        .where(c("current_txn_start_offset") >= 0)
        .select(
            CLUSTER,
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
    leaders = ctx["partitions"].select(
        CLUSTER,
        "topic",
        "partition",
        "leader",
        c("last_stable_offset").alias("partition_lso"),
        c("log_start_offset").alias("partition_log_start"),
    )
    max_timeouts = ctx["broker_configs"].select(CLUSTER, "broker_id", "transaction_max_timeout_ms")
    # Duplicate rows (a producer id listed by two coordinators during a move) are harmless:
    # the window below keeps one row per open transaction.
    listed = ctx["listed_transactions"].select(CLUSTER, "producer_id", "transactional_id")
    described = ctx["transactions"].select(
        CLUSTER,
        "transactional_id",
        c("coordinator_id").alias("txn_coordinator_id"),
        c("error").alias("txn_error"),
        c("state").alias("txn_state"),
        c("timeout_ms").alias("txn_timeout_ms"),
        c("start_time_ms").alias("txn_start_time_ms"),
        c("producer_id").alias("txn_producer_id"),
        F.lit(True).alias("described"),
    )
    in_txn = ctx["transaction_partitions"].select(
        CLUSTER,
        "transactional_id",
        c("coordinator_id").alias("txn_coordinator_id"),
        "topic",
        "partition",
        F.lit(True).alias("in_txn"),
    )
    batches = (
        ctx["batch_timestamps"]
        .where(c("timestamp_ms") >= 0)
        .select(
            CLUSTER,
            "topic",
            "partition",
            c("offset").alias("start_offset"),
            c("timestamp_ms").alias("batch_ms"),
        )
    )
    still_open = (
        ctx["reread_producers"]
        .where(c("current_txn_start_offset") >= 0)
        .select(
            CLUSTER,
            "topic",
            "partition",
            "producer_id",
            c("current_txn_start_offset").alias("start_offset"),
            F.lit(True).alias("verified"),
        )
        .dropDuplicates(keyed(*KEY))
    )
    reread = ctx["reread_partitions"].select(CLUSTER, "topic", "partition", F.lit(True).alias("reread"))
    previous = _previous_candidates(ctx)
    # The chain's estimate passes maxSinglePartitionBytes from ~2000 partitions on, and the
    # planner then shuffles the last joins' sides (5 one-partition shuffles at 10k). Read in
    # place (tables.in_place) the chain runs as one stage, but no faster, and the one task
    # holding every join's hash table at once raised the daemon's RSS peak at 10k partitions
    # past the 768 MiB the chart is sized for (bench/daemon_memory.py).
    joined = (
        open_txns.join(b(leaders), keyed("topic", "partition"), "left")
        .select(
            "*",
            F.when(c("leader") >= 0, c("leader")).otherwise(c("answered_by")).alias("broker_id"),
        )
        .join(b(max_timeouts), keyed("broker_id"), "left")
        .join(b(batches), keyed("topic", "partition", "start_offset"), "left")
        .join(b(listed), keyed("producer_id"), "left")
        .join(b(described), keyed("transactional_id"), "left")
        .join(b(in_txn), keyed("transactional_id", "txn_coordinator_id", "topic", "partition"), "left")
        .join(b(still_open), keyed(*KEY), "left")
        .join(b(reread), keyed("topic", "partition"), "left")
        .join(b(previous), keyed(*KEY), "left")
    )
    match = _match_rank()
    best_first = Window.partitionBy(*keyed(*KEY)).orderBy(match, c("transactional_id"))
    best = joined.select("*", match.alias("match"), F.row_number().over(best_first).alias("_n")).where(
        c("_n") == 1
    )
    current = _classify(best, ctx).where(~c("closed_meanwhile")).drop("closed_meanwhile")
    if not ctx.any(lambda run: bool(run.previous.candidates)):
        return current
    # A remembered candidate whose partition could not be read at all this cycle (its
    # DescribeProducers failed, or its topic was left out of the metadata with an error): no
    # evidence either way, so it stays as it was (its age moves on). A failed re-read is no
    # such case: the first read of the partition stands, and if it shows the transaction
    # gone, the candidate is cleared.
    unread = ctx["unread_partitions"].select(CLUSTER, "topic", "partition", F.lit(True).alias("_unread"))
    unread_topics = ctx["unread_topics"].select(CLUSTER, "topic", F.lit(True).alias("_topic_unread"))
    absent = (
        previous.join(open_txns.select(*keyed(*KEY)), keyed(*KEY), "left_anti")
        .join(b(unread), keyed("topic", "partition"), "left")
        .join(b(unread_topics), keyed("topic"), "left")
        .where(c("_unread").isNotNull() | c("_topic_unread").isNotNull())
    )
    return current.unionByName(absent.select(*_kept_columns(ctx)))


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


def _previous_candidates(ctx: Context) -> DataFrame:
    """Last cycle's candidates: their finding's columns prefixed ``prev_``, and their count."""
    return ctx["previous_candidates"].select(
        CLUSTER,
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


def _classify(best: DataFrame, ctx: Context) -> DataFrame:
    """The classification (see docs/metrics.md for each rule), in four projections: each
    names what the next one reads (``_reason``, ``_missing``, ``_cycles``, ``_class``), so
    every rule is in the plan once.

    A Column object is an expression tree, and a rule built on another copies it: written as
    one projection, the severity repeated the class six times, the class repeated the
    candidate count twice and the missing evidence once, and so on down to the match. That
    projection held ~9500 expression nodes (the severity alone ~6500), which Spark analysed
    every cycle and, interpreted and without subexpression elimination, evaluated per row.
    The optimizer keeps the projections apart (an expression read more than once is not
    inlined), so a row evaluates each rule once too.

    Each cluster's settings and evidence of its listing are columns (:meth:`Context.value`),
    literals in a round of one."""
    c = F.col
    match = c("match")
    now = ctx.value(lambda run: run.now_ms)
    trusted = ctx.value(_listing_trusted, "boolean")

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
    duration = F.when(known_start, F.greatest(F.lit(0), now - start_time)).otherwise(F.lit(0))
    max_timeout = F.coalesce(c("transaction_max_timeout_ms"), F.lit(DEFAULT_TRANSACTION_MAX_TIMEOUT_MS))
    late = known_start & (duration > max_timeout + ctx.value(lambda run: run.settings.late_padding_ms))
    two_phase = legit & (c("txn_timeout_ms") == TWO_PHASE_COMMIT_TIMEOUT_MS)

    # "No coordinator lists the producer id" needs a complete listing, a principal that may
    # see every id, and an age no live transaction reaches: the visibility probe cannot see a
    # DENY rule (or a custom authorizer) that hides some ids only, and a live transaction
    # outlives its leader's transaction.max.timeout.ms plus padding only under two-phase
    # commit (KIP-939). The leader's own maximum must be known (read this cycle): clusters
    # that run Flink raise it well above the default. Otherwise, or younger, it is unknown
    # (unlisted_within_timeout), never a candidate.
    unlisted = match == _NOT_LISTED
    past_any_timeout = late & c("transaction_max_timeout_ms").isNotNull()
    not_listed_reason = F.when(trusted & past_any_timeout, F.lit(HangingReason.NO_TRANSACTIONAL_ID.value))
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
    missing_evidence = (
        F.when(match == _UNREADABLE, F.lit(UnknownReason.COORDINATOR_UNREADABLE.value))
        .when(unlisted & reason.isNull(), ctx.value(_not_listed_unknown, "string"))
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
    confirmed = cycles >= ctx.value(lambda run: run.settings.hanging_confirm_cycles)
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
        c(CLUSTER),
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
        round_application_column(ctx, transactional_id).alias("application"),
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


def _kept_columns(ctx: Context) -> list[Column]:
    """A remembered candidate re-emitted unchanged (no evidence this cycle); its age moves on."""
    c = F.col
    start = c("prev_start_time_ms")
    now = ctx.value(lambda run: run.now_ms)
    cols: list[Column] = [c(CLUSTER)]
    for name in _FINDING_COLUMNS:
        if name in KEY:
            cols.append(c(name))
        elif name == "duration_ms":
            cols.append(
                F.when(start >= 0, F.greatest(F.lit(0), now - start))
                .otherwise(c("prev_duration_ms"))
                .alias(name)
            )
        else:
            cols.append(c(f"prev_{name}").alias(name))
    cols.append(c("previous_cycles").alias("candidate_cycles"))
    cols.append(_severity(c("prev_txn_class")).alias("severity"))
    return cols


# --- the family's outputs -------------------------------------------------------------------


def _frames(ctx: Context, selected: frozenset[str]) -> dict[str, DataFrame]:
    classified = ctx.classified_frame
    if classified is None:
        return {}
    c = F.col
    out: dict[str, DataFrame] = {}
    if "findings" in selected:
        out["findings"] = first_per_cluster(
            classified.where(c("txn_class") != TxnClass.ONGOING.value),
            ctx.value(lambda run: max(0, run.settings.max_findings)),
            c("severity"),
            c("late").desc(),
            c("duration_ms").desc(),
            "topic",
            "partition",
            "producer_id",
        )
    if "class_counts" in selected:
        out["class_counts"] = classified.groupBy(*keyed("txn_class")).count()
    if "unknown_counts" in selected:
        out["unknown_counts"] = (
            classified.where(c("unknown_reason").isNotNull())
            .groupBy(c(CLUSTER), c("unknown_reason").alias("reason"))
            .count()
        )
    if "candidates" in selected:
        out["candidates"] = classified.where(c("candidate_cycles").isNotNull()).select(
            CLUSTER, *_FINDING_COLUMNS, c("candidate_cycles").alias("previous_cycles")
        )
    return out


def _finding_order(f: Finding) -> tuple[int, bool, int, str, int, int]:
    return (SEVERITY.index(f.txn_class), not f.late, -f.duration_ms, f.topic, f.partition, f.producer_id)


def _assemble(a: Assembly) -> Parts:
    findings = sorted(records_of(Finding, a.of("findings")), key=_finding_order)
    by_class = dict.fromkeys(TxnClass, 0)
    for count in records_of(ClassCount, a.of("class_counts")):
        by_class[count.txn_class] = count.count
    unknown = dict.fromkeys(UnknownReason, 0)
    for u in records_of(UnknownCount, a.of("unknown_counts")):
        unknown[u.reason] = u.count
    candidates = sorted(
        (HangingCandidate(record_of(Finding, r), r["previous_cycles"]) for r in a.of("candidates")),
        key=lambda h: (h.finding.topic, h.finding.partition, h.finding.producer_id, h.finding.start_offset),
    )
    return Parts(
        result={
            "findings": tuple(findings[: max(0, a.run.settings.max_findings)]),
            "open_transactions_by_class": tuple(by_class.items()),
            "open_transactions_unknown": tuple(unknown.items()),
        },
        memory={"candidates": tuple(candidates)},
    )


FAMILY = Family(
    name="classification",
    reads=(
        "producers",
        "partitions",
        "broker_configs",
        "listed_transactions",
        "transactions",
        "transaction_partitions",
        "batch_timestamps",
        "reread_producers",
        "reread_partitions",
        "unread_partitions",
        "unread_topics",
        "previous_candidates",
    ),
    classified=True,
    outputs=(
        Output("findings", Finding),
        Output("class_counts", ClassCount),
        Output("unknown_counts", UnknownCount),
        Output("candidates", CandidateRow),
    ),
    inputs={"previous_candidates": Input(CandidateRow, _remembered)},
    carry=("candidates",),
    frames=_frames,
    assemble=_assemble,
    applies=_has_open_transactions,
    essential=True,
)
