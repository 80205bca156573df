"""Every output of a round in ONE Spark action, split per output table and per cluster.

The tables are stacked in one ``UNION ALL`` with a ``_table`` tag; one ``toArrow()`` brings
the whole result back, and each table is cut out of it by its tag, each row handed to its
cluster by its cluster column. One plan, one job submission, one transfer: Spark's
per-action cost is paid once per round instead of once per table and cluster.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.types import DataType, StringType, StructField, StructType

from exporter.columns import Column
from exporter.pipeline.tables import CLUSTER

#: Each output table's rows by cluster (its position in the round), each row by column name.
RoundRows = dict[str, dict[int, list[dict[str, Any]]]]


def collect(seconds: dict[str, float], out: Mapping[str, tuple[Sequence[Column], DataFrame]]) -> RoundRows:
    """Every output table (its columns, read by name, and its frame) in one Spark action
    (:func:`union`); the action's time is recorded in ``seconds["collect"]``."""
    if not out:
        return {}
    frame, placed = union(out)
    started = time.perf_counter()
    arrow: pa.Table = frame.toArrow()
    seconds["collect"] = time.perf_counter() - started
    tags = arrow.column("_table")
    rows: RoundRows = {}
    for table, slots in placed.items():
        mine = (
            arrow.filter(pc.equal(tags, table))
            .select([slot for _, slot in slots])
            .rename_columns([c.name for c, _ in slots])
            .to_pylist()
        )
        by_cluster: dict[int, list[dict[str, Any]]] = {}
        for row in mine:
            by_cluster.setdefault(row[CLUSTER], []).append(row)
        rows[table] = by_cluster
    return rows


def union(
    out: Mapping[str, tuple[Sequence[Column], DataFrame]],
) -> tuple[DataFrame, dict[str, list[tuple[Column, str]]]]:
    """Every output table in one frame (a ``_table`` tag, typed slots), and where each
    table's columns are in it.

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
    placed = {table: _slots(columns) for table, (columns, _) in out.items()}
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
        return _connect_union(frames, selects, schema), placed
    branches = [f"SELECT {', '.join(values)} FROM {{{table}}}" for table, values in selects.items()]
    return next(iter(frames.values())).sparkSession.sql("\nUNION ALL\n".join(branches), **frames), placed


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


def _slots(columns: Sequence[Column]) -> list[tuple[Column, str]]:
    """Each column with the union slot it takes: the n-th column of a type takes slot n."""
    taken: dict[str, int] = {}
    placed = []
    for c in columns:
        kind = c.spark.simpleString()
        placed.append((c, f"{kind}_{taken.get(kind, 0)}"))
        taken[kind] = taken.get(kind, 0) + 1
    return placed
