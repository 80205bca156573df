"""The demo's one line per cycle says what the cycle found (testbed/demo.py)."""

from __future__ import annotations

import time
from dataclasses import replace

from exporter.model import (
    ClusterSnapshot,
    CollectionError,
    CycleResult,
    Finding,
    HangingReason,
    PartitionMetrics,
    StartTimeSource,
    TxnClass,
)
from testbed.demo import status_line

NOW_MS = 1_800_000_000_000
HANGING = Finding(
    topic="orders",
    partition=1,
    broker_id=1,
    producer_id=1,
    producer_epoch=0,
    coordinator_epoch=-1,
    start_offset=0,
    last_timestamp_ms=NOW_MS - 31 * 60_000,
    start_time_ms=NOW_MS - 31 * 60_000,
    start_time_source=StartTimeSource.BATCH_TIMESTAMP,
    duration_ms=31 * 60_000,
    txn_class=TxnClass.HANGING,
    late=True,
    hanging_reason=HangingReason.COORDINATOR_NOT_OPEN,
)


def test_a_cycle_line_names_the_hanging_transaction_the_other_classes_and_the_largest_lso_lag() -> None:
    result = CycleResult(
        cluster="demo",
        computed_at_ms=NOW_MS,
        findings=(HANGING,),
        open_transactions_by_class=((TxnClass.HANGING, 1), (TxnClass.ONGOING, 2), (TxnClass.LATE, 0)),
        partitions=(PartitionMetrics("orders", 1, 1, 80, 1), PartitionMetrics("payments", 0, 1, 3, 1)),
    )
    snapshot = ClusterSnapshot(cluster="demo", taken_at_ms=NOW_MS)
    line = status_line(2, snapshot, result, NOW_MS / 1000 + 1.5)
    when = time.strftime("%H:%M:%S", time.localtime(NOW_MS / 1000 + 1.5))
    assert line == (
        f"{when} cycle 2 (1.5 s): HANGING orders-1 offset 0 (31 min, coordinator_not_open); "
        "2 ongoing; LSO lag up to 80 (orders-1)"
    )


def test_a_first_cycle_says_a_candidate_is_confirmed_next_cycle_and_a_partial_snapshot_is_partial() -> None:
    result = CycleResult(
        cluster="demo",
        computed_at_ms=NOW_MS,
        findings=(replace(HANGING, txn_class=TxnClass.SUSPECTED_HANGING),),
        open_transactions_by_class=((TxnClass.SUSPECTED_HANGING, 1),),
    )
    snapshot = ClusterSnapshot(
        cluster="demo", taken_at_ms=NOW_MS, errors=(CollectionError("ListOffsets", "TIMEOUT", broker_id=1),)
    )
    line = status_line(1, snapshot, result, NOW_MS / 1000 + 12)
    assert line.endswith("cycle 1 (12.0 s, partial: 1 error(s)): 1 suspected hanging (confirmed next cycle)")
    empty = status_line(
        3, ClusterSnapshot(cluster="demo", taken_at_ms=NOW_MS), CycleResult("demo", NOW_MS), NOW_MS / 1000
    )
    assert empty.endswith("no open transaction")
