"""The pipeline on small fixture snapshots: one test (or a few) per definition in
docs/metrics.md. No Kafka broker; one local Spark session for the whole run."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from exporter.config import SparkConfig
from exporter.config.groups import GroupsConfig
from exporter.model import (
    COORDINATOR_STATES,
    DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
    PROBE_MESSAGE,
    REREAD_MESSAGE,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    BatchTimestamp,
    Broker,
    BrokerConfig,
    ClusterSnapshot,
    CollectionError,
    CycleResult,
    Finding,
    GroupOffset,
    GroupsResult,
    HangingReason,
    ListedTransaction,
    PartitionOffsets,
    PipelineMemory,
    PipelineSettings,
    PreparingTransaction,
    ProducerState,
    StartTimeSource,
    TopicPartition,
    TransactionDescription,
    TxnClass,
    UnknownReason,
    WatchedTransaction,
)
from exporter.pipeline.compute import FINDINGS_OUTPUTS, ComputeStats, compute
from exporter.pipeline.families.base import Context
from exporter.pipeline.session import PLAN_DEFAULTS, compiled_leaf, local_jvm_pid, session_conf

NOW = 1_700_000_000_000
SEC = 1000
MIN = 60 * SEC
DAY = 24 * 60 * MIN
PID = 4242
TID = "orders-tx"
#: Older than the default transaction.max.timeout.ms (15 min) plus the late padding (5 min):
#: an open transaction no coordinator lists is a hanging candidate only past that age.
OLD = 30 * MIN

pytestmark = pytest.mark.spark

# --- fixture builders ------------------------------------------------------------------------


def producer(
    topic: str = "t",
    partition: int = 0,
    *,
    pid: int = PID,
    epoch: int = 5,
    start: int = 100,
    last_ts: int = NOW - OLD,
    broker: int = 1,
) -> ProducerState:
    return ProducerState(
        topic=topic,
        partition=partition,
        broker_id=broker,
        producer_id=pid,
        producer_epoch=epoch,
        last_sequence=7,
        last_timestamp_ms=last_ts,
        coordinator_epoch=3,
        current_txn_start_offset=start,
    )


def offsets(
    topic: str = "t", partition: int = 0, *, leader: int = 1, hw: int = 150, lso: int = 100, start: int = 0
) -> PartitionOffsets:
    return PartitionOffsets(
        topic, partition, leader, high_watermark=hw, last_stable_offset=lso, log_start_offset=start
    )


def listed(tid: str = TID, pid: int = PID, state: str = "Ongoing", coord: int = 1) -> ListedTransaction:
    return ListedTransaction(coordinator_id=coord, transactional_id=tid, producer_id=pid, state=state)


def described(
    tid: str = TID,
    *,
    pid: int = PID,
    epoch: int = 5,
    state: str = "Ongoing",
    parts: Iterable[tuple[str, int]] = (("t", 0),),
    start: int = NOW - 2 * MIN,
    timeout: int = MIN,
    coord: int = 1,
    error: str | None = None,
) -> TransactionDescription:
    return TransactionDescription(
        coordinator_id=coord,
        transactional_id=tid,
        error=error,
        state=state,
        timeout_ms=timeout,
        start_time_ms=start,
        producer_id=pid,
        producer_epoch=epoch,
        partitions=tuple(TopicPartition(t, p) for t, p in parts),
    )


def snapshot(
    *,
    producers: Iterable[ProducerState] = (),
    partitions: Iterable[PartitionOffsets] | None = None,
    listed_txns: Iterable[ListedTransaction] = (),
    txns: Iterable[TransactionDescription] = (),
    batches: Iterable[BatchTimestamp] = (),
    brokers: Iterable[int] = (1,),
    configs: Iterable[BrokerConfig] | None = None,
    coordinators_listed: Iterable[int] | None = None,
    errors: Iterable[CollectionError] = (),
    visible: bool | None = True,
    reread: Iterable[ProducerState] | None = None,
) -> ClusterSnapshot:
    """A snapshot as the collector builds it; by default the principal sees every
    transactional id and the re-read after the coordinators shows the same producers."""
    producers = tuple(producers)
    reread_rows = producers if reread is None else tuple(reread)
    broker_ids = tuple(brokers)
    if partitions is None:
        partitions = {(p.topic, p.partition): offsets(p.topic, p.partition) for p in producers}.values()
    return ClusterSnapshot(
        cluster="c1",
        taken_at_ms=NOW,
        brokers=tuple(Broker(b, f"b{b}", 9092) for b in broker_ids),
        broker_configs=tuple(configs) if configs is not None else tuple(BrokerConfig(b) for b in broker_ids),
        partitions=tuple(partitions),
        producers=producers,
        listed_transactions=tuple(listed_txns),
        transactions=tuple(txns),
        batch_timestamps=tuple(batches),
        errors=tuple(errors),
        coordinators_listed=frozenset(broker_ids if coordinators_listed is None else coordinators_listed),
        transactional_ids_visible=visible,
        reread_producers=reread_rows,
        reread_partitions=frozenset(
            (p.topic, p.partition) for p in producers if p.current_txn_start_offset >= 0
        ),
    )


AT_ONCE = PipelineSettings(hanging_confirm_cycles=1)


def run(
    spark: SparkSession,
    snap: ClusterSnapshot,
    settings: PipelineSettings = AT_ONCE,
    previous: CycleResult | None = None,
    now: int = NOW,
) -> CycleResult:
    return compute(spark, snap, settings, previous.memory if previous else None, now)


def candidates(result: CycleResult) -> tuple[tuple[tuple[str, int, int, int], int], ...]:
    """The remembered hanging candidates as ((topic, partition, producer id, start offset),
    consecutive cycles)."""
    return tuple(
        ((c.finding.topic, c.finding.partition, c.finding.producer_id, c.finding.start_offset), c.cycles)
        for c in result.memory.candidates
    )


def watched(result: CycleResult) -> tuple[tuple[str, int, int, int], ...]:
    """The remembered Ongoing transactions as (transactional id, producer id, epoch,
    deadline)."""
    return tuple(
        (w.transactional_id, w.producer_id, w.producer_epoch, w.deadline_ms) for w in result.memory.watched
    )


def watching(*entries: tuple[str, int, int, int], seen_at: int = NOW - 30 * SEC) -> CycleResult:
    """A previous cycle that remembered these Ongoing transactions, last seen at ``seen_at``."""
    return CycleResult(
        cluster="c1",
        computed_at_ms=seen_at,
        memory=PipelineMemory(
            watched=tuple(
                WatchedTransaction(tid, 1, pid, epoch, deadline, seen_at)
                for tid, pid, epoch, deadline in entries
            )
        ),
    )


def by_class(result: CycleResult) -> dict[TxnClass, int]:
    return dict(result.open_transactions_by_class)


def only(result: CycleResult) -> Finding:
    assert len(result.findings) == 1, result.findings
    return result.findings[0]


def legit_snapshot() -> ClusterSnapshot:
    """One open transaction its coordinator owns (Ongoing, includes the partition)."""
    return snapshot(producers=[producer()], listed_txns=[listed()], txns=[described()])


# --- open vs no open transaction -------------------------------------------------------------


def test_producer_without_open_transaction_is_not_counted(spark: SparkSession) -> None:
    result = run(spark, snapshot(producers=[producer(start=-1)]))
    assert result.findings == ()
    assert set(by_class(result)) == set(TxnClass)
    assert all(n == 0 for n in by_class(result).values())
    (part,) = result.partitions
    assert part.max_active_transaction_duration_ms is None
    assert part.lso_lag == 50


def test_open_transaction_owned_by_its_coordinator_is_ongoing(spark: SparkSession) -> None:
    result = run(spark, legit_snapshot())
    assert result.findings == ()  # plain ongoing transactions are counted, not listed
    assert by_class(result)[TxnClass.ONGOING] == 1
    assert sum(by_class(result).values()) == 1
    assert candidates(result) == ()
    (part,) = result.partitions
    assert part.max_active_transaction_duration_ms == 2 * MIN


# --- hanging reasons -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("listed_txns", "txns", "reason"),
    [
        ([], [], HangingReason.NO_TRANSACTIONAL_ID),
        (
            [listed()],
            [described(error="TRANSACTIONAL_ID_NOT_FOUND", state="", parts=())],
            HangingReason.TRANSACTIONAL_ID_NOT_FOUND,
        ),
        ([listed()], [described(pid=PID + 1)], HangingReason.PRODUCER_ID_CHANGED),
        (
            [listed(state="Empty")],
            [described(state="Empty", parts=(), start=-1)],
            HangingReason.COORDINATOR_NOT_OPEN,
        ),
        (
            [listed(state="CompleteCommit")],
            [described(state="CompleteCommit", parts=())],
            HangingReason.COORDINATOR_NOT_OPEN,
        ),
        (
            [listed(state="CompleteAbort")],
            [described(state="CompleteAbort", parts=())],
            HangingReason.COORDINATOR_NOT_OPEN,
        ),
        ([listed(state="Dead")], [described(state="Dead", parts=())], HangingReason.COORDINATOR_NOT_OPEN),
        ([listed()], [described(parts=[("t", 1), ("other", 0)])], HangingReason.PARTITION_NOT_IN_TRANSACTION),
    ],
    ids=[
        "not-listed",
        "id-not-found",
        "pid-changed",
        "empty",
        "complete-commit",
        "complete-abort",
        "dead",
        "partition-not-in-txn",
    ],
)
def test_each_hanging_reason(
    spark: SparkSession,
    listed_txns: list[ListedTransaction],
    txns: list[TransactionDescription],
    reason: HangingReason,
) -> None:
    result = run(spark, snapshot(producers=[producer()], listed_txns=listed_txns, txns=txns))
    finding = only(result)
    assert finding.txn_class is TxnClass.HANGING
    assert finding.hanging
    assert finding.hanging_reason is reason
    assert (finding.topic, finding.partition, finding.producer_id, finding.start_offset) == ("t", 0, PID, 100)
    assert finding.broker_id == 1
    assert finding.transactional_id == (None if reason is HangingReason.NO_TRANSACTIONAL_ID else TID)
    assert by_class(result)[TxnClass.HANGING] == 1
    assert result.brokers[0].hanging_transactions == 1
    assert candidates(result) == ((("t", 0, PID, 100), 1),)


def test_legitimate_owner_wins_over_a_stale_listing(spark: SparkSession) -> None:
    # Two ids listed for the producer id: one stale (not found), one that owns the partition.
    snap = snapshot(
        producers=[producer()],
        listed_txns=[listed("stale"), listed()],
        txns=[described("stale", error="TRANSACTIONAL_ID_NOT_FOUND", parts=()), described()],
    )
    assert by_class(run(spark, snap))[TxnClass.ONGOING] == 1


def test_tv2_epoch_bump_during_prepare_commit_is_not_hanging(spark: SparkSession) -> None:
    # KIP-890: the coordinator already shows epoch E+1, the unmarked partition still E.
    snap = snapshot(
        producers=[producer(epoch=5)],
        listed_txns=[listed(state="PrepareCommit")],
        txns=[described(state="PrepareCommit", epoch=6)],
    )
    result = run(spark, snap)
    assert result.findings == ()
    assert by_class(result)[TxnClass.ONGOING] == 1


# --- unknown when the coordinator side could not be read -------------------------------------


@pytest.mark.parametrize(
    "snap",
    [
        # broker 2 did not answer ListTransactions: it might be the one listing the id
        snapshot(producers=[producer()], brokers=(1, 2), coordinators_listed=(1,)),
        # ListTransactions failed and was recorded as an error
        snapshot(
            producers=[producer()], errors=[CollectionError("ListTransactions", "TIMEOUT", broker_id=1)]
        ),
        # no coordinator answered at all and no broker is known
        snapshot(producers=[producer()], brokers=(), coordinators_listed=()),
        # listed, but DescribeTransactions failed for another reason than not-found
        snapshot(
            producers=[producer()],
            listed_txns=[listed()],
            txns=[described(error="COORDINATOR_NOT_AVAILABLE", state="", parts=())],
        ),
        # listed, but not described at all
        snapshot(producers=[producer()], listed_txns=[listed()]),
    ],
    ids=["broker-not-listed", "list-error", "nothing-listed", "describe-error", "not-described"],
)
def test_unreadable_coordinator_side_is_unknown_not_hanging(
    spark: SparkSession, snap: ClusterSnapshot
) -> None:
    result = run(spark, snap)
    finding = only(result)
    assert finding.txn_class is TxnClass.UNKNOWN
    assert finding.hanging_reason is None
    assert candidates(result) == ()
    assert by_class(result)[TxnClass.UNKNOWN] == 1
    assert all(b.hanging_transactions == 0 for b in result.brokers)


# --- confirmation over cycles ----------------------------------------------------------------


def test_candidate_is_suspected_then_hanging_in_the_second_cycle(spark: SparkSession) -> None:
    settings = PipelineSettings(hanging_confirm_cycles=2)
    snap = snapshot(producers=[producer()])
    first = run(spark, snap, settings)
    assert only(first).txn_class is TxnClass.SUSPECTED_HANGING
    assert only(first).hanging_reason is HangingReason.NO_TRANSACTIONAL_ID
    assert candidates(first) == ((("t", 0, PID, 100), 1),)
    assert first.brokers[0].hanging_transactions == 0

    second = run(spark, snap, settings, previous=first, now=NOW + 30 * SEC)
    assert only(second).txn_class is TxnClass.HANGING
    assert candidates(second) == ((("t", 0, PID, 100), 2),)
    assert second.brokers[0].hanging_transactions == 1

    third = run(spark, snap, settings, previous=second, now=NOW + 60 * SEC)
    assert only(third).txn_class is TxnClass.HANGING
    assert candidates(third) == ((("t", 0, PID, 100), 3),)


def test_confirmation_resets_when_the_start_offset_changes(spark: SparkSession) -> None:
    settings = PipelineSettings(hanging_confirm_cycles=2)
    first = run(spark, snapshot(producers=[producer(start=100)]), settings)
    second = run(spark, snapshot(producers=[producer(start=180)]), settings, previous=first)
    assert only(second).txn_class is TxnClass.SUSPECTED_HANGING
    assert candidates(second) == ((("t", 0, PID, 180), 1),)


def test_confirmation_resets_when_the_candidate_goes_away(spark: SparkSession) -> None:
    settings = PipelineSettings(hanging_confirm_cycles=2)
    first = run(spark, snapshot(producers=[producer()]), settings)
    second = run(spark, legit_snapshot(), settings, previous=first)
    assert candidates(second) == ()
    third = run(spark, snapshot(producers=[producer()]), settings, previous=second)
    assert only(third).txn_class is TxnClass.SUSPECTED_HANGING


# --- start time and duration -----------------------------------------------------------------


def test_start_time_comes_from_the_coordinator_first(spark: SparkSession) -> None:
    # The producer wrote a minute ago, but the transaction started 20 minutes ago: the
    # duration is measured from the start, not from LastTimestamp.
    snap = snapshot(
        producers=[producer(last_ts=NOW - MIN)],
        listed_txns=[listed()],
        txns=[described(start=NOW - 20 * MIN, timeout=DAY)],
        batches=[BatchTimestamp("t", 0, 100, NOW - 19 * MIN)],
    )
    result = run(spark, snap, PipelineSettings(late_padding_ms=0))
    (part,) = result.partitions
    assert part.max_active_transaction_duration_ms == 20 * MIN


def test_start_time_from_batch_timestamp_when_coordinator_does_not_own_it(
    spark: SparkSession,
) -> None:
    snap = snapshot(
        producers=[producer(last_ts=NOW - MIN)],
        batches=[
            BatchTimestamp("t", 0, 100, NOW - 30 * MIN),
            BatchTimestamp("t", 0, 99, NOW - 99 * MIN),  # another offset: ignored
        ],
    )
    finding = only(run(spark, snap))
    assert finding.start_time_source is StartTimeSource.BATCH_TIMESTAMP
    assert finding.start_time_ms == NOW - 30 * MIN
    assert finding.duration_ms == 30 * MIN
    assert finding.last_timestamp_ms == NOW - MIN


def test_start_time_falls_back_to_last_timestamp(spark: SparkSession) -> None:
    finding = only(run(spark, snapshot(producers=[producer(last_ts=NOW - 7 * MIN)])))
    assert finding.start_time_source is StartTimeSource.LAST_TIMESTAMP
    assert finding.start_time_ms == NOW - 7 * MIN
    assert finding.duration_ms == 7 * MIN


def test_coordinator_start_time_needs_an_open_owner_including_the_partition(
    spark: SparkSession,
) -> None:
    # Open but without the partition: its start time says nothing about this partition.
    snap = snapshot(
        producers=[producer(last_ts=NOW - MIN)],
        listed_txns=[listed()],
        txns=[described(parts=[("t", 1)], start=NOW - 40 * MIN)],
        batches=[BatchTimestamp("t", 0, 100, NOW - 10 * MIN)],
    )
    finding = only(run(spark, snap))
    assert finding.start_time_source is StartTimeSource.BATCH_TIMESTAMP
    assert finding.duration_ms == 10 * MIN


def test_coordinator_source_is_reported_on_findings(spark: SparkSession) -> None:
    snap = snapshot(
        producers=[producer(last_ts=NOW - MIN)],
        listed_txns=[listed()],
        txns=[described(start=NOW - 30 * MIN, timeout=MIN)],
    )
    finding = only(run(spark, snap, PipelineSettings(late_padding_ms=0)))
    assert finding.txn_class is TxnClass.LATE
    assert finding.start_time_source is StartTimeSource.COORDINATOR
    assert finding.start_time_ms == NOW - 30 * MIN
    assert finding.coordinator_state == "Ongoing"
    assert finding.coordinator_id == 1
    assert finding.transaction_timeout_ms == MIN


# --- late ------------------------------------------------------------------------------------


def test_late_uses_each_leaders_own_max_timeout_and_the_padding(spark: SparkSession) -> None:
    started = NOW - 10 * MIN
    producers = [
        producer("a", 0, pid=1, broker=1),
        producer("b", 0, pid=2, broker=2),
        producer("c", 0, pid=3, broker=3),  # no BrokerConfig: Kafka's default 15 minutes
    ]
    snap = snapshot(
        producers=producers,
        partitions=[offsets("a", leader=1), offsets("b", leader=2), offsets("c", leader=3)],
        listed_txns=[listed(f"tx{i}", pid=i) for i in (1, 2, 3)],
        txns=[
            described(f"tx{i}", pid=i, parts=[(t, 0)], start=started, timeout=MIN)
            for i, t in ((1, "a"), (2, "b"), (3, "c"))
        ],
        brokers=(1, 2, 3),
        configs=[
            BrokerConfig(1, transaction_max_timeout_ms=4 * MIN),
            BrokerConfig(2, transaction_max_timeout_ms=6 * MIN),
        ],
    )
    padding = 5 * MIN
    result = run(spark, snap, PipelineSettings(late_padding_ms=padding))
    # broker 1: 10 > 4 + 5 -> late; broker 2: 10 > 6 + 5 is false; broker 3: 10 > 15 + 5 false
    finding = only(result)
    assert (finding.topic, finding.txn_class, finding.late) == ("a", TxnClass.LATE, True)
    late = {b.broker_id: b.partitions_with_late_transactions for b in result.brokers}
    assert late == {1: 1, 2: 0, 3: 0}
    assert {b.broker_id: b.transaction_max_timeout_ms for b in result.brokers} == {
        1: 4 * MIN,
        2: 6 * MIN,
        3: DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
    }
    assert by_class(result)[TxnClass.LATE] == 1
    assert by_class(result)[TxnClass.ONGOING] == 2

    # Less padding makes broker 2's late too; exactly at the threshold is not late.
    tighter = run(spark, snap, PipelineSettings(late_padding_ms=4 * MIN))
    late = {b.broker_id: b.partitions_with_late_transactions for b in tighter.brokers}
    assert late == {1: 1, 2: 0, 3: 0}  # 10 > 6 + 4 is false: strictly greater
    tighter = run(spark, snap, PipelineSettings(late_padding_ms=4 * MIN - 1))
    late = {b.broker_id: b.partitions_with_late_transactions for b in tighter.brokers}
    assert late == {1: 1, 2: 1, 3: 0}


def test_late_partition_counted_once_with_two_late_producers(spark: SparkSession) -> None:
    snap = snapshot(
        producers=[producer(pid=1, last_ts=NOW - DAY), producer(pid=2, start=120, last_ts=NOW - DAY)],
        brokers=(1, 2),
        coordinators_listed=(1,),
    )  # unknown, but late
    result = run(spark, snap)
    assert [f.late for f in result.findings] == [True, True]
    assert [f.txn_class for f in result.findings] == [TxnClass.UNKNOWN] * 2
    assert {b.broker_id: b.partitions_with_late_transactions for b in result.brokers} == {1: 1, 2: 0}


# --- two-phase commit ------------------------------------------------------------------------


def test_two_phase_commit_is_never_hanging_for_its_age(spark: SparkSession) -> None:
    snap = snapshot(
        producers=[producer(last_ts=NOW - 30 * DAY)],
        listed_txns=[listed()],
        txns=[described(start=NOW - 30 * DAY, timeout=TWO_PHASE_COMMIT_TIMEOUT_MS, state="PrepareCommit")],
    )
    result = run(spark, snap)
    finding = only(result)
    assert finding.txn_class is TxnClass.TWO_PHASE_COMMIT
    assert finding.late  # the broker's own late gauge counts it too
    assert finding.duration_ms == 30 * DAY
    assert candidates(result) == ()
    assert result.brokers[0].partitions_with_late_transactions == 1
    assert result.brokers[0].hanging_transactions == 0
    (coordinator,) = result.coordinators
    assert coordinator.two_phase_commit_open_time_max_ms == 30 * DAY
    # A prepared 2PC transaction must not fire KafkaTransactionCoordinatorOpenTimeHigh.
    assert coordinator.active_transaction_open_time_max_ms == 0
    assert watched(result) == ()  # never timed out by the coordinator


def test_two_phase_commit_without_the_partition_is_still_a_candidate(spark: SparkSession) -> None:
    snap = snapshot(
        producers=[producer()],
        listed_txns=[listed()],
        txns=[described(parts=[("t", 9)], timeout=TWO_PHASE_COMMIT_TIMEOUT_MS)],
    )
    assert only(run(spark, snap)).hanging_reason is HangingReason.PARTITION_NOT_IN_TRANSACTION


# --- class precedence and findings order ------------------------------------------------------


def test_findings_sorted_most_severe_then_oldest_and_capped(spark: SparkSession) -> None:
    producers = [
        producer("h", 0, pid=1, last_ts=NOW - OLD),  # hanging
        producer("h", 1, pid=2, last_ts=NOW - OLD - MIN),  # hanging, older
        producer("l", 0, pid=3),  # late (owned, old)
        producer("p", 0, pid=4),  # 2PC
        producer("o", 0, pid=5),
    ]  # ongoing
    snap = snapshot(
        producers=producers,
        listed_txns=[listed("l", pid=3), listed("p", pid=4), listed("o", pid=5)],
        txns=[
            described("l", pid=3, parts=[("l", 0)], start=NOW - DAY),
            described("p", pid=4, parts=[("p", 0)], start=NOW - MIN, timeout=TWO_PHASE_COMMIT_TIMEOUT_MS),
            described("o", pid=5, parts=[("o", 0)], start=NOW - MIN),
        ],
    )
    result = run(spark, snap)
    assert [(f.topic, f.partition, f.txn_class) for f in result.findings] == [
        ("h", 1, TxnClass.HANGING),
        ("h", 0, TxnClass.HANGING),
        ("l", 0, TxnClass.LATE),
        ("p", 0, TxnClass.TWO_PHASE_COMMIT),
    ]
    assert by_class(result) == {
        TxnClass.ONGOING: 1,
        TxnClass.LATE: 1,
        TxnClass.HANGING: 2,
        TxnClass.SUSPECTED_HANGING: 0,
        TxnClass.TWO_PHASE_COMMIT: 1,
        TxnClass.UNKNOWN: 0,
    }

    capped = run(spark, snap, PipelineSettings(hanging_confirm_cycles=1, max_findings=3))
    assert [f.topic for f in capped.findings] == ["h", "h", "l"]
    assert by_class(capped) == by_class(result)  # counts are never capped
    assert run(spark, snap, PipelineSettings(max_findings=0)).findings == ()


def test_candidate_takes_precedence_over_late(spark: SparkSession) -> None:
    finding = only(run(spark, snapshot(producers=[producer(last_ts=NOW - DAY)])))
    assert finding.txn_class is TxnClass.HANGING
    assert finding.late


# --- LSO lag, brokers, coordinators ----------------------------------------------------------


def test_lso_lag_per_partition_and_broker_max(spark: SparkSession) -> None:
    snap = snapshot(
        partitions=[
            offsets("t", 0, leader=1, hw=500, lso=100),
            offsets("t", 1, leader=1, hw=70, lso=70),
            offsets("t", 2, leader=2, hw=30, lso=10),
            offsets("t", 3, leader=2, hw=-1, lso=10),  # offsets not read
            offsets("t", 4, leader=-1, hw=9, lso=1),  # leaderless
        ],
        brokers=(1, 2, 3),
    )
    result = run(spark, snap, PipelineSettings(lso_lag_series="all"))
    assert [(p.topic, p.partition, p.leader, p.lso_lag) for p in result.partitions] == [
        ("t", 0, 1, 400),
        ("t", 1, 1, 0),
        ("t", 2, 2, 20),
        ("t", 3, 2, None),
        ("t", 4, -1, 8),
    ]
    assert all(p.max_active_transaction_duration_ms is None for p in result.partitions)
    assert {b.broker_id: b.max_last_stable_offset_lag for b in result.brokers} == {1: 400, 2: 20, 3: 0}
    assert all(b.verification_enabled for b in result.brokers)


@pytest.mark.parametrize("series", ["nonzero", "open"])
def test_a_caught_up_partition_without_an_open_transaction_comes_back_only_when_every_partition_gets_a_series(
    spark: SparkSession, series: str
) -> None:
    snap = snapshot(
        producers=[producer("t", 2, pid=1)],
        partitions=[
            offsets("t", 0, leader=1, hw=500, lso=100),
            offsets("t", 1, leader=1, hw=70, lso=70),  # caught up, nothing open: left out
            offsets("t", 2, leader=2, hw=100, lso=100),  # read just before an open transaction's first batch
            offsets("t", 3, leader=2, hw=-1, lso=10),  # offsets not read
        ],
        brokers=(1, 2),
    )
    result = run(spark, snap, PipelineSettings(lso_lag_series=series))
    assert [(p.partition, p.lso_lag) for p in result.partitions] == [(0, 400), (2, 0), (3, None)]
    assert result.partitions[1].max_active_transaction_duration_ms is not None
    # The brokers still count every partition they lead.
    assert {b.broker_id: b.max_last_stable_offset_lag for b in result.brokers} == {1: 400, 2: 0}


def test_max_active_duration_is_the_oldest_open_transaction(spark: SparkSession) -> None:
    snap = snapshot(
        producers=[
            producer(pid=1, last_ts=NOW - 3 * MIN),
            producer(pid=2, start=120, last_ts=NOW - 9 * MIN),
            producer("u", 0, pid=3, last_ts=NOW - MIN),
        ],
        partitions=[offsets("t", 0)],
    )  # "u" has no offsets: still a partition
    result = run(spark, snap)
    assert [
        (p.topic, p.leader, p.lso_lag, p.max_active_transaction_duration_ms) for p in result.partitions
    ] == [("t", 1, 50, 9 * MIN), ("u", 1, None, MIN)]


def test_broker_metrics_zero_filled_with_config(spark: SparkSession) -> None:
    snap = snapshot(
        brokers=(1, 2),
        configs=[BrokerConfig(1, verification_enabled=False, transaction_max_timeout_ms=MIN)],
    )
    result = run(spark, snap)
    assert [
        (
            b.broker_id,
            b.partitions_with_late_transactions,
            b.hanging_transactions,
            b.max_last_stable_offset_lag,
            b.verification_enabled,
            b.transaction_max_timeout_ms,
        )
        for b in result.brokers
    ] == [
        (1, 0, 0, 0, False, MIN),
        # Broker 2's configs were not read: no verification value (absent, never a guess).
        (2, 0, 0, 0, None, DEFAULT_TRANSACTION_MAX_TIMEOUT_MS),
    ]


def _listing(
    *entries: tuple[str, int, str, int], answered: Iterable[int] = (1, 2), at: int = NOW
) -> ClusterSnapshot:
    """A snapshot whose coordinators list these (transactional id, producer id, state,
    coordinator) entries, taken at ``at``."""
    snap = snapshot(brokers=(1, 2), coordinators_listed=answered, listed_txns=[listed(*e) for e in entries])
    return replace(snap, taken_at_ms=at)


def _prepare_times(result: CycleResult) -> dict[int, int]:
    return {c.coordinator_id: c.prepare_time_max_ms for c in result.coordinators}


def test_markers_pending_time_counts_from_the_first_cycle_that_listed_the_id_in_prepare(
    spark: SparkSession,
) -> None:
    first = run(spark, _listing(("stuck", 7, "PrepareCommit", 1), ("busy", 8, "Ongoing", 2)))
    assert _prepare_times(first) == {1: 0, 2: 0}
    later = NOW + 3 * MIN
    second = run(
        spark,
        _listing(("stuck", 7, "PrepareCommit", 1), ("busy", 8, "PrepareAbort", 2), at=later),
        previous=first,
        now=later,
    )
    assert _prepare_times(second) == {1: 3 * MIN, 2: 0}
    done = run(
        spark,
        _listing(("stuck", 7, "CompleteCommit", 1), ("busy", 8, "PrepareAbort", 2), at=later + MIN),
        previous=second,
        now=later + MIN,
    )
    assert _prepare_times(done) == {1: 0, 2: MIN}
    assert [p.transactional_id for p in done.memory.preparing] == ["busy"]


def test_markers_pending_restarts_for_a_new_state_or_producer_id(spark: SparkSession) -> None:
    first = run(spark, _listing(("a", 7, "PrepareCommit", 1), ("b", 8, "PrepareCommit", 2)))
    later = NOW + MIN
    second = run(
        spark,
        _listing(("a", 7, "PrepareAbort", 1), ("b", 9, "PrepareCommit", 2), at=later),
        previous=first,
        now=later,
    )
    assert _prepare_times(second) == {1: 0, 2: 0}


def test_markers_pending_keeps_counting_through_an_unanswered_listing(spark: SparkSession) -> None:
    first = run(spark, _listing(("stuck", 7, "PrepareCommit", 1)))
    later = NOW + 2 * MIN
    blind = run(spark, _listing(answered=(2,), at=later), previous=first, now=later)
    assert [p.transactional_id for p in blind.memory.preparing] == ["stuck"]
    seen = run(
        spark, _listing(("stuck", 7, "PrepareCommit", 1), at=later + MIN), previous=blind, now=later + MIN
    )
    assert _prepare_times(seen)[1] == 3 * MIN


def test_markers_pending_forgets_an_id_whose_coordinator_left_the_cluster(spark: SparkSession) -> None:
    """Broker 9 listed the id in PrepareCommit, then left; its successor finished the markers
    before the next cycle, so nobody lists it: no evidence would keep it forever."""
    gone = PipelineMemory(preparing=(PreparingTransaction(9, "stuck", 7, "PrepareCommit", NOW - 120 * MIN),))
    result = compute(spark, _listing(answered=(1, 2)), AT_ONCE, gone, NOW)
    assert result.memory.preparing == ()
    assert _prepare_times(result) == {1: 0, 2: 0}


def test_markers_pending_keeps_counting_when_the_id_moves_to_another_coordinator(
    spark: SparkSession,
) -> None:
    """__transaction_state leadership moved: the new coordinator loads the id still in
    PrepareCommit and writes the same markers, while the old one answers without it."""
    first = run(spark, _listing(("stuck", 7, "PrepareCommit", 1), answered=(1, 2)))
    later = NOW + 10 * MIN
    listing = _listing(("stuck", 7, "PrepareCommit", 2), answered=(1, 2), at=later)
    moved = run(spark, listing, previous=first, now=later)
    assert _prepare_times(moved) == {1: 0, 2: 10 * MIN}
    assert [(p.coordinator_id, p.since_ms) for p in moved.memory.preparing] == [(2, NOW)]


def test_coordinator_open_time_and_state_counts(spark: SparkSession) -> None:
    snap = snapshot(
        brokers=(1, 2, 3),
        coordinators_listed=(1, 2, 3),
        listed_txns=[
            listed("a", 1, "Ongoing", 1),
            listed("b", 2, "PrepareCommit", 1),
            listed("c", 3, "CompleteCommit", 1),
            listed("d", 4, "Empty", 2),
            listed("e", 5, "Ongoing", 2),
        ],
        txns=[
            described("a", pid=1, start=NOW - 3 * MIN, coord=1),
            described("b", pid=2, state="PrepareCommit", start=NOW - 5 * MIN, coord=1),
            described("c", pid=3, state="CompleteCommit", start=NOW - DAY, coord=1),
            described("d", pid=4, state="Empty", start=-1, coord=2),
            described("e", pid=5, start=-1, coord=2),
        ],  # open without a start time
    )
    result = run(spark, snap)
    coordinators = {c.coordinator_id: c for c in result.coordinators}
    assert set(coordinators) == {1, 2, 3}
    assert coordinators[1].active_transaction_open_time_max_ms == 5 * MIN
    assert coordinators[2].active_transaction_open_time_max_ms == 0
    assert coordinators[3].active_transaction_open_time_max_ms == 0
    assert all(c.two_phase_commit_open_time_max_ms == 0 for c in result.coordinators)
    states = {cid: dict(c.transactions_by_state) for cid, c in coordinators.items()}
    assert all(tuple(s) == COORDINATOR_STATES for s in states.values())
    assert states[1] == {
        **dict.fromkeys(COORDINATOR_STATES, 0),
        "Ongoing": 1,
        "PrepareCommit": 1,
        "CompleteCommit": 1,
    }
    assert states[2] == {**dict.fromkeys(COORDINATOR_STATES, 0), "Empty": 1, "Ongoing": 1}
    assert states[3] == dict.fromkeys(COORDINATOR_STATES, 0)


def _open_times(result: CycleResult) -> dict[int, tuple[int, int]]:
    return {
        c.coordinator_id: (c.active_transaction_open_time_max_ms, c.two_phase_commit_open_time_max_ms)
        for c in result.coordinators
    }


@pytest.mark.parametrize(
    "lost",
    [
        CollectionError(api="ListTransactions", error="REQUEST_TIMED_OUT", broker_id=1),
        CollectionError(api="DescribeTransactions", error="COORDINATOR_LOAD_IN_PROGRESS", broker_id=1),
        CollectionError(api="DescribeTransactions", error="DEADLINE_EXCEEDED"),
    ],
    ids=["listing-unanswered", "describe-failed", "describe-stage-cut"],
)
def test_a_coordinator_that_could_not_be_read_keeps_its_open_time_ageing(
    spark: SparkSession, lost: CollectionError
) -> None:
    """The coordinator in trouble is the one whose open-time warning must not resolve: a
    cycle without its answer keeps the remembered oldest start, ageing, instead of dropping
    the series or reading 0. The next cycle that reads it tells the truth again."""
    snap = snapshot(
        brokers=(1, 2),
        coordinators_listed=(1, 2),
        listed_txns=[listed("slow", 1, "Ongoing", 1), listed("twopc", 2, "Ongoing", 2)],
        txns=[
            described("slow", pid=1, start=NOW - 20 * MIN, coord=1),
            described("twopc", pid=2, start=NOW - 30 * MIN, coord=2, timeout=TWO_PHASE_COMMIT_TIMEOUT_MS),
        ],
    )
    first = run(spark, snap)
    assert _open_times(first) == {1: (20 * MIN, 0), 2: (0, 30 * MIN)}
    later = NOW + 2 * MIN
    if lost.api == "ListTransactions":
        blind = replace(
            snap,
            coordinators_listed=frozenset({2}),
            listed_transactions=snap.listed_transactions[1:],
            transactions=snap.transactions[1:],
        )
    elif lost.broker_id == 1:
        failed = replace(snap.transactions[0], error="COORDINATOR_LOAD_IN_PROGRESS", start_time_ms=-1)
        blind = replace(snap, transactions=(failed, snap.transactions[1]))
    else:
        blind = replace(snap, transactions=())
    kept = run(spark, replace(blind, errors=(lost,), taken_at_ms=later), previous=first, now=later)
    assert _open_times(kept) == {1: (22 * MIN, 0), 2: (0, 32 * MIN)}
    # Read again, with the slow transaction completed: 0, and nothing left to carry for it.
    done = replace(
        snap,
        listed_transactions=snap.listed_transactions[1:],
        transactions=snap.transactions[1:],
        taken_at_ms=later + MIN,
    )
    read = run(spark, done, previous=kept, now=later + MIN)
    assert _open_times(read) == {1: (0, 0), 2: (0, 33 * MIN)}
    assert [o.coordinator_id for o in read.memory.coordinator_open] == [2]


def test_a_coordinator_unread_for_long_is_no_longer_carried(spark: SparkSession) -> None:
    """Carried open times only grow, whatever became of the transaction: past
    COORDINATOR_OPEN_CARRY_MS of cycles that cannot read the coordinator, they stop; and a
    failing visibility probe (an id no producer uses) says nothing about any coordinator."""
    snap = snapshot(
        brokers=(1, 2),
        coordinators_listed=(1, 2),
        listed_txns=[listed("slow", 1, "Ongoing", 1)],
        txns=[described("slow", pid=1, start=NOW - 20 * MIN, coord=1)],
    )
    first = run(spark, snap)
    failing = replace(
        snap,
        transactions=(replace(snap.transactions[0], error="LOAD", start_time_ms=-1),),
        errors=(CollectionError(api="DescribeTransactions", error="LOAD", broker_id=1),),
    )
    result, at = first, NOW
    for minutes in (5, 10, 15):
        at = NOW + minutes * MIN
        result = run(spark, replace(failing, taken_at_ms=at), previous=result, now=at)
        assert _open_times(result)[1] == ((20 + minutes) * MIN, 0)
    at = NOW + 16 * MIN
    result = run(spark, replace(failing, taken_at_ms=at), previous=result, now=at)
    assert _open_times(result)[1] == (0, 0)
    # A probe failure alone: coordinator 1 answered and has nothing open, nothing carried.
    probe = CollectionError(
        api="DescribeTransactions", error="UNKNOWN_SERVER_ERROR", broker_id=1, message=PROBE_MESSAGE
    )
    quiet = replace(snap, listed_transactions=(), transactions=(), errors=(probe,))
    assert _open_times(run(spark, quiet, previous=first))[1] == (0, 0)


# --- KIP-588 timeout aborts ------------------------------------------------------------------


def test_timeout_abort_detected_across_two_cycles(spark: SparkSession) -> None:
    first = run(
        spark,
        snapshot(
            listed_txns=[listed("slow"), listed("fine", pid=7), listed("twopc", pid=8)],
            txns=[
                described("slow", epoch=5, start=NOW - 2 * MIN, timeout=MIN),
                described("fine", pid=7, start=NOW - 10 * SEC, timeout=MIN),
                described("twopc", pid=8, start=NOW - DAY, timeout=TWO_PHASE_COMMIT_TIMEOUT_MS),
            ],
        ),
    )
    assert watched(first) == (("fine", 7, 5, NOW - 10 * SEC + MIN), ("slow", PID, 5, NOW - 2 * MIN + MIN))
    assert first.timeout_aborts == ()

    second = run(
        spark,
        snapshot(
            listed_txns=[listed("slow", state="CompleteAbort", coord=2)],
            txns=[described("slow", epoch=6, state="CompleteAbort", parts=(), coord=2)],
            brokers=(1, 2),
        ),
        previous=first,
        now=NOW + 30 * SEC,
    )
    (abort,) = second.timeout_aborts
    assert (
        abort.transactional_id,
        abort.coordinator_id,
        abort.producer_id,
        abort.old_epoch,
        abort.new_epoch,
    ) == ("slow", 2, PID, 5, 6)
    assert watched(second) == ()


def test_abort_before_the_deadline_is_the_producers_own(spark: SparkSession) -> None:
    """Aborted with a bumped epoch (TV2) while its deadline is still ahead: a client abort."""
    previous = watching(("slow", PID, 5, NOW + MIN))
    result = run(
        spark, snapshot(txns=[described("slow", epoch=6, state="CompleteAbort", parts=())]), previous=previous
    )
    assert result.timeout_aborts == ()


@pytest.mark.parametrize(
    ("txn", "expected"),
    [
        (described("slow", epoch=5, state="CompleteAbort", parts=()), 0),  # same epoch
        (described("slow", epoch=6, state="CompleteCommit", parts=()), 0),  # committed
        (described("slow", epoch=6, state="PrepareAbort", parts=()), 1),
        (described("slow", pid=PID + 1, epoch=0, state="CompleteAbort", parts=()), 1),
    ],
    ids=["same-epoch", "committed", "prepare-abort", "new-producer-id"],
)
def test_timeout_abort_needs_an_abort_with_a_bumped_epoch(
    spark: SparkSession, txn: TransactionDescription, expected: int
) -> None:
    previous = watching(("slow", PID, 5, NOW - MIN))
    result = run(spark, snapshot(txns=[txn]), previous=previous)
    assert len(result.timeout_aborts) == expected


def test_watched_kept_while_its_coordinator_is_unreadable(spark: SparkSession) -> None:
    previous = watching(("slow", PID, 5, NOW - MIN))
    unreadable = run(
        spark,
        snapshot(txns=[described("slow", error="COORDINATOR_LOAD_IN_PROGRESS", state="", parts=())]),
        previous=previous,
    )
    assert watched(unreadable) == (("slow", PID, 5, NOW - MIN),)
    gone = run(
        spark,
        snapshot(txns=[described("slow", error="TRANSACTIONAL_ID_NOT_FOUND", state="", parts=())]),
        previous=previous,
    )
    assert watched(gone) == ()
    listed_only = run(spark, snapshot(listed_txns=[listed("slow")]), previous=previous)
    assert watched(listed_only) == (("slow", PID, 5, NOW - MIN),)
    forgotten = run(spark, snapshot(), previous=previous)
    assert watched(forgotten) == ()


# --- empty and partial snapshots, cost -------------------------------------------------------


def test_empty_snapshot(spark: SparkSession) -> None:
    stats = ComputeStats()
    result = compute(
        spark, ClusterSnapshot(cluster="c1", taken_at_ms=NOW), PipelineSettings(), None, NOW, stats=stats
    )
    assert result.cluster == "c1"
    assert result.computed_at_ms == NOW
    assert (
        result.partitions,
        result.findings,
        result.coordinators,
        result.timeout_aborts,
        watched(result),
        candidates(result),
    ) == ((), (), (), (), (), ())
    assert result.brokers == ()
    assert by_class(result) == dict.fromkeys(TxnClass, 0)


def test_partial_snapshot_computes_what_it_can(spark: SparkSession) -> None:
    snap = snapshot(
        producers=[producer()],
        partitions=[],  # ListOffsets failed
        errors=[
            CollectionError("ListOffsets", "TIMEOUT", broker_id=1),
            CollectionError("DescribeTransactions", "COORDINATOR_NOT_AVAILABLE"),
        ],
        listed_txns=[listed()],
    )
    result = run(spark, snap)
    assert only(result).txn_class is TxnClass.UNKNOWN
    (part,) = result.partitions
    assert (part.topic, part.leader, part.lso_lag) == ("t", 1, None)


def test_every_output_comes_back_in_one_spark_action(spark: SparkSession) -> None:
    stats = ComputeStats()
    first = compute(spark, snapshot(producers=[producer()]), PipelineSettings(), None, NOW)
    snap = snapshot(
        producers=[producer(), producer("u", pid=9)],
        listed_txns=[listed(), listed("slow", pid=8)],
        txns=[described(), described("slow", pid=8, state="CompleteAbort", epoch=9, parts=())],
    )
    memory = PipelineMemory(
        candidates=first.memory.candidates,
        watched=(WatchedTransaction("slow", 1, 8, 5, NOW - MIN, NOW - 30 * SEC),),
    )
    result = compute(spark, snap, PipelineSettings(), memory, NOW, stats=stats)
    assert len(result.timeout_aborts) == 1
    assert result.findings and result.partitions and result.brokers and result.coordinators
    assert stats.actions == 1
    assert set(stats.seconds) == {"checkpoint", "collect"}


def stages_of(spark: SparkSession, cycle: Callable[[], object]) -> int:
    """How many Spark stages ``cycle`` ran (its jobs tagged, read back from the status tracker)."""
    sc = spark.sparkContext
    tag = f"kte-stages-{uuid.uuid4().hex}"
    sc.setJobGroup(tag, "stage count")
    try:
        cycle()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    tracker = sc.statusTracker()
    jobs = [tracker.getJobInfo(job) for job in tracker.getJobIdsForGroup(tag)]
    return sum(len(job.stageIds) for job in jobs if job is not None)


def test_the_group_family_adds_no_stage_to_a_cycle(spark: SparkSession) -> None:
    """Every table is one partition, so the family's joins need no shuffle. Spark shuffled
    both sides of a join anyway, one partition into one, a stage each, when a side read an
    inner join (partitioned "like either side", not "one partition"), when the estimate of a
    chain of joins passed its bound, or when the optimiser moved an anti join below a file's
    ``coalesce(1)``: the blocked partitions and the carried ones did all three. Thousands of
    rows, so that they go to the JVM as files, as in the daemon."""
    n = 2500
    snap = replace(
        snapshot(
            producers=[producer("t", p, pid=PID + p, start=100) for p in range(n)],
            listed_txns=[listed(f"tx-{p}", PID + p) for p in range(n)],
            txns=[described(f"tx-{p}", pid=PID + p, parts=(("t", p),)) for p in range(n)],
        ),
        group_offsets=tuple(
            GroupOffset(f"g{g}", "t", p, 100, 1, "Stable", False) for g in range(2) for p in range(n)
        ),
    )

    def second_cycle_stages(groups: GroupsConfig | None) -> int:
        first = compute(spark, snap, AT_ONCE, None, NOW, groups=groups)
        return stages_of(spark, lambda: compute(spark, snap, AT_ONCE, first.memory, NOW + MIN, groups=groups))

    with_groups = second_cycle_stages(GroupsConfig(enabled=True, blocked_after_cycles=1))
    assert with_groups == second_cycle_stages(None)


def expression_nodes(frame: DataFrame) -> int:
    """Expression nodes in ``frame``'s analysed plan: every operator's expressions, as trees."""
    total, stack = 0, [frame._jdf.queryExecution().analyzed()]
    while stack:
        node = stack.pop()
        expressions, children = node.expressions(), node.children()
        total += sum(len(expressions.apply(i).treeString().splitlines()) for i in range(expressions.size()))
        stack.extend(children.apply(i) for i in range(children.size()))
    return total


def test_the_classification_puts_each_rule_in_the_plan_once(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rule written on top of another copies its expression tree: as one projection, the
    severity held the class six times, the class the candidate count twice, and so on down
    (9555 expression nodes in the plan a Connect client sent at 10k partitions). Spark analysed them all
    every cycle and, interpreted, evaluated them per row. Staged, each rule is there once."""
    import exporter.pipeline.compute as pipeline

    seen: list[DataFrame] = []
    shared = pipeline._shared

    def keep(ctx: Context, frame: DataFrame, st: ComputeStats) -> DataFrame:
        seen.append(frame)
        return shared(ctx, frame, st)

    monkeypatch.setattr(pipeline, "_shared", keep)
    compute(spark, legit_snapshot(), AT_ONCE, None, NOW)
    assert len(seen) == 1
    assert expression_nodes(seen[0]) < 2000  # 1459 staged, 11069 as one projection


def test_a_cycle_compiles_no_code_however_its_clock_moves(spark: SparkSession) -> None:
    # Generated code inlines literals such as the cycle's clock: with code generation on, every
    # warm cycle compiled new classes that were never reused (metaspace growth, ~0.1 s).
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    compilations = jvm.org.apache.spark.metrics.source.CodegenMetrics
    snap = snapshot(producers=[producer(), producer("u", pid=9)], listed_txns=[listed()], txns=[described()])
    previous = run(spark, snap)
    before = compilations.METRIC_COMPILATION_TIME().getCount()
    for cycle in range(1, 3):
        previous = run(spark, snap, previous=previous, now=NOW + cycle * 30 * SEC)
    assert previous.findings
    assert compilations.METRIC_COMPILATION_TIME().getCount() == before


def test_the_embedded_driver_runs_without_verifying_sparks_bytecode(spark: SparkSession) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    )
    assert bean.getVMOption("BytecodeVerificationRemote").getValue() == "false"


def test_the_embedded_driver_keeps_no_large_temporary_buffer_after_its_io(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A 4 MiB write from a heap buffer goes through a direct buffer of that size, which the
    JDK would keep for the writing thread: the driver frees it once written."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    pools = jvm.java.lang.management.ManagementFactory.getPlatformMXBeans(
        jvm.java.lang.Class.forName("java.lang.management.BufferPoolMXBean")
    )
    direct = next(pool for pool in pools if pool.getName() == "direct")
    before = direct.getMemoryUsed()
    channel = jvm.java.io.RandomAccessFile(str(tmp_path / "written"), "rw").getChannel()
    try:
        assert channel.write(jvm.java.nio.ByteBuffer.allocate(4 << 20)) == 4 << 20
    finally:
        channel.close()
    assert direct.getMemoryUsed() - before < 1 << 20


def test_the_embedded_drivers_optimising_compiler_runs_at_the_lowest_priority_and_c1_at_its_own(
    spark: SparkSession,
) -> None:
    """C2 compiles on an idle core rather than take one from the first cycle's planning."""
    pid = local_jvm_pid(spark)
    assert pid is not None
    nice: dict[str, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        stat = (task / "stat").read_text()
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        nice[name] = int(stat.rsplit(")", 1)[1].split()[16])
    assert nice["C2 CompilerThre"] == 19
    assert nice["C1 CompilerThre"] == nice["VM Thread"] == os.getpriority(os.PRIO_PROCESS, 0)


def test_a_step_planned_in_the_code_generating_session_is_read_by_the_cycles_session(
    spark: SparkSession,
) -> None:
    from pyspark.sql import functions as F

    planned_in: list[SparkSession] = []

    def step(session: SparkSession) -> DataFrame:
        planned_in.append(session)
        return session.range(5).groupBy((F.col("id") % 2).alias("k")).count()

    leaf = compiled_leaf(spark, step)
    compiled_leaf(spark, step)
    child = planned_in[0]
    assert child is not spark
    assert planned_in == [child, child]  # one session of its own, made once
    assert child.conf.get("spark.sql.codegen.wholeStage") == "true"
    assert spark.conf.get("spark.sql.codegen.wholeStage") == "false"  # the cycle's stays interpreted
    assert leaf.sparkSession is spark
    assert sorted(tuple(r) for r in leaf.collect()) == [(0, 3), (1, 2)]


def test_the_group_familys_large_step_compiles_once_and_gives_the_interpreted_results(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The family aggregates every offset row in the code-generating session: its plan holds
    no clock, so after the first cycles nothing more is compiled however the clock moves,
    and every output equals the family's run interpreted."""
    from exporter.pipeline import session

    jvm = spark.sparkContext._jvm
    assert jvm is not None
    compilations = jvm.org.apache.spark.metrics.source.CodegenMetrics
    n = 2500  # offsets past tables.FILE_MIN_ROWS: a file, as in the daemon
    snap = replace(
        snapshot(producers=[producer("t", 0)], listed_txns=[listed()], txns=[described()]),
        partitions=(
            PartitionOffsets("t", 0, 1, 200, 100),
            *(PartitionOffsets("t", p, 1, 50, 50) for p in range(1, n)),
        ),
        group_offsets=tuple(
            GroupOffset(f"g{g}", "t", p, 100 if p == 0 else 40 + g, 1, "Stable", g == 1 and p == 3)
            for g in range(3)
            for p in range(n)
        ),
    )
    config = GroupsConfig(enabled=True, blocked_after_cycles=1)

    def cycles() -> list[GroupsResult | None]:
        results: list[GroupsResult | None] = []
        memory = None
        for cycle in range(4):
            result = compute(spark, snap, AT_ONCE, memory, NOW + cycle * MIN, groups=config)
            results.append(result.groups)
            memory = result.memory
            if cycle == 1:
                compiled = compilations.METRIC_COMPILATION_TIME().getCount()
        assert compilations.METRIC_COMPILATION_TIME().getCount() == compiled
        return results

    compiled_run = cycles()
    last = compiled_run[-1]
    assert last is not None and last.blocked and last.lags
    monkeypatch.setattr(session, "_codegen_session", lambda spark: spark)
    assert cycles() == compiled_run


# --- trust: blind spots, read-verify, missing evidence ----------------------------------------


@pytest.mark.parametrize("visible", [False, None], ids=["blind", "probe-failed"])
def test_an_unlisted_owner_is_unknown_while_some_ids_may_be_invisible(
    spark: SparkSession, visible: bool | None
) -> None:
    snap = snapshot(producers=[producer()], visible=visible)
    previous = None
    for cycle in range(3):
        result = run(spark, snap, previous=previous, now=NOW + cycle * 30 * SEC)
        finding = only(result)
        assert finding.txn_class is TxnClass.UNKNOWN
        assert finding.unknown_reason is UnknownReason.OWNER_MAY_BE_INVISIBLE
        assert finding.hanging_reason is None
        assert candidates(result) == ()
        previous = result
    assert dict(result.open_transactions_unknown)[UnknownReason.OWNER_MAY_BE_INVISIBLE] == 1
    assert result.transactional_ids_visible is visible


def test_an_unlisted_transaction_is_no_candidate_before_any_live_one_would_have_timed_out(
    spark: SparkSession,
) -> None:
    # The probe says every id is visible, but a DENY rule or a custom authorizer may still hide
    # this transaction's id: younger than its leader's transaction.max.timeout.ms plus the
    # padding it may be live, so it is unknown, never a candidate, however many cycles pass.
    young = snapshot(producers=[producer(last_ts=NOW - 2 * MIN)])
    previous = None
    for cycle in range(3):
        result = run(spark, young, previous=previous, now=NOW + cycle * 30 * SEC)
        finding = only(result)
        assert finding.txn_class is TxnClass.UNKNOWN
        assert finding.unknown_reason is UnknownReason.UNLISTED_WITHIN_TIMEOUT
        assert finding.hanging_reason is None and candidates(result) == ()
        previous = result
    assert dict(result.open_transactions_unknown)[UnknownReason.UNLISTED_WITHIN_TIMEOUT] == 1
    # Past the leader's own maximum (1 min here) plus the padding, no live transaction can be
    # open any more: the same transaction is a candidate.
    short_max = snapshot(
        producers=[producer(last_ts=NOW - 7 * MIN)],
        configs=[BrokerConfig(1, transaction_max_timeout_ms=MIN)],
    )
    finding = only(run(spark, short_max))
    assert finding.txn_class is TxnClass.HANGING
    assert finding.hanging_reason is HangingReason.NO_TRANSACTIONAL_ID
    # Without the leader's own maximum (DescribeConfigs not read), no age is enough: clusters
    # that run Flink raise it far above the default.
    unread_configs = snapshot(producers=[producer(last_ts=NOW - DAY)], configs=[])
    finding = only(run(spark, unread_configs))
    assert finding.txn_class is TxnClass.UNKNOWN
    assert finding.unknown_reason is UnknownReason.UNLISTED_WITHIN_TIMEOUT
    # An unlisted transaction that the re-read no longer shows closed between the reads.
    closed = snapshot(producers=[producer(last_ts=NOW - 2 * MIN)], reread=[])
    assert run(spark, closed).findings == ()
    assert by_class(run(spark, closed))[TxnClass.UNKNOWN] == 0


def test_reasons_from_a_visible_id_stand_during_a_blind_spot(spark: SparkSession) -> None:
    snap = snapshot(
        producers=[producer()],
        listed_txns=[listed(state="CompleteCommit")],
        txns=[described(state="CompleteCommit", parts=())],
        visible=False,
    )
    assert only(run(spark, snap)).hanging_reason is HangingReason.COORDINATOR_NOT_OPEN


def test_a_candidate_gone_on_the_re_read_closed_between_the_reads(spark: SparkSession) -> None:
    """Churn: the partition was read before its coordinator completed the transaction."""
    snap = snapshot(
        producers=[producer()],
        listed_txns=[listed(state="CompleteCommit")],
        txns=[described(state="CompleteCommit", parts=())],
        reread=[producer(start=-1)],
    )
    result = run(spark, snap)
    assert result.findings == ()
    assert all(n == 0 for n in by_class(result).values())
    assert candidates(result) == ()


@pytest.mark.parametrize("owner", ["completed", "ongoing"])
def test_a_transaction_the_last_stable_offset_has_passed_is_not_open(spark: SparkSession, owner: str) -> None:
    """A lagging replica answered DescribeProducers (Kafka answers it from any replica's log,
    and stale metadata can name a former leader), both reads: it still shows the transaction
    at offset 100 open, while the leader's LSO (ListOffsets) is already past it. The LSO stops
    at the oldest open transaction's first offset, so that transaction closed: no finding, no
    candidate, nothing counted, in the CLI's one cycle as in the daemon's two."""
    state = "CompleteCommit" if owner == "completed" else "Ongoing"
    snap = snapshot(
        producers=[producer(start=100, broker=2)],
        partitions=[offsets(leader=2, hw=160, lso=150)],
        listed_txns=[listed(state=state)],
        txns=[described(state=state, parts=())],
        brokers=(1, 2),
    )
    for settings in (AT_ONCE, PipelineSettings()):
        first = run(spark, snap, settings)
        second = run(spark, snap, settings, first)
        for result in (first, second):
            assert result.findings == ()
            assert all(n == 0 for n in by_class(result).values())
            assert candidates(result) == ()
            (part,) = result.partitions
            assert (part.lso_lag, part.max_active_transaction_duration_ms) == (10, None)


@pytest.mark.parametrize("log_start", [500, -1], ids=["retention-passed-it", "log-start-unread"])
def test_a_transaction_the_lso_was_lifted_past_by_the_log_start_is_still_open(
    spark: SparkSession, log_start: int
) -> None:
    """Retention (or DeleteRecords) moved the log start past a hanging transaction's start:
    Kafka lifts the LSO to the log start, but the transaction is still open and still blocks
    the records above it. Without the log start, the LSO proves nothing either."""
    snap = snapshot(
        producers=[producer(start=100)],
        partitions=[offsets(hw=10_000, lso=500, start=log_start)],
        listed_txns=[listed(state="CompleteCommit")],
        txns=[described(state="CompleteCommit", parts=())],
    )
    first = run(spark, snap, PipelineSettings())
    confirmed = run(spark, snap, PipelineSettings(), first)
    assert only(confirmed).txn_class is TxnClass.HANGING


def test_a_transaction_starting_at_the_last_stable_offset_is_open(spark: SparkSession) -> None:
    snap = snapshot(
        producers=[producer(start=150)],
        partitions=[offsets(hw=160, lso=150)],
        listed_txns=[listed(state="CompleteCommit")],
        txns=[described(state="CompleteCommit", parts=())],
    )
    assert only(run(spark, snap)).txn_class is TxnClass.HANGING


def test_a_new_transaction_on_the_re_read_does_not_verify_the_old_one(spark: SparkSession) -> None:
    snap = snapshot(
        producers=[producer(start=100)],
        listed_txns=[listed(state="CompleteCommit")],
        txns=[described(state="CompleteCommit", parts=())],
        reread=[producer(start=180)],
    )
    assert run(spark, snap).findings == ()


def test_a_candidate_whose_partition_was_not_re_read_is_unverified(spark: SparkSession) -> None:
    snap = replace(snapshot(producers=[producer()]), reread_producers=(), reread_partitions=frozenset())
    finding = only(run(spark, snap))
    assert finding.txn_class is TxnClass.UNKNOWN
    assert finding.unknown_reason is UnknownReason.UNVERIFIED


def _confirmed(spark: SparkSession) -> CycleResult:
    settings = PipelineSettings(hanging_confirm_cycles=2)
    first = run(spark, snapshot(producers=[producer()]), settings)
    second = run(spark, snapshot(producers=[producer()]), settings, previous=first, now=NOW + 30 * SEC)
    assert only(second).txn_class is TxnClass.HANGING
    return second


@pytest.mark.parametrize(
    "evidence_missing",
    [
        # The partition's leader did not answer DescribeProducers: the row is missing.
        snapshot(
            producers=[],
            partitions=[offsets()],
            errors=[CollectionError("DescribeProducers", "REQUEST_TIMED_OUT", broker_id=1)],
        ),
        # Its coordinator broker is down: the listing is incomplete.
        snapshot(
            producers=[producer()],
            brokers=(1, 2),
            coordinators_listed=(1,),
            errors=[CollectionError("ListTransactions", "TIMEOUT", broker_id=2)],
        ),
        # The re-read of its partition failed.
        replace(snapshot(producers=[producer()]), reread_producers=(), reread_partitions=frozenset()),
        # The visibility probe failed.
        snapshot(producers=[producer()], visible=None),
        # Its topic was left out of the metadata: Kafka refused to describe it (the principal
        # lost Describe on it), so no DescribeProducers was even sent for it.
        snapshot(
            producers=[],
            partitions=[],
            errors=[CollectionError("Metadata", "TOPIC_AUTHORIZATION_FAILED", topic="t")],
        ),
    ],
    ids=["partition-unread", "coordinator-down", "re-read-failed", "probe-failed", "topic-refused"],
)
def test_a_confirmed_finding_survives_a_cycle_without_evidence(
    spark: SparkSession, evidence_missing: ClusterSnapshot
) -> None:
    settings = PipelineSettings(hanging_confirm_cycles=2)
    second = _confirmed(spark)
    third = run(spark, evidence_missing, settings, previous=second, now=NOW + 60 * SEC)
    finding = only(third)
    assert finding.txn_class is TxnClass.HANGING
    assert finding.hanging_reason is HangingReason.NO_TRANSACTIONAL_ID
    assert finding.duration_ms == only(second).duration_ms + 30 * SEC
    assert candidates(third) == ((("t", 0, PID, 100), 2),)  # kept, not restarted
    assert third.brokers[0].hanging_transactions == 1
    fourth = run(spark, snapshot(producers=[producer()]), settings, previous=third, now=NOW + 90 * SEC)
    assert only(fourth).txn_class is TxnClass.HANGING
    assert candidates(fourth) == ((("t", 0, PID, 100), 3),)


@pytest.mark.parametrize(
    "reread_error",
    [
        CollectionError("DescribeProducers", "REQUEST_TIMED_OUT", broker_id=1, message=REREAD_MESSAGE),
        CollectionError(
            "DescribeProducers",
            "DEADLINE_EXCEEDED",
            message=f"{REREAD_MESSAGE}: stage reread_producers cut after 4.20 s by the cycle deadline",
        ),
    ],
    ids=["leader-failed", "stage-cut"],
)
def test_a_failed_re_read_does_not_keep_a_finding_the_first_read_shows_closed(
    spark: SparkSession, reread_error: CollectionError
) -> None:
    # The hanging transaction on t-0 was aborted. This cycle's first read of t-0 answered (no
    # open transaction there); another transaction, on t-1 of the same leader, sent a re-read
    # to that leader, which failed. The failed re-read leaves t-1 unverified, but t-0's first
    # read stands: the finding is cleared, not kept as "not read".
    settings = PipelineSettings(hanging_confirm_cycles=2)
    other = producer("t", 1, pid=7, start=500)
    closed = replace(
        snapshot(
            producers=[producer(start=-1), other],
            listed_txns=[listed("app", 7)],
            txns=[described("app", pid=7, parts=(("t", 1),))],
        ),
        reread_producers=(),
        reread_partitions=frozenset(),
        errors=(reread_error,),
    )
    third = run(spark, closed, settings, previous=_confirmed(spark), now=NOW + 60 * SEC)
    assert [(f.topic, f.partition) for f in third.findings if f.txn_class is TxnClass.HANGING] == []
    assert candidates(third) == ()
    assert third.brokers[0].hanging_transactions == 0


def test_only_positive_evidence_clears_a_confirmed_finding(spark: SparkSession) -> None:
    settings = PipelineSettings(hanging_confirm_cycles=2)
    closed = run(spark, snapshot(producers=[producer(start=-1)]), settings, previous=_confirmed(spark))
    assert closed.findings == () and candidates(closed) == ()
    owned = run(spark, legit_snapshot(), settings, previous=_confirmed(spark))
    assert owned.findings == ()
    assert candidates(owned) == ()


# --- KIP-588 recovery signals ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("txn", "seen_at", "version", "expected"),
    [
        # The producer re-initialised after the coordinator aborted it: Empty, epoch + 2.
        (described("slow", epoch=7, state="Empty", parts=(), start=-1), NOW - 30 * SEC, 2, 1),
        # Overdue when last seen; now a new Ongoing after abort + InitProducerId.
        (described("slow", epoch=7, start=NOW - SEC), NOW - 30 * SEC, 2, 1),
        # Overdue when last seen; a new Ongoing one epoch up is a late commit (v2): not counted.
        (described("slow", epoch=6, start=NOW - SEC), NOW - 30 * SEC, 2, 0),
        # ... but with transactions v1 a commit never bumps the epoch: counted.
        (described("slow", epoch=6, start=NOW - SEC), NOW - 30 * SEC, 1, 1),
        # Not overdue when last seen: a new Ongoing with a higher epoch may be commits.
        (described("slow", epoch=7, start=NOW - SEC), NOW - 2 * MIN, 2, 0),
    ],
    ids=["empty-after-deadline", "reinit-ongoing", "late-commit-v2", "reinit-v1", "not-seen-overdue"],
)
def test_timeout_abort_seen_through_the_producers_recovery(
    spark: SparkSession, txn: TransactionDescription, seen_at: int, version: int, expected: int
) -> None:
    # Deadline NOW - MIN: overdue when seen at NOW - 30 s, not yet when seen at NOW - 2 min.
    previous = watching(("slow", PID, 5, NOW - MIN), seen_at=seen_at)
    snap = snapshot(txns=[txn], configs=[BrokerConfig(1, transaction_version=version)])
    result = run(spark, snap, previous=previous)
    assert len(result.timeout_aborts) == expected
    totals = {c.coordinator_id: c.count for c in result.memory.timeout_aborts_total}
    assert totals.get(1, 0) == expected


def test_a_timeout_abort_is_counted_once(spark: SparkSession) -> None:
    previous = watching(("slow", PID, 5, NOW - MIN))
    first = run(
        spark, snapshot(txns=[described("slow", epoch=6, state="CompleteAbort", parts=())]), previous=previous
    )
    second = run(
        spark,
        snapshot(txns=[described("slow", epoch=7, state="Empty", parts=(), start=-1)]),
        previous=first,
        now=NOW + 30 * SEC,
    )
    third = run(
        spark,
        snapshot(txns=[described("slow", epoch=7, start=NOW + 40 * SEC)]),
        previous=second,
        now=NOW + 60 * SEC,
    )
    assert [len(r.timeout_aborts) for r in (first, second, third)] == [1, 0, 0]
    assert [c.count for c in third.memory.timeout_aborts_total] == [1]


# --- session settings (no Spark needed) -----------------------------------------------------


def test_session_conf_local_connect_and_cluster() -> None:
    local = session_conf(
        SparkConfig(local_dir="/tmp/x", driver_memory="1g", conf={"spark.sql.shuffle.partitions": "4"})
    )
    assert local["spark.ui.enabled"] == "false"
    assert local["spark.sql.adaptive.enabled"] == "false"
    assert local["spark.driver.host"] == local["spark.driver.bindAddress"] == "127.0.0.1"
    assert "log4j2.properties" in local["spark.driver.extraJavaOptions"]
    assert local["spark.driver.memory"] == "1g"
    assert local["spark.local.dir"] == "/tmp/x"
    assert local["spark.sql.catalogImplementation"] == "in-memory"
    assert local["spark.sql.shuffle.partitions"] == "4"  # the operator's conf wins
    cluster = session_conf(SparkConfig(master="spark://m:7077"))
    assert "spark.driver.host" not in cluster
    connect = session_conf(
        SparkConfig(connect_url="sc://spark:15002", conf={"spark.sql.shuffle.partitions": "4"})
    )
    assert connect == {**PLAN_DEFAULTS, "spark.sql.shuffle.partitions": "4"}


@pytest.mark.spark
def test_warmup_snapshot_exercises_legit_and_hanging(spark: SparkSession) -> None:
    from exporter.pipeline.warmup import warmup_snapshot

    snapshot = warmup_snapshot()
    result = compute(spark, snapshot, PipelineSettings(hanging_confirm_cycles=1), None, snapshot.taken_at_ms)
    classes = dict(result.open_transactions_by_class)
    assert classes[TxnClass.HANGING] == 1
    assert classes[TxnClass.ONGOING] == 1


def test_a_cycle_that_read_no_group_offsets_keeps_a_blocked_group_until_a_complete_one_drops_it(
    spark: SparkSession,
) -> None:
    """The group collection is lost as a whole (ListGroups failed on every broker, or the
    stage was cut by the deadline): the blocked group stays blocked, since unchanged, so its
    series and its page go on. A complete collection without the group ends it."""
    config = GroupsConfig(enabled=True, blocked_after_cycles=1)
    base = snapshot(producers=[producer(start=100)], partitions=[offsets(hw=150, lso=100)])
    read = replace(base, group_offsets=(GroupOffset("billing", "t", 0, 100, 1, "Stable"),))
    lost = replace(base, errors=(CollectionError(api="ListGroups", error="TIMEOUT"),))
    memory = None
    blocked: list[tuple[tuple[str, int], ...]] = []
    for i, snap in enumerate([read, read, lost, base]):
        at = NOW + i * 30 * SEC
        result = compute(spark, replace(snap, taken_at_ms=at), AT_ONCE, memory, at, groups=config)
        memory = result.memory
        assert result.groups is not None
        blocked.append(tuple((b.group, b.blocked_since_ms) for b in result.groups.blocked))
    assert blocked == [(("billing", NOW),), (("billing", NOW),), (("billing", NOW),), ()]


def test_the_clis_outputs_are_the_daemons_findings_and_partitions_and_nothing_else(
    spark: SparkSession,
) -> None:
    # find-hanging and abort read the findings and the partitions' LSO lag: the same
    # classification computes them, without the daemon's other tables.
    snap = snapshot(
        producers=[producer(), producer("u", pid=9), producer("t", 1, pid=8)],
        listed_txns=[listed(), listed("slow", pid=8)],
        txns=[described(), described("slow", pid=8)],
    )
    everything = run(spark, snap)
    cli = compute(spark, snap, AT_ONCE, None, NOW, outputs=FINDINGS_OUTPUTS)
    assert cli.findings == everything.findings
    assert [f.txn_class for f in cli.findings] == [TxnClass.HANGING, TxnClass.HANGING]
    assert cli.partitions == everything.partitions
    assert everything.brokers and everything.coordinators
    assert cli.brokers == () and cli.coordinators == () and cli.memory.candidates == ()


def test_an_unknown_output_table_is_refused(spark: SparkSession) -> None:
    with pytest.raises(ValueError, match="no such output table: metrics"):
        compute(spark, snapshot(), AT_ONCE, None, NOW, outputs=frozenset({"findings", "metrics"}))


def test_a_cycle_runs_as_one_spark_job_with_no_broadcast_and_no_shuffle_between_its_tables(
    spark: SparkSession,
) -> None:
    # Every table is one partition and every join hashes its small side in the same task:
    # no broadcast (a job of its own per join) and no shuffle, so a cycle is one job of one
    # stage. (At 10k partitions the planner's size estimate of a join of joins, the product
    # of its sides, passes even spark.sql.maxSinglePartitionBytes deep in the
    # classification, and 5 one-partition shuffles come back there: 6 stages.)
    context = spark.sparkContext
    snap = snapshot(
        producers=[producer(), producer("u", pid=9)],
        listed_txns=[listed(), listed("slow", pid=8)],
        txns=[described(), described("slow", pid=8)],
    )
    previous = run(spark, snap)
    context.setJobGroup("one-cycle", "one cycle")
    try:
        run(spark, snap, previous=previous, now=NOW + 30 * SEC)
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    tracker = context.statusTracker()
    jobs = tracker.getJobIdsForGroup("one-cycle")
    assert len(jobs) == 1
    info = tracker.getJobInfo(jobs[0])
    assert info is not None
    assert len(info.stageIds) == 1


# --- attribution: open transactions by application, groups or not ------------------------------


@pytest.mark.parametrize("groups", [None, GroupsConfig(enabled=False), GroupsConfig(enabled=True)])
def test_open_transactions_are_counted_per_application_and_class_whether_or_not_groups_are_on(
    spark: SparkSession, groups: GroupsConfig | None
) -> None:
    streams = "order-enricher-3f2b8c1e-9a4d-4e7f-b1c2-0d9e8f7a6b5c-1"
    snap = snapshot(
        producers=[
            producer("t", 0, pid=1),
            producer("t", 1, pid=2, last_ts=NOW - MIN),
            producer("t", 2, pid=3, last_ts=NOW - MIN),
        ],
        partitions=[offsets("t", p) for p in range(3)],
        listed_txns=[listed(streams, 2), listed("adhoc", 3)],
        txns=[described(streams, pid=2, parts=(("t", 1),)), described("adhoc", pid=3, parts=(("t", 2),))],
    )
    result = compute(spark, snap, AT_ONCE, None, NOW, groups=groups)
    assert [(a.application, a.txn_class, a.count) for a in result.open_transactions_by_application] == [
        ("order-enricher", TxnClass.ONGOING, 1),
        ("unknown", TxnClass.HANGING, 1),  # no transactional id: pid 1 is listed nowhere
        ("unknown", TxnClass.ONGOING, 1),  # "adhoc": no rule matches
    ]
    # the group family is there (empty) whenever groups are on, offsets read or not
    assert (result.groups is not None) == bool(groups and groups.enabled)
    if result.groups is not None:
        assert result.groups.lags == () and result.groups.blocked == ()


def test_no_open_transaction_counts_no_application(spark: SparkSession) -> None:
    result = compute(spark, snapshot(partitions=[offsets(hw=10, lso=10)]), AT_ONCE, None, NOW)
    assert result.open_transactions_by_application == ()


# --- topics ----------------------------------------------------------------------------------


def test_each_topic_has_its_largest_lso_lag_oldest_open_transaction_and_open_partitions(
    spark: SparkSession,
) -> None:
    snap = snapshot(
        producers=[
            producer("t", 0, pid=1, last_ts=NOW - 3 * MIN),
            producer("t", 2, pid=2, last_ts=NOW - MIN),
        ],
        partitions=[
            offsets("t", 0, hw=500, lso=100),
            offsets("t", 1, hw=70, lso=70),
            offsets("t", 2, hw=30, lso=10),
            offsets("u", 0, hw=9, lso=9),  # caught up, nothing open: still a topic
            offsets("v", 0, hw=-1, lso=-1),  # offsets not read
        ],
    )
    result = run(spark, snap)  # lso_lag_series "nonzero": the topics do not depend on it
    assert [
        (
            t.topic,
            t.max_last_stable_offset_lag,
            t.max_active_transaction_duration_ms,
            t.partitions_with_open_transactions,
        )
        for t in result.topics
    ] == [("t", 400, 3 * MIN, 2), ("u", 0, None, 0), ("v", 0, None, 0)]
    assert compute(spark, snap, AT_ONCE, None, NOW, outputs=FINDINGS_OUTPUTS).topics == ()
