"""Fixture cycles for the history tests: snapshots and results built by hand, as the
collector and the pipeline would make them."""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.model import (
    ClusterSnapshot,
    CollectionError,
    CycleResult,
    Finding,
    ListedTransaction,
    PartitionMetrics,
    PartitionOffsets,
    ProducerState,
    StartTimeSource,
    TxnClass,
)

T0 = 1_795_000_000_000  # 2026-11-18T...Z, a fixed epoch ms
INTERVAL = 30_000


@dataclass(frozen=True)
class Open:
    """One open transaction in a fixture cycle."""

    topic: str
    partition: int
    producer_id: int
    start_offset: int
    txn_class: TxnClass
    started_ms: int
    transactional_id: str | None = None
    lso_lag: int = 5


@dataclass
class Cycle:
    at_ms: int
    open: list[Open] = field(default_factory=list)
    listed: list[ListedTransaction] = field(default_factory=list)
    errors: list[CollectionError] = field(default_factory=list)
    cluster: str = "prod"


def finding(o: Open, now_ms: int) -> Finding:
    hanging = o.txn_class in (TxnClass.HANGING, TxnClass.SUSPECTED_HANGING)
    return Finding(
        topic=o.topic,
        partition=o.partition,
        broker_id=1,
        producer_id=o.producer_id,
        producer_epoch=0,
        coordinator_epoch=0,
        start_offset=o.start_offset,
        last_timestamp_ms=o.started_ms,
        start_time_ms=o.started_ms,
        start_time_source=(StartTimeSource.BATCH_TIMESTAMP if hanging else StartTimeSource.COORDINATOR),
        duration_ms=now_ms - o.started_ms,
        txn_class=o.txn_class,
        late=o.txn_class is TxnClass.LATE,
        transactional_id=o.transactional_id,
        coordinator_id=1,
        coordinator_state=None if hanging else "Ongoing",
    )


def make(cycle: Cycle) -> tuple[ClusterSnapshot, CycleResult]:
    producers = tuple(
        ProducerState(o.topic, o.partition, 1, o.producer_id, 0, 0, o.started_ms, 0, o.start_offset)
        for o in cycle.open
    )
    partitions = tuple(PartitionOffsets(o.topic, o.partition, 1, 100 + o.lso_lag, 100) for o in cycle.open)
    snapshot = ClusterSnapshot(
        cluster=cycle.cluster,
        taken_at_ms=cycle.at_ms - 500,
        partitions=partitions,
        producers=producers,
        listed_transactions=tuple(cycle.listed),
        errors=tuple(cycle.errors),
    )
    findings = tuple(finding(o, cycle.at_ms) for o in cycle.open)
    by_class: dict[TxnClass, int] = {}
    for f in findings:
        by_class[f.txn_class] = by_class.get(f.txn_class, 0) + 1
    result = CycleResult(
        cluster=cycle.cluster,
        computed_at_ms=cycle.at_ms,
        partitions=tuple(
            PartitionMetrics(o.topic, o.partition, 1, o.lso_lag, cycle.at_ms - o.started_ms)
            for o in cycle.open
        ),
        findings=findings,
        open_transactions_by_class=tuple(by_class.items()),
    )
    return snapshot, result


#: A hanging transaction on orders-1 (seen 4 cycles, then gone: aborted), a late legitimate
#: one on payments-0 (seen 3 cycles, then committed), an ongoing one that never counts, and
#: a blind spot of 5 intervals between cycles 6 and 7.
HANGING = Open("orders", 1, 4001, 17, TxnClass.HANGING, T0 - 3_600_000)
SUSPECT = Open("orders", 1, 4001, 17, TxnClass.SUSPECTED_HANGING, T0 - 3_600_000)
LATE = Open("payments", 0, 5001, 40, TxnClass.LATE, T0 - 1_500_000, "payments-app", 50)
ONGOING = Open("audit", 2, 6001, 3, TxnClass.ONGOING, T0 - 1000, "audit-app", 0)


def scenario() -> list[Cycle]:
    committed = ListedTransaction(1, "payments-app", 5001, "CompleteCommit")
    at = [T0 + i * INTERVAL for i in range(7)] + [T0 + 11 * INTERVAL]
    return [
        Cycle(at[0], [SUSPECT, LATE, ONGOING]),
        Cycle(at[1], [HANGING, LATE, ONGOING]),
        Cycle(at[2], [HANGING, LATE], errors=[CollectionError("ListOffsets", "TIMEOUT", 2)]),
        Cycle(at[3], [HANGING], listed=[committed]),
        Cycle(at[4], [], listed=[committed]),
        Cycle(at[5], []),
        Cycle(at[6], []),
        Cycle(at[7], []),
    ]
