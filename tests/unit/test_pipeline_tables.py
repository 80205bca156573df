"""The snapshot's records as the Arrow tables the pipeline's inputs are made of."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from exporter.columns import columns_of
from exporter.model import (
    Finding,
    HangingReason,
    PartitionOffsets,
    StartTimeSource,
    TxnClass,
)
from exporter.pipeline import tables


def _finding(partition: int, **given: Any) -> Finding:
    fields: dict[str, Any] = {
        "topic": "orders",
        "partition": partition,
        "broker_id": 1,
        "producer_id": 7,
        "producer_epoch": 0,
        "coordinator_epoch": 0,
        "start_offset": 10,
        "last_timestamp_ms": 1000,
        "start_time_ms": 900,
        "start_time_source": StartTimeSource.BATCH_TIMESTAMP,
        "duration_ms": 100,
        "txn_class": TxnClass.ONGOING,
        "late": False,
    }
    return Finding(**{**fields, **given})


def test_records_become_one_arrow_column_per_field_with_enums_as_their_values_and_none_as_null() -> None:
    rows = [
        _finding(0),
        _finding(1, txn_class=TxnClass.HANGING, hanging_reason=HangingReason.NO_TRANSACTIONAL_ID),
    ]

    table = tables.arrow_of(Finding, rows)

    assert table.schema == pa.schema([pa.field(c.name, c.arrow, c.nullable) for c in columns_of(Finding)])
    assert table.column("partition").to_pylist() == [0, 1]
    assert table.column("txn_class").to_pylist() == ["ongoing", "hanging"]
    assert table.column("hanging_reason").to_pylist() == [None, HangingReason.NO_TRANSACTIONAL_ID.value]
    assert table.column("late").to_pylist() == [False, False]


def test_no_records_become_an_empty_table_of_the_same_columns() -> None:
    table = tables.arrow_of(PartitionOffsets, [])

    assert table.num_rows == 0
    assert table.column_names == [c.name for c in columns_of(PartitionOffsets)]


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generations of the garbage collections that run while the test does (clear it
    to count from a point on)."""
    seen: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(count)
    try:
        yield seen
    finally:
        gc.callbacks.remove(count)


def test_building_an_input_table_runs_no_garbage_collection_however_many_rows(collections: list[int]) -> None:
    """A table's columns only reference the records' values: nothing per row that the
    collector tracks, so 100k partitions do not set off collections that walk every object of
    the process (a tuple per row did: two full collections a cycle at 100k partitions)."""
    rows = [PartitionOffsets("orders", p, p % 3, 10 + p, 5) for p in range(50_000)]
    gc.collect()
    collections.clear()

    table = tables.arrow_of(PartitionOffsets, rows)

    assert table.column("high_watermark").to_pylist() == [10 + p for p in range(50_000)]
    # A tuple per row set off a young collection every 700 rows (~70 here); the few allowed
    # are for other threads' allocations while this one runs.
    assert len(collections) <= 5
