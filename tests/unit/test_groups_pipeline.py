"""The consumer-group family on fixture tables: lag split, blocked consumers, attribution
counts, and what is carried from one cycle to the next. No broker; the shared Spark session."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from exporter.columns import Column
from exporter.config.groups import GroupsConfig
from exporter.model import (
    ConsumableCheck,
    GroupLag,
    GroupOffset,
    GroupsCarry,
    GroupsResult,
    TxnClass,
)
from exporter.pipeline import transport
from exporter.pipeline.families.groups import FAMILY, compute_groups, family_run, group_frames
from exporter.pipeline.tables import one_partition

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000
CYCLE_MS = 30_000
TOPIC = "orders"
TID = "order-enricher-3f2b8c1e-9a4d-4e7f-b1c2-0d9e8f7a6b5c-1"
CONFIG = GroupsConfig(enabled=True, blocked_after_cycles=3)

Partition = tuple[str, int, int, int]  # topic, partition, high_watermark, last_stable_offset
Txn = tuple[str, int, int, str | None, int, str, int]


def partitions(spark: SparkSession, rows: Sequence[Partition]) -> DataFrame:
    return spark.createDataFrame(
        list(rows), "topic string, partition int, high_watermark long, last_stable_offset long"
    )


TXN_TYPES = (
    ("topic", "string"),
    ("partition", "int"),
    ("start_offset", "long"),
    ("transactional_id", "string"),
    ("producer_id", "long"),
    ("txn_class", "string"),
    ("duration_ms", "long"),
)
TXN_COLUMNS = tuple(name for name, _ in TXN_TYPES)


def transactions(spark: SparkSession, rows: Sequence[Txn]) -> DataFrame:
    return spark.createDataFrame(list(rows), ", ".join(f"{name} {kind}" for name, kind in TXN_TYPES))


def offset(
    group: str, committed: int, *, partition: int = 0, pending: bool = False, topic: str = TOPIC
) -> GroupOffset:
    return GroupOffset(
        group=group,
        topic=topic,
        partition=partition,
        committed_offset=committed,
        coordinator_id=1,
        group_state="Stable",
        pending_transactional_commit=pending,
    )


OPEN_AT_10: Txn = (TOPIC, 0, 10, TID, 77, TxnClass.HANGING.value, 600_000)


def cycles(
    spark: SparkSession,
    offsets: Sequence[GroupOffset],
    parts: Sequence[Partition],
    txns: Sequence[Txn],
    count: int,
    config: GroupsConfig = CONFIG,
    checks: Sequence[ConsumableCheck] = (),
) -> list[GroupsResult]:
    """Run ``count`` cycles on the same tables, carrying state, one CYCLE_MS apart."""
    results: list[GroupsResult] = []
    carry: GroupsCarry | None = None
    for i in range(count):
        result = compute_groups(
            spark,
            offsets,
            partitions(spark, parts),
            transactions(spark, txns),
            config,
            T0 + i * CYCLE_MS,
            checks=checks,
            carry=carry,
        )
        carry = result.carry
        results.append(result)
    return results


def test_read_committed_group_at_the_lso_is_blocked_by_the_transaction_at_the_lso_after_n_cycles(
    spark: SparkSession,
) -> None:
    first, second, third = cycles(spark, [offset("reader", 10)], [(TOPIC, 0, 15, 10)], [OPEN_AT_10], 3)
    assert first.blocked == () and second.blocked == ()
    [blocked] = third.blocked
    assert (blocked.group, blocked.topic, blocked.partition) == ("reader", TOPIC, 0)
    assert (blocked.committed_offset, blocked.last_stable_offset, blocked.high_watermark) == (10, 10, 15)
    assert (blocked.transactional_id, blocked.producer_id, blocked.start_offset) == (TID, 77, 10)
    assert blocked.txn_class is TxnClass.HANGING and blocked.txn_duration_ms == 600_000
    assert blocked.application == "order-enricher"
    assert blocked.blocked_since_ms == T0 and blocked.blocked_ms == 2 * CYCLE_MS
    assert third.lags == (GroupLag("reader", TOPIC, consumable_lag=0, blocked_lag=5),)
    assert [(g.group, g.blocked_partitions) for g in third.groups] == [("reader", 1)]


# committed 9 (a consumer that commits its last record + 1: record 8, then the commit marker
# of its transaction at 9), a hanging transaction from 10: nothing a read_committed consumer
# gets lies before the LSO.
MARKER_ONLY = ConsumableCheck(TOPIC, 0, from_offset=9, to_offset=10, consumable_records=0)


def test_a_group_with_only_markers_before_the_lso_is_blocked_like_one_committed_at_the_lso(
    spark: SparkSession,
) -> None:
    first, second, third = cycles(
        spark, [offset("spring", 9)], [(TOPIC, 0, 15, 10)], [OPEN_AT_10], 3, checks=[MARKER_ONLY]
    )
    assert first.blocked == () and second.blocked == ()
    [blocked] = third.blocked
    assert (blocked.group, blocked.committed_offset, blocked.last_stable_offset) == ("spring", 9, 10)
    assert (blocked.transactional_id, blocked.start_offset, blocked.application) == (
        TID,
        10,
        "order-enricher",
    )
    assert blocked.blocked_since_ms == T0 and blocked.blocked_ms == 2 * CYCLE_MS
    assert third.lags == (GroupLag("spring", TOPIC, consumable_lag=0, blocked_lag=5),)
    assert [g.blocked_partitions for g in third.groups] == [1]
    assert [(a.committed_offset, a.since_ms) for a in third.carry.at_lso] == [(9, T0)]


@pytest.mark.parametrize(
    ("check", "lag"),
    [
        pytest.param(ConsumableCheck(TOPIC, 0, 9, 10, 1), 1, id="a-record-before-the-lso"),
        pytest.param(ConsumableCheck(TOPIC, 0, 9, 10, 0, exact=False), 0, id="batches-not-all-read"),
        pytest.param(None, 1, id="no-check"),
        pytest.param(ConsumableCheck(TOPIC, 0, 8, 10, 0), 1, id="check-of-another-committed-offset"),
    ],
)
def test_a_group_below_the_lso_is_not_blocked_unless_the_batches_between_were_read_and_hold_nothing(
    spark: SparkSession, check: ConsumableCheck | None, lag: int
) -> None:
    *_, last = cycles(
        spark, [offset("g", 9)], [(TOPIC, 0, 15, 10)], [OPEN_AT_10], 4, checks=[check] if check else []
    )
    assert last.blocked == () and last.carry.at_lso == ()
    assert [(x.consumable_lag, x.blocked_lag) for x in last.lags] == [(lag, 5)]


def test_consumable_lag_not_read_to_the_lso_is_counted_as_an_upper_bound(spark: SparkSession) -> None:
    offsets = [offset("g", 2, partition=p) for p in range(4)]
    parts = [(TOPIC, p, 15, 10) for p in range(3)] + [(TOPIC, 3, 2, 2)]
    checks = [
        ConsumableCheck(TOPIC, 0, 2, 10, 5),  # read to the LSO: exact
        ConsumableCheck(TOPIC, 1, 2, 10, 6, exact=False),  # the byte budget ran out
    ]  # partition 2: not read (LSO - committed); partition 3: at the HWM (exact 0)
    [result] = cycles(spark, offsets, parts, [], 1, GroupsConfig(enabled=True, per_partition=True), checks)
    assert result.lags == (GroupLag("g", TOPIC, 5 + 6 + 8, 15, upper_bound_partitions=2),)
    assert [(x.partition, x.consumable_lag, x.upper_bound_partitions) for x in result.partition_lags] == [
        (0, 5, 0),
        (1, 6, 1),
        (2, 8, 1),
        (3, 0, 0),
    ]


def test_a_cycle_that_could_not_read_the_batches_keeps_a_group_at_the_same_committed_offset_and_lso(
    spark: SparkSession,
) -> None:
    """Nothing below an LSO that has not moved can become consumable: a group seen with only
    markers before the LSO stays at it, since unchanged, while its committed offset and the
    LSO stay put, though the batches were not read again (the byte budget went to others, a
    Fetch failed). A committed offset that moved ends it."""
    carry: GroupsCarry | None = None
    seen = []
    for i, (committed, check) in enumerate(
        [(9, [MARKER_ONLY]), (9, []), (9, [MARKER_ONLY]), (9, []), (8, [])]
    ):
        result = compute_groups(
            spark,
            [offset("g", committed)],
            partitions(spark, [(TOPIC, 0, 15, 10)]),
            transactions(spark, [OPEN_AT_10]),
            CONFIG,
            T0 + i * CYCLE_MS,
            checks=check,
            carry=carry,
        )
        carry = result.carry
        seen.append(
            ([(b.committed_offset, b.blocked_since_ms) for b in result.blocked], len(result.carry.at_lso))
        )
    assert seen == [([], 1), ([], 1), ([(9, T0)], 1), ([(9, T0)], 1), ([], 0)]


def test_read_uncommitted_group_past_the_lso_is_never_blocked(spark: SparkSession) -> None:
    *_, last = cycles(
        spark, [offset("uncommitted", 15), offset("midway", 12)], [(TOPIC, 0, 15, 10)], [OPEN_AT_10], 4
    )
    assert last.blocked == ()
    assert last.lags == (
        GroupLag("midway", TOPIC, consumable_lag=0, blocked_lag=3),
        GroupLag("uncommitted", TOPIC, consumable_lag=0, blocked_lag=0),
    )
    assert [g.blocked_partitions for g in last.groups] == [0, 0]


def test_group_behind_the_lso_has_consumable_and_blocked_lag_and_is_not_blocked(spark: SparkSession) -> None:
    *_, last = cycles(spark, [offset("behind", 4)], [(TOPIC, 0, 15, 10)], [OPEN_AT_10], 3)
    # no batch read: LSO - committed, an upper bound (markers may lie between)
    assert last.lags == (
        GroupLag("behind", TOPIC, consumable_lag=6, blocked_lag=5, upper_bound_partitions=1),
    )
    assert last.blocked == ()


def test_lag_sums_partitions_of_a_topic_and_per_partition_rows_are_opt_in(spark: SparkSession) -> None:
    offsets = [offset("g", 4, partition=0), offset("g", 7, partition=1)]
    parts = [(TOPIC, 0, 15, 10), (TOPIC, 1, 9, 9)]
    [default] = cycles(spark, offsets, parts, [], 1)
    assert default.lags == (GroupLag("g", TOPIC, consumable_lag=8, blocked_lag=5, upper_bound_partitions=2),)
    assert default.partition_lags == ()
    [opted] = cycles(spark, offsets, parts, [], 1, GroupsConfig(enabled=True, per_partition=True))
    assert opted.partition_lags == (
        GroupLag("g", TOPIC, 6, 5, partition=0, upper_bound_partitions=1),
        GroupLag("g", TOPIC, 2, 0, partition=1, upper_bound_partitions=1),
    )


def test_a_group_whose_rows_disagree_on_its_state_still_has_one_lag_and_one_summary(
    spark: SparkSession,
) -> None:
    """The collector gives every row of a group one state; the family must not depend on it
    (the state is a grouping key of the per-topic aggregation, not a max())."""
    offsets = [
        offset("g", 4, partition=0),
        dataclasses.replace(offset("g", 7, partition=1, pending=True), group_state="Empty", coordinator_id=2),
    ]
    [result] = cycles(spark, offsets, [(TOPIC, 0, 15, 10), (TOPIC, 1, 9, 9)], [], 1)
    assert result.lags == (GroupLag("g", TOPIC, consumable_lag=8, blocked_lag=5, upper_bound_partitions=2),)
    [summary] = result.groups
    assert (summary.group_state, summary.coordinator_id, summary.unstable_offset_commits) == ("Stable", 2, 1)


def test_a_moving_lso_never_blocks_and_restarts_the_count(spark: SparkSession) -> None:
    carry: GroupsCarry | None = None
    results = []
    for i, lso in enumerate([10, 11, 12, 12, 12]):
        result = compute_groups(
            spark,
            [offset("follower", lso)],
            partitions(spark, [(TOPIC, 0, 20, lso)]),
            transactions(spark, [(TOPIC, 0, lso, "tx-1", 5, TxnClass.ONGOING.value, 1000)]),
            CONFIG,
            T0 + i * CYCLE_MS,
            carry=carry,
        )
        carry = result.carry
        results.append(result)
    assert [len(r.blocked) for r in results] == [0, 0, 0, 0, 1]
    assert results[-1].blocked[0].blocked_since_ms == T0 + 2 * CYCLE_MS
    assert [h.cycles for h in results[-1].carry.lso_history] == [3]


def test_an_lso_unread_for_a_cycle_keeps_its_history(spark: SparkSession) -> None:
    carry: GroupsCarry | None = None
    for i, (hwm, lso) in enumerate([(15, 10), (-1, -1), (15, 10)]):
        result = compute_groups(
            spark,
            [offset("g", 10)],
            partitions(spark, [(TOPIC, 0, hwm, lso)]),
            transactions(spark, [OPEN_AT_10]),
            CONFIG,
            T0 + i * CYCLE_MS,
            carry=carry,
        )
        carry = result.carry
    assert [h.cycles for h in result.carry.lso_history] == [2]


@pytest.mark.parametrize(
    ("gap", "left_by_a_complete_collection"),
    [("lso-unread", False), ("group-unread", False), ("group-gone", True)],
)
def test_a_blocked_group_keeps_its_since_through_a_cycle_without_evidence(
    spark: SparkSession, gap: str, left_by_a_complete_collection: bool
) -> None:
    # A group blocked behind the transaction at offset 10; in cycle 3 its evidence is missing:
    # the partition's offsets were not read, or its coordinator's OffsetFetch failed (another
    # group was read). Kept as it was, the page's clock goes on. A group absent from a
    # complete collection is gone: that is evidence, and it ends.
    carry: GroupsCarry | None = None
    blocked: list[list[tuple[str, int]]] = []
    for i in range(5):
        offsets = [offset("reader", 10), offset("other", 3, partition=1)]
        parts = [(TOPIC, 0, 15, 10), (TOPIC, 1, 5, 5)]
        incomplete = False
        if i == 3 and gap == "lso-unread":
            parts = [(TOPIC, 0, -1, -1), (TOPIC, 1, 5, 5)]
        if i == 3 and gap.startswith("group"):
            offsets = [offset("other", 3, partition=1)]
            incomplete = not left_by_a_complete_collection
        result = compute_groups(
            spark,
            offsets,
            partitions(spark, parts),
            transactions(spark, [OPEN_AT_10]),
            CONFIG,
            T0 + i * CYCLE_MS,
            carry=carry,
            offsets_incomplete=incomplete,
        )
        carry = result.carry
        blocked.append([(b.group, b.blocked_since_ms - T0) for b in result.blocked])
    assert blocked[2] == [("reader", 0)]
    if left_by_a_complete_collection:
        assert blocked[3] == []
        assert blocked[4] == [("reader", 4 * CYCLE_MS)]  # back: blocked since it came back
    else:
        assert blocked[3] == [("reader", 0)] and blocked[4] == [("reader", 0)]


def test_an_unread_group_is_no_longer_blocked_once_the_lso_it_waited_at_moves(
    spark: SparkSession,
) -> None:
    carry: GroupsCarry | None = None
    for i, (reader_read, lso) in enumerate([(True, 10), (True, 10), (True, 10), (False, 12)]):
        offsets = [offset("other", 3, partition=1)] + ([offset("reader", 10)] if reader_read else [])
        result = compute_groups(
            spark,
            offsets,
            partitions(spark, [(TOPIC, 0, 15, lso), (TOPIC, 1, 5, 5)]),
            transactions(spark, [OPEN_AT_10]),
            CONFIG,
            T0 + i * CYCLE_MS,
            carry=carry,
            offsets_incomplete=not reader_read,
        )
        carry = result.carry
        if i == 2:
            assert [b.group for b in result.blocked] == ["reader"]
    assert result.blocked == () and result.carry.at_lso == ()


def test_caught_up_partition_leaves_the_lso_history(spark: SparkSession) -> None:
    [result] = cycles(spark, [offset("g", 10)], [(TOPIC, 0, 10, 10)], [], 1)
    assert result.carry.lso_history == () and result.carry.at_lso == ()
    assert result.lags == (GroupLag("g", TOPIC, 0, 0),)


def test_blocked_without_a_known_transaction_at_the_lso_still_reports_the_partition(
    spark: SparkSession,
) -> None:
    *_, last = cycles(spark, [offset("g", 10)], [(TOPIC, 0, 15, 10)], [], 3)
    [blocked] = last.blocked
    assert (blocked.transactional_id, blocked.producer_id, blocked.start_offset) == (None, -1, -1)
    assert blocked.txn_class is None and blocked.application is None


def test_lag_stuck_at_one_is_zero_when_the_batches_show_nothing_consumable_before_the_lso(
    spark: SparkSession,
) -> None:
    # committed 9, LSO 10: offset 9 is the commit marker of the group's last transaction.
    marker_only = ConsumableCheck(TOPIC, 0, from_offset=9, to_offset=10, consumable_records=0)
    stale = ConsumableCheck(TOPIC, 1, from_offset=3, to_offset=10, consumable_records=0)
    [result] = cycles(
        spark,
        [offset("g", 9), offset("g", 9, partition=1)],
        [(TOPIC, 0, 10, 10), (TOPIC, 1, 10, 10)],
        [],
        1,
        GroupsConfig(enabled=True, per_partition=True),
        checks=[marker_only, stale],
    )
    assert result.partition_lags == (
        GroupLag("g", TOPIC, 0, 0, partition=0),
        GroupLag("g", TOPIC, 1, 0, partition=1, upper_bound_partitions=1),
    )


def test_pending_transactional_commits_are_counted_per_group(spark: SparkSession) -> None:
    [result] = cycles(
        spark,
        [
            offset("txn-group", 3, pending=True),
            offset("txn-group", 3, partition=1, pending=True),
            offset("plain", 3),
        ],
        [(TOPIC, 0, 3, 3), (TOPIC, 1, 3, 3)],
        [],
        1,
    )
    assert [(g.group, g.unstable_offset_commits) for g in result.groups] == [("plain", 0), ("txn-group", 2)]


def test_series_bounds_keep_the_largest_lags(spark: SparkSession) -> None:
    offsets = [offset(f"g{i}", 10 - i) for i in range(5)]
    config = GroupsConfig(enabled=True, max_group_series=2, max_blocked=0)
    *_, last = cycles(spark, offsets, [(TOPIC, 0, 15, 10)], [OPEN_AT_10], 3, config)
    assert [lag.group for lag in last.lags] == ["g3", "g4"]
    assert last.blocked == ()
    assert [g.blocked_partitions for g in last.groups if g.group == "g0"] == [1]


def test_nothing_committed_yields_no_lag(spark: SparkSession) -> None:
    [result] = cycles(spark, [offset("new", -1)], [(TOPIC, 0, 15, 10)], [], 1)
    assert result.lags == ()
    assert [g.group for g in result.groups] == ["new"]


def _one_action(frames: dict[str, DataFrame]) -> dict[str, tuple[tuple[Column, ...], DataFrame]]:
    """The family's outputs as the round's one action reads them (by each output's record)."""
    return {o.name: (o.columns, frames[o.name]) for o in FAMILY.outputs if o.name in frames}


def test_a_cycle_without_checks_or_carry_shuffles_nothing(spark: SparkSession) -> None:
    """Every input is one partition (Arrow tables, as the daemon's cycle hands them over), so
    no join or aggregation of the family needs an exchange, also when the consumable checks
    and the carried tables are empty (the usual cycle): an empty input sized as unknown
    (8 EiB) made the planner shuffle every join above it, the 100k offset rows of 1000
    groups x 100 partitions twice."""
    run = family_run([offset(f"g{i}", 10, partition=p) for i in range(3) for p in range(2)], CONFIG, T0)
    parts = one_partition(
        spark.createDataFrame(
            pa.table(
                {
                    "topic": [TOPIC, TOPIC],
                    "partition": [0, 1],
                    "high_watermark": [15, 15],
                    "last_stable_offset": [10, 15],
                }
            ),
            "topic string, partition int, high_watermark long, last_stable_offset long",
        )
    )
    txns = one_partition(
        spark.createDataFrame(
            pa.table({name: [value] for name, value in zip(TXN_COLUMNS, OPEN_AT_10, strict=True)}),
            ", ".join(f"{name} {kind}" for name, kind in TXN_TYPES),
        )
    )
    union, _ = transport.union(_one_action(group_frames(spark, run, parts, txns)))
    plan = union._jdf.queryExecution().executedPlan().toString()
    assert "Exchange" not in plan, plan


def test_each_output_of_the_family_reads_alone_as_it_reads_in_the_one_action(spark: SparkSession) -> None:
    """The family is one SQL statement over its inputs (``group_frames``); any one output,
    read by itself, has the rows it has in the union that the cycle's action reads."""
    result = cycles(
        spark, [offset("reader", 10), offset("behind", 4)], [(TOPIC, 0, 15, 10)], [OPEN_AT_10], 3
    )[-1]
    run = family_run([offset("reader", 10), offset("behind", 4)], CONFIG, T0, carry=result.carry)
    frames = group_frames(
        spark, run, partitions(spark, [(TOPIC, 0, 15, 10)]), transactions(spark, [OPEN_AT_10])
    )
    out = _one_action(frames)
    together = transport.collect({}, out)
    assert {name for name, rows in together.items() if rows} >= {
        "lags",
        "blocked",
        "groups",
        "lso_history",
        "at_lso",
    }
    for name, (columns, frame) in out.items():
        alone = [r.asDict() for r in frame.select(*(c.name for c in columns)).collect()]
        key = json.dumps
        assert sorted(alone, key=key) == sorted(together[name].get(0, []), key=key), name
