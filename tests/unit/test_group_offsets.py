"""Committed offsets as columns (exporter.model.GroupOffsets), as the collector fills them."""

from __future__ import annotations

from dataclasses import fields

import pytest

from exporter.kafka.consumable import Gap, consumable_gaps
from exporter.kafka.groups import _OffsetColumns
from exporter.model import GroupOffset, GroupOffsets, PartitionOffsets
from exporter.pipeline.tables import arrow_of, schema_of

RECORDS = (
    GroupOffset("g1", "t", 0, 10, 1, "Stable"),
    GroupOffset("g1", "t", 1, 5, 1, "Stable", pending_transactional_commit=True),
    GroupOffset("g2", "u", 0, -1, 2, "Empty"),
)


def test_columns_read_back_as_the_records_they_were_made_of() -> None:
    offsets = GroupOffsets.of(RECORDS)
    assert len(offsets) == 3 and offsets
    assert offsets == RECORDS
    assert tuple.__eq__(RECORDS, offsets) is NotImplemented  # so Python asks GroupOffsets
    assert RECORDS == offsets  # noqa: SIM300 (the reflected comparison is the point)
    assert list(offsets) == list(RECORDS)
    assert offsets[1] == RECORDS[1]
    assert offsets[1:] == RECORDS[1:]
    assert GroupOffsets.of(offsets) is offsets
    assert not GroupOffsets() and GroupOffsets() == ()
    assert offsets != RECORDS[:2]


def test_the_columns_are_the_records_fields_and_the_spark_tables_columns_in_one_order() -> None:
    assert tuple(f.name for f in fields(GroupOffset)) == GroupOffsets.FIELDS
    assert tuple(schema_of(GroupOffset).fieldNames()) == GroupOffsets.FIELDS
    assert arrow_of(GroupOffset, GroupOffsets.of(RECORDS)) == arrow_of(GroupOffset, RECORDS)
    assert GroupOffsets.of(RECORDS).columns()[3] == (10, 5, -1)


def test_columns_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="one column per field"):
        GroupOffsets([("g",), ("t",), (0,), (1,), (1,), ("Stable",), ()])
    with pytest.raises(ValueError, match="one column per field"):
        GroupOffsets([("g",)])


def test_a_group_read_from_two_coordinators_keeps_one_row_per_partition_with_the_last_read() -> None:
    columns = _OffsetColumns(frozenset({"moving"}))
    columns.add_topic("moving", "t", 1, "Stable", [(0, 10, False), (1, 11, False)])
    columns.add_topic("other", "t", 1, "Empty", [(0, 3, False)])
    columns.add_topic("moving", "t", 2, "PreparingRebalance", [(1, 12, True)])
    assert columns.done() == (
        GroupOffset("moving", "t", 0, 10, 1, "Stable"),
        GroupOffset("moving", "t", 1, 12, 2, "PreparingRebalance", True),
        GroupOffset("other", "t", 0, 3, 1, "Empty"),
    )


def test_the_offset_behind_a_pending_commit_is_set_on_its_row() -> None:
    columns = _OffsetColumns()
    columns.add_topic("g", "t", 1, "Stable", [(0, 7, False), (1, -1, True)])
    at = columns.index()[("g", "t", 1)]
    columns.set_committed(at, 42)
    assert columns.done()[1] == GroupOffset("g", "t", 1, 42, 1, "Stable", True)


def test_consumable_gaps_read_records_and_columns_alike_held_partitions_and_small_gaps_first() -> None:
    records = (
        *RECORDS,
        GroupOffset("g2", "t", 0, 4, 2, "Stable"),
        GroupOffset("g3", "t", 0, 10, 2, "Stable"),  # the same committed offset: read once
        GroupOffset("g2", "t", 2, 3, 2, "Stable"),
        GroupOffset("g2", "t", 3, 7, 2, "Stable"),  # at the LSO: nothing to read
    )
    partitions = [
        PartitionOffsets("t", 0, 1, 20, 12),
        PartitionOffsets("t", 1, 1, 9, 9),
        PartitionOffsets("t", 2, 1, 100, 100),
        PartitionOffsets("t", 3, 1, 7, 7),
    ]
    expected = [Gap("t", 0, (4, 10), 12, 20), Gap("t", 1, (5,), 9, 9), Gap("t", 2, (3,), 100, 100)]
    assert consumable_gaps(records, partitions) == expected
    assert consumable_gaps(GroupOffsets.of(records), partitions) == expected
    assert [g.held for g in expected] == [True, False, False]
