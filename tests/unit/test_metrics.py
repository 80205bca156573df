"""Rendering: a fixed CycleResult in, the exposition out, checked sample by sample and by
promtool (the Debian prometheus package's linter)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.config import parse_config
from exporter.daemon.cycle import ClusterJob
from exporter.metrics.collector import ExporterMetrics, TransactionHealthCollector
from exporter.metrics.families import renderers
from exporter.metrics.scrape import Scrape
from exporter.metrics.state import ClusterState, StateStore
from exporter.model import (
    ApplicationTransactions,
    BrokerMetrics,
    ClusterSnapshot,
    CoordinatorCount,
    CoordinatorMetrics,
    CycleResult,
    Finding,
    HangingReason,
    PartitionMetrics,
    PipelineMemory,
    PipelineSettings,
    StartTimeSource,
    TopicMetrics,
    TxnClass,
    UnknownReason,
)
from exporter.pipeline.compute import ComputeStats
from exporter.pipeline.families import family_names
from exporter.pipeline.rounds import ClusterRun, RoundResult

NOW = 1_800_000_000.0


def hanging_finding() -> Finding:
    return Finding(
        topic="orders",
        partition=3,
        broker_id=2,
        producer_id=4001,
        producer_epoch=7,
        coordinator_epoch=1,
        start_offset=1200,
        last_timestamp_ms=1_799_000_000_000,
        start_time_ms=1_798_990_000_000,
        start_time_source=StartTimeSource.BATCH_TIMESTAMP,
        duration_ms=10_000_000,
        txn_class=TxnClass.HANGING,
        late=True,
        hanging_reason=HangingReason.PARTITION_NOT_IN_TRANSACTION,
        transactional_id="tx-a",
    )


def result() -> CycleResult:
    return CycleResult(
        cluster="prod",
        computed_at_ms=int(NOW * 1000),
        partitions=(
            PartitionMetrics("orders", 3, 2, lso_lag=42, max_active_transaction_duration_ms=10_000_000),
            PartitionMetrics("orders", 4, 1, lso_lag=0, max_active_transaction_duration_ms=None),
            PartitionMetrics("pay", 0, 1, lso_lag=0, max_active_transaction_duration_ms=1500),
            PartitionMetrics("pay", 1, 1, lso_lag=None, max_active_transaction_duration_ms=None),
        ),
        brokers=(
            BrokerMetrics(1, 0, 0, 0, verification_enabled=True, transaction_max_timeout_ms=900_000),
            BrokerMetrics(2, 1, 1, 42, verification_enabled=False, transaction_max_timeout_ms=60_000),
        ),
        coordinators=(CoordinatorMetrics(1, 1500, 0, (("Ongoing", 1), ("CompleteCommit", 5))),),
        findings=(hanging_finding(),),
        open_transactions_by_class=((TxnClass.HANGING, 1), (TxnClass.ONGOING, 1)),
        open_transactions_unknown=((UnknownReason.OWNER_MAY_BE_INVISIBLE, 2), (UnknownReason.UNVERIFIED, 0)),
        open_transactions_by_application=(
            ApplicationTransactions("order-enricher", TxnClass.ONGOING, 1),
            ApplicationTransactions("unknown", TxnClass.HANGING, 1),
        ),
        transactional_ids_visible=False,
        transaction_version=2,
        memory=PipelineMemory(timeout_aborts_total=(CoordinatorCount(1, 3),)),
    )


def render(
    mode: str = "nonzero", up: bool = True, label: str = "kafka_cluster", cycle: CycleResult | None = None
) -> CollectorRegistry:
    registry = CollectorRegistry()
    store = StateStore(["prod", "idle"])
    store.put(
        ClusterState(
            cluster="prod",
            result=cycle or result(),
            snapshot_taken_at_ms=int(NOW * 1000) - 5000,
            up=up,
            last_success_at_ms=int(NOW * 1000),
            cycles_complete=3,
            stage_seconds=(("metadata", 0.01), ("pipeline", 0.5)),
        )
    )
    ExporterMetrics(registry, ["prod", "idle"], label)
    registry.register(
        TransactionHealthCollector(
            store,
            PipelineSettings(lso_lag_series=mode),
            clock=lambda: NOW,
            cluster_label=label,
            intervals_ms={"prod": 30_000, "idle": 600_000},
        )
    )
    return registry


def test_kafka_derived_gauges() -> None:
    r = render()
    p = {"kafka_cluster": "prod", "topic": "orders", "partition": "3"}
    assert r.get_sample_value("kafka_txn_partition_max_active_transaction_duration_seconds", p) == 10_000
    assert r.get_sample_value("kafka_txn_partition_last_stable_offset_lag", p) == 42
    b2 = {"kafka_cluster": "prod", "broker": "2"}
    assert r.get_sample_value("kafka_txn_partitions_with_late_transactions", b2) == 1
    assert r.get_sample_value("kafka_txn_max_last_stable_offset_lag", b2) == 42
    assert r.get_sample_value("kafka_txn_hanging_transactions", b2) == 1
    assert r.get_sample_value("kafka_txn_broker_transaction_verification_enabled", b2) == 0
    assert r.get_sample_value("kafka_txn_broker_transaction_max_timeout_seconds", b2) == 60
    c1 = {"kafka_cluster": "prod", "coordinator": "1"}
    assert r.get_sample_value("kafka_txn_active_transaction_open_time_max_seconds", c1) == 1.5
    assert r.get_sample_value("kafka_txn_coordinator_transactions", {**c1, "state": "CompleteCommit"}) == 5
    assert r.get_sample_value("kafka_txn_coordinator_transactions", {**c1, "state": "Dead"}) == 0
    assert (
        r.get_sample_value("kafka_txn_open_transactions", {"kafka_cluster": "prod", "class": "hanging"}) == 1
    )
    assert r.get_sample_value("kafka_txn_open_transactions", {"kafka_cluster": "prod", "class": "late"}) == 0


def test_open_transactions_by_application_are_served_without_the_group_family() -> None:
    r = render()  # the result has no consumer-group family (groups off)
    app = {"kafka_cluster": "prod", "application": "order-enricher", "class": "ongoing"}
    assert r.get_sample_value("kafka_txn_open_transactions_by_application", app) == 1
    unknown = {"kafka_cluster": "prod", "application": "unknown", "class": "hanging"}
    assert r.get_sample_value("kafka_txn_open_transactions_by_application", unknown) == 1
    assert (
        r.get_sample_value("kafka_txn_consumer_group_blocked_partitions", {"kafka_cluster": "prod"}) is None
    )


def test_finding_series_carry_what_an_operator_needs_to_abort() -> None:
    r = render()
    labels = {
        "kafka_cluster": "prod",
        "broker": "2",
        "topic": "orders",
        "partition": "3",
        "producer_id": "4001",
        "producer_epoch": "7",
        "coordinator_epoch": "1",
        "start_offset": "1200",
        "transactional_id": "tx-a",
        "reason": "partition_not_in_transaction",
        "start_time_source": "batch_timestamp",
    }
    assert r.get_sample_value("kafka_txn_hanging_transaction_info", labels) == 1
    late = {k: v for k, v in labels.items() if k not in ("coordinator_epoch", "reason")}
    assert r.get_sample_value("kafka_txn_late_transaction_info", {**late, "class": "hanging"}) == 1


@pytest.mark.parametrize(("mode", "series"), [("nonzero", 1), ("open", 2), ("all", 3)])
def test_lso_lag_series_selection(mode: str, series: int) -> None:
    text = generate_latest(render(mode)).decode()
    lines = [x for x in text.splitlines() if x.startswith("kafka_txn_partition_last_stable_offset_lag{")]
    assert len(lines) == series


def test_exporter_self_metrics() -> None:
    r = render(up=False)
    assert r.get_sample_value("kafka_txn_exporter_up", {"kafka_cluster": "prod"}) == 0
    assert r.get_sample_value("kafka_txn_exporter_up", {"kafka_cluster": "idle"}) == 0
    assert r.get_sample_value("kafka_txn_exporter_snapshot_age_seconds", {"kafka_cluster": "prod"}) == 5
    assert r.get_sample_value("kafka_txn_exporter_snapshot_age_seconds", {"kafka_cluster": "idle"}) is None
    # Each cluster's configured interval, before its first cycle too (the staleness threshold).
    interval = "kafka_txn_exporter_collection_interval_seconds"
    assert r.get_sample_value(interval, {"kafka_cluster": "prod"}) == 30
    assert r.get_sample_value(interval, {"kafka_cluster": "idle"}) == 600
    assert (
        r.get_sample_value("kafka_txn_exporter_last_success_timestamp_seconds", {"kafka_cluster": "prod"})
        == NOW
    )
    assert (
        r.get_sample_value(
            "kafka_txn_exporter_stage_duration_seconds", {"kafka_cluster": "prod", "stage": "pipeline"}
        )
        == 0.5
    )
    for outcome in ("complete", "partial", "failed"):
        assert (
            r.get_sample_value(
                "kafka_txn_exporter_cycles_total", {"kafka_cluster": "idle", "result": outcome}
            )
            == 0
        )


def test_the_cluster_label_is_configurable() -> None:
    r = render(label="kafka")
    assert r.get_sample_value("kafka_txn_exporter_up", {"kafka": "prod"}) == 1
    assert r.get_sample_value("kafka_txn_hanging_transactions", {"kafka": "prod", "broker": "2"}) == 1
    assert r.get_sample_value("kafka_txn_exporter_up", {"kafka_cluster": "prod"}) is None


def test_blind_spot_unknown_reasons_and_cluster_features() -> None:
    r = render()
    prod = {"kafka_cluster": "prod"}
    assert r.get_sample_value("kafka_txn_exporter_transactional_ids_visible", prod) == 0
    assert (
        r.get_sample_value(
            "kafka_txn_open_transactions_unknown", {**prod, "reason": "owner_may_be_invisible"}
        )
        == 2
    )
    assert r.get_sample_value("kafka_txn_open_transactions_unknown", {**prod, "reason": "unverified"}) == 0
    assert r.get_sample_value("kafka_txn_cluster_transaction_version", prod) == 2
    assert r.get_sample_value("kafka_txn_coordinator_timeout_aborts_total", {**prod, "coordinator": "1"}) == 3


def test_unread_broker_settings_are_absent_not_guessed() -> None:
    cycle = replace(
        result(),
        brokers=(
            BrokerMetrics(1, 0, 0, 0, verification_enabled=None, transaction_max_timeout_ms=900_000),
            BrokerMetrics(
                2,
                0,
                0,
                0,
                verification_enabled=True,
                transaction_max_timeout_ms=900_000,
                two_phase_commit_enabled=True,
            ),
        ),
        transactional_ids_visible=None,
    )
    r = render(cycle=cycle)
    b1 = {"kafka_cluster": "prod", "broker": "1"}
    b2 = {"kafka_cluster": "prod", "broker": "2"}
    assert r.get_sample_value("kafka_txn_broker_transaction_verification_enabled", b1) is None
    assert r.get_sample_value("kafka_txn_broker_two_phase_commit_enabled", b1) is None
    assert r.get_sample_value("kafka_txn_broker_transaction_verification_enabled", b2) == 1
    assert r.get_sample_value("kafka_txn_broker_two_phase_commit_enabled", b2) == 1
    assert (
        r.get_sample_value("kafka_txn_exporter_transactional_ids_visible", {"kafka_cluster": "prod"}) is None
    )


def test_exposition_passes_promtool() -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: install the Debian package prometheus (.ci/setup.sh does)"
    text = generate_latest(render())
    check = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, timeout=60, check=False
    )
    assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()


def test_readiness_needs_a_complete_cycle() -> None:
    store = StateStore(["a", "b"])
    assert not store.ready
    store.put(ClusterState(cluster="a", up=False))
    assert not store.ready
    store.put(ClusterState(cluster="b", up=True, cycles_complete=1))
    assert store.ready


class _Collector:
    def collect(self, **_: Any) -> ClusterSnapshot:
        return ClusterSnapshot(cluster="prod", taken_at_ms=int(NOW * 1000))

    def close(self) -> None:
        pass


class _PipelineWithAFailedFamily:
    settings = PipelineSettings()

    def compute_round(self, runs: list[ClusterRun]) -> RoundResult:
        results = {
            r.cluster: CycleResult(cluster=r.cluster, computed_at_ms=r.now_ms, failed_families=("groups",))
            for r in runs
        }
        return RoundResult(results=results, failures={}, stats=ComputeStats())


def test_a_failed_pipeline_family_is_counted_per_cluster_and_family_from_zero() -> None:
    registry = CollectorRegistry()
    config = parse_config({"clusters": [{"name": "prod", "bootstrap_servers": "127.0.0.1:1"}]}, env={})
    job = ClusterJob(
        config.clusters[0],
        _Collector(),  # type: ignore[arg-type]
        _PipelineWithAFailedFamily(),  # type: ignore[arg-type]
        StateStore(["prod"]),
        ExporterMetrics(registry, ["prod", "idle"]),
        clock=lambda: NOW,
    )
    name = "kafka_txn_exporter_pipeline_family_errors_total"
    for cluster in ("prod", "idle"):
        for family in family_names():
            assert registry.get_sample_value(name, {"kafka_cluster": cluster, "family": family}) == 0
    job.run_cycle()
    assert registry.get_sample_value(name, {"kafka_cluster": "prod", "family": "groups"}) == 1
    assert registry.get_sample_value(name, {"kafka_cluster": "prod", "family": "classification"}) == 0
    assert {"classification", "groups", "coordinators"} <= set(family_names())


def test_every_family_renderer_module_is_rendered_at_each_scrape(monkeypatch: pytest.MonkeyPatch) -> None:
    """A renderer is found by its module (exporter/metrics/families): the collector renders
    each one with every cluster's latest result, no list to extend."""
    from prometheus_client.core import GaugeMetricFamily, Metric

    from exporter.metrics import collector

    def clusters(scrape: Scrape) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "kafka_txn_test_clusters", "Clusters rendered.", labels=[scrape.cluster_label]
        )
        for state, _ in scrape.results():
            family.add_metric([state.cluster], 1.0)
        yield family

    monkeypatch.setattr(collector, "renderers", lambda: (clusters,))
    assert render().get_sample_value("kafka_txn_test_clusters", {"kafka_cluster": "prod"}) == 1
    assert all(callable(r) for r in renderers())


def test_topic_series_one_per_topic() -> None:
    topics = (TopicMetrics("orders", 42, 10_000_000, 1), TopicMetrics("pay", 0, None, 0))
    r = render(cycle=replace(result(), topics=topics))
    orders, pay = ({"kafka_cluster": "prod", "topic": t} for t in ("orders", "pay"))
    assert r.get_sample_value("kafka_txn_topic_max_last_stable_offset_lag", orders) == 42
    assert r.get_sample_value("kafka_txn_topic_max_active_transaction_duration_seconds", orders) == 10_000
    assert r.get_sample_value("kafka_txn_topic_partitions_with_open_transactions", orders) == 1
    assert r.get_sample_value("kafka_txn_topic_max_last_stable_offset_lag", pay) == 0
    assert r.get_sample_value("kafka_txn_topic_max_active_transaction_duration_seconds", pay) is None
