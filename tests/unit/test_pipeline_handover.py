"""How input tables reach the JVM: large ones as files on an embedded session and as
checkpoints on a remote one, with the same results as when every table is in the plan."""

from __future__ import annotations

import os
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession

from exporter.config.groups import GroupsConfig
from exporter.model import (
    ClusterSnapshot,
    CycleResult,
    Finding,
    GroupOffset,
    PartitionOffsets,
    PipelineSettings,
)
from exporter.pipeline import tables
from exporter.pipeline.compute import compute
from exporter.pipeline.session import FILE_MIN_ROWS_CONF
from exporter.pipeline.tables import Handover
from tests.unit.test_pipeline import NOW, described, listed, offsets, producer, snapshot
from tests.unit.test_pipeline_tables import _finding

pytestmark = pytest.mark.spark

SETTINGS = PipelineSettings(hanging_confirm_cycles=2)
GROUPS = GroupsConfig(enabled=True, per_partition=True)


def _busy_snapshot() -> ClusterSnapshot:
    """200 partitions: most idle, some with a transaction its coordinator owns, some whose
    coordinator knows nothing of it (hanging candidates), and two consumer groups."""
    producers, parts, listed_txns, txns = [], [], [], []
    for p in range(200):
        if p % 10 == 0:
            pid = 1000 + p
            producers.append(producer("busy", p, pid=pid, start=50))
            if p % 20 == 0:
                tid = f"app-{p}"
                listed_txns.append(listed(tid, pid))
                txns.append(described(tid, pid=pid, parts=(("busy", p),)))
            parts.append(offsets("busy", p, hw=80, lso=50))
        else:
            parts.append(offsets("busy", p, hw=80, lso=80))
    groups = tuple(
        GroupOffset(group, "busy", p, committed, 1, "Stable")
        for group, committed in (("readers", 50), ("laggards", 10))
        for p in range(200)
    )
    snap = snapshot(producers=producers, partitions=parts, listed_txns=listed_txns, txns=txns)
    return replace(snap, group_offsets=groups)


def _two_cycles(spark: SparkSession, snap: ClusterSnapshot) -> tuple[CycleResult, CycleResult]:
    first = compute(spark, snap, SETTINGS, None, NOW, groups=GROUPS)
    second = compute(spark, snap, SETTINGS, first.memory, NOW + 30_000, groups=GROUPS)
    return first, second


def _with_every_table_in_the_plan(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> tuple[ClusterSnapshot, tuple[CycleResult, CycleResult]]:
    snap = _busy_snapshot()
    monkeypatch.setattr(tables, "FILE_MIN_ROWS", 10**9)
    return snap, _two_cycles(spark, snap)


def test_large_tables_reach_an_embedded_jvm_as_files_with_the_same_results(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    snap, in_plan = _with_every_table_in_the_plan(spark, monkeypatch)
    written: list[str] = []
    write = pq.write_table

    def spy(table: Any, path: str, **kwargs: Any) -> None:
        written.append(path)
        write(table, path, **kwargs)

    monkeypatch.setattr(tables, "FILE_MIN_ROWS", 1)
    monkeypatch.setattr(pq, "write_table", spy)
    via_files = _two_cycles(spark, snap)

    assert written, "no table went through a file"
    assert via_files == in_plan
    assert in_plan[1].findings and in_plan[1].groups is not None and in_plan[1].groups.lags
    assert not any(os.path.exists(os.path.dirname(path)) for path in written), "input files left behind"


def test_large_tables_become_checkpoints_where_the_engine_cannot_read_our_files_with_the_same_results(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    snap, in_plan = _with_every_table_in_the_plan(spark, monkeypatch)
    checkpointed: list[tuple[str, ...]] = []
    classic = type(spark.range(1))
    checkpoint = classic.localCheckpoint

    def spy(frame: DataFrame, eager: bool = True, storageLevel: Any = None) -> DataFrame:  # noqa: N803
        checkpointed.append(tuple(frame.columns))
        return checkpoint(frame, eager)

    monkeypatch.setattr(tables, "_reads_our_files", lambda session: False)
    monkeypatch.setattr(tables, "FILE_MIN_ROWS", 50)
    monkeypatch.setattr(classic, "localCheckpoint", spy)
    remote_like = _two_cycles(spark, snap)

    # Each cycle: the 200 partitions' offsets and the group family's inputs past 50 rows
    # (its 400 offsets, the partitions' LSO history), besides the classification's own
    # checkpoint; the smaller tables stay in the plan. (A checkpoint is told by its columns:
    # the cluster's and the record's.)
    offsets = tuple(tables.keyed_schema(PartitionOffsets).fieldNames())
    assert len(checkpointed) == 2 * 4 and checkpointed.count(offsets) == 2, checkpointed
    assert remote_like == in_plan


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the Parquet files the test's hand-overs write."""
    paths: list[str] = []
    write = pq.write_table

    def spy(table: Any, path: str, **kwargs: Any) -> None:
        paths.append(path)
        write(table, path, **kwargs)

    monkeypatch.setattr(pq, "write_table", spy)
    return paths


def test_a_session_may_set_its_own_bound_for_files(spark: SparkSession, written: list[str]) -> None:
    rows = tables.arrow_of(tables.BrokerRow, [tables.BrokerRow(b) for b in range(10)])
    spark.conf.set(FILE_MIN_ROWS_CONF, "5")
    try:
        with Handover(spark) as handover:
            handover.frame(rows, tables.schema_of(tables.BrokerRow))
    finally:
        spark.conf.unset(FILE_MIN_ROWS_CONF)
    assert len(written) == 1
    with Handover(spark) as handover:
        handover.frame(rows, tables.schema_of(tables.BrokerRow))
    assert len(written) == 1  # 10 rows < FILE_MIN_ROWS: in the plan


def test_the_first_computation_of_an_embedded_jvm_keeps_its_tables_in_the_plan_and_the_next_writes_files(
    spark: SparkSession, written: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first Parquet file a JVM reads costs the reader's start: the daemon's first cycle
    # keeps tables of fewer than SHORT_LIVED_FILE_MIN_ROWS rows in the plan.
    monkeypatch.setattr(tables, "_READERS_STARTED", set())
    rows = tables.arrow_of(tables.BrokerRow, [tables.BrokerRow(b) for b in range(tables.FILE_MIN_ROWS)])
    small = tables.arrow_of(tables.BrokerRow, [tables.BrokerRow(b) for b in range(10)])
    with Handover(spark) as handover:
        handover.frame(small, tables.schema_of(tables.BrokerRow))
    # A computation of small tables only (the warm-up) does not count: this one is the first.
    with Handover(spark) as handover:
        handover.frame(rows, tables.schema_of(tables.BrokerRow))
    assert written == []
    with Handover(spark) as handover:
        handover.frame(rows, tables.schema_of(tables.BrokerRow))
    assert len(written) == 1


class _InPlan(tuple):  # type: ignore[type-arg]
    """What the fake sessions below return: a table kept in the plan, one partition, which
    may be made a checkpoint."""

    def coalesce(self, partitions: int) -> _InPlan:
        assert partitions == 1
        return self

    def localCheckpoint(self, eager: bool) -> _InPlan:  # noqa: N802 (PySpark's name)
        assert not eager, "a checkpoint computed before the cycle's action is a job of its own"
        return _InPlan(("checkpoint", *self))


def _in_plan(table: Any, schema: Any) -> _InPlan:
    return _InPlan(("in plan", table.num_rows))


def _frames(session: Any, sizes: tuple[int, ...]) -> list[Any]:
    with Handover(session, min_rows=3) as handover:
        return [
            handover.frame(tables.arrow_of(tables.BrokerRow, [tables.BrokerRow(b) for b in range(n)]), None)  # type: ignore[arg-type]
            for n in sizes
        ]


def test_a_remote_session_keeps_small_tables_in_the_plan_and_checkpoints_large_ones() -> None:
    connect_like = SimpleNamespace(createDataFrame=_in_plan)
    assert _frames(connect_like, (2, 3)) == [("in plan", 2), ("checkpoint", "in plan", 3)]


def test_a_cluster_master_keeps_small_tables_in_the_plan_and_checkpoints_large_ones() -> None:
    on_cluster = SimpleNamespace(
        _sc=SimpleNamespace(master="spark://spark-master:7077"),
        createDataFrame=_in_plan,
    )
    assert _frames(on_cluster, (2, 3)) == [("in plan", 2), ("checkpoint", "in plan", 3)]


def _calls_into_the_jvm(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every command Python sends the JVM from now on (not the finalizer's deletions)."""
    from py4j import clientserver

    sent: list[str] = []
    send = clientserver.ClientServerConnection.send_command

    def counted(self: Any, command: str, *args: Any, **kwargs: Any) -> Any:
        if not command.startswith("m\nd\n"):
            sent.append(command)
        return send(self, command, *args, **kwargs)

    monkeypatch.setattr(clientserver.ClientServerConnection, "send_command", counted)
    return sent


@pytest.mark.parametrize("rows", [0, 3], ids=["empty", "three rows"])
def test_a_small_table_enters_the_plan_in_three_calls_to_the_jvm_with_the_rows_create_data_frame_gives(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, rows: int
) -> None:
    records = [_finding(p, transactional_id=None if p == 1 else f"app-{p}", late=p == 2) for p in range(rows)]
    table = tables.keyed_arrow(Finding, [records])
    schema = tables.keyed_schema(Finding)
    temp = spark.sparkContext._temp_dir
    assert temp is not None
    tables.in_plan(spark, table, schema)  # the static methods' first lookups (session.LOOKED_UP_ONCE)
    sent = _calls_into_the_jvm(monkeypatch)

    frame = tables.in_plan(spark, table, schema)

    assert len(sent) == 3
    monkeypatch.undo()
    assert frame._jdf.queryExecution().analyzed().getClass().getSimpleName() == "LocalRelation"
    assert frame.schema == schema
    assert frame.collect() == spark.createDataFrame(table, schema).collect()
    assert len(frame.collect()) == rows
    assert not [name for name in os.listdir(temp) if name.startswith("kte-rows-")]


def test_a_small_table_is_converted_with_its_sessions_settings_from_any_thread(spark: SparkSession) -> None:
    """The JVM thread serving a new Python thread has no active session: there the rows'
    conversion would read Spark's defaults (code generation on; the JVM's code cache sized
    100 if it is its first use)."""
    import threading

    table = tables.keyed_arrow(Finding, [[_finding(0)]])
    active: list[bool] = []

    def convert() -> None:
        tables.in_plan(spark, table, tables.keyed_schema(Finding))
        jvm: Any = spark._jvm
        here = getattr(jvm, "org.apache.spark.sql.classic.SparkSession").getActiveSession()
        active.append(bool(here.isDefined()) and bool(here.get().equals(spark._jsparkSession)))

    thread = threading.Thread(target=convert)
    thread.start()
    thread.join(timeout=60)
    assert active == [True]
