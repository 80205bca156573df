"""The round contract (exporter.pipeline.rounds): several clusters in, each cluster's own
result out, exactly as its own cycle would compute it; one cluster's failure is its own."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pyspark.sql import SparkSession

from exporter.model import PipelineSettings, TxnClass
from exporter.pipeline.compute import compute
from exporter.pipeline.rounds import ClusterRun, compute_round
from tests.unit.test_pipeline import NOW, described, listed, offsets, producer, snapshot

pytestmark = pytest.mark.spark


def _hanging_cluster(name: str) -> ClusterRun:
    snap = replace(snapshot(producers=[producer()]), cluster=name)
    return ClusterRun(snap, None, NOW, settings=PipelineSettings(hanging_confirm_cycles=1))


def _ongoing_cluster(name: str) -> ClusterRun:
    snap = replace(
        snapshot(producers=[producer()], listed_txns=[listed()], txns=[described()]),
        cluster=name,
    )
    return ClusterRun(snap, None, NOW)


def test_a_round_gives_each_cluster_what_its_own_cycle_gives(spark: SparkSession) -> None:
    runs = [_hanging_cluster("a"), _ongoing_cluster("b")]
    round_ = compute_round(spark, runs)
    assert not round_.failures
    for run in runs:
        alone = compute(spark, run.snapshot, run.settings, run.memory, run.now_ms)
        assert round_.results[run.cluster] == alone
    assert [f.txn_class for f in round_.results["a"].findings] == [TxnClass.HANGING]
    assert round_.results["b"].findings == ()


def test_a_cluster_whose_input_fails_fails_only_its_own_cycle(spark: SparkSession) -> None:
    broken = _hanging_cluster("broken")
    unrepresentable = replace(broken.snapshot, partitions=(replace(offsets(), high_watermark=2**70),))
    runs = [replace(broken, snapshot=unrepresentable), _ongoing_cluster("fine")]
    round_ = compute_round(spark, runs)
    assert set(round_.failures) == {"broken"}
    assert set(round_.results) == {"fine"}


def test_a_round_holds_each_cluster_once(spark: SparkSession) -> None:
    with pytest.raises(ValueError, match="each cluster once"):
        compute_round(spark, [_ongoing_cluster("x"), _ongoing_cluster("x")])
