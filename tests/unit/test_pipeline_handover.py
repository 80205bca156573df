"""How input tables reach the JVM: large ones as files on an embedded session, with the
same results as when every table is in the plan."""

from __future__ import annotations

import os
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from exporter.groups_config import GroupsConfig
from exporter.model import ClusterSnapshot, CycleResult, GroupOffset, PipelineSettings
from exporter.pipeline import tables
from exporter.pipeline.compute import compute
from exporter.pipeline.session import FILE_MIN_ROWS_CONF
from exporter.pipeline.tables import Handover
from tests.unit.test_pipeline import NOW, described, listed, offsets, producer, snapshot

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


def test_large_tables_reach_an_embedded_jvm_as_files_with_the_same_results(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    snap = _busy_snapshot()
    monkeypatch.setattr(tables, "FILE_MIN_ROWS", 10**9)
    in_plan = _two_cycles(spark, snap)

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


def test_a_session_may_set_its_own_bound_for_files(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[str] = []
    write = pq.write_table

    def spy(table: Any, path: str, **kwargs: Any) -> None:
        written.append(path)
        write(table, path, **kwargs)

    monkeypatch.setattr(pq, "write_table", spy)
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


class _InPlan(tuple):  # type: ignore[type-arg]
    """What the fake sessions below return: a table kept in the plan, one partition."""

    def coalesce(self, partitions: int) -> _InPlan:
        assert partitions == 1
        return self


def _in_plan(table: Any, schema: Any) -> _InPlan:
    return _InPlan(("in plan", table.num_rows))


def test_a_remote_session_keeps_every_table_in_the_plan() -> None:
    connect_like = SimpleNamespace(createDataFrame=_in_plan)
    with Handover(connect_like, min_rows=1) as handover:  # type: ignore[arg-type]
        frame: Any = handover.frame(tables.arrow_of(tables.BrokerRow, [tables.BrokerRow(1)]), None)  # type: ignore[arg-type]
    assert frame == ("in plan", 1)


def test_a_cluster_master_keeps_every_table_in_the_plan() -> None:
    on_cluster = SimpleNamespace(
        _sc=SimpleNamespace(master="spark://spark-master:7077"),
        createDataFrame=_in_plan,
    )
    with Handover(on_cluster, min_rows=1) as handover:  # type: ignore[arg-type]
        frame: Any = handover.frame(tables.arrow_of(tables.BrokerRow, [tables.BrokerRow(1)]), None)  # type: ignore[arg-type]
    assert frame == ("in plan", 1)
