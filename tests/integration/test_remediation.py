"""The daemon's guarded auto-remediation on a real broker: a genuine hanging transaction is
aborted once, after ``after``, and read_committed consumers read past it; a transaction its
coordinator owns again by the time of the action is never touched; the hourly budget holds
and a restarted daemon does not act again; a dry run writes nothing and reports."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import CollectorRegistry, Counter
from pyspark.sql import SparkSession

from exporter.config import Config, parse_config
from exporter.daemon import Daemon, PipelineRunner
from exporter.kafka.admin import ClusterAdmin
from exporter.model import ClusterSnapshot
from exporter.remediation.config import RemediationConfig
from exporter.remediation.engine import Remediation
from testbed.broker import KafkaCluster
from testbed.rawclient import RawClient
from testbed.scenarios import produce_plain
from tests.fixtures_kafka import HangingFactory

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def daemon_config(bootstrap: str, topic: str, remediation: dict[str, object] | None = None) -> Config:
    cluster: dict[str, object] = {
        "name": "test",
        "bootstrap_servers": bootstrap,
        "interval": "2s",
        "request_timeout": "1500ms",
        "topics": {"allow": [topic]},
    }
    if remediation is not None:
        cluster["remediation"] = remediation
    return parse_config({"web": {"listen_address": "127.0.0.1:0"}, "clusters": [cluster]}, env={})


@pytest.fixture
def daemons(spark: SparkSession) -> Iterator[list[Daemon]]:
    made: list[Daemon] = []
    yield made
    for d in made:
        d.stop()


def open_starts(cluster: KafkaCluster, topic: str, partition: int) -> list[int]:
    with ClusterAdmin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        rows = admin.describe_producers({cluster.leader_of(topic, partition): [(topic, partition)]}).rows
    return [p.current_txn_start_offset for p in rows if p.current_txn_start_offset >= 0]


def read_committed(cluster: KafkaCluster, topic: str, partition: int, *, want: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"kte-rem-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < want and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        return values
    finally:
        consumer.close()


def counted(counter: Counter, result: str) -> float:
    return float(counter.labels("test", "abort", result)._value.get())


def test_remediation_aborts_a_genuine_hanging_transaction_once_and_never_an_owned_one(
    kafka: KafkaCluster,
    topic: str,
    hanging: HangingFactory,
    spark: SparkSession,
    daemons: list[Daemon],
    tmp_path: Path,
) -> None:
    config = daemon_config(kafka.bootstrap_servers, topic)
    rules = RemediationConfig(
        enabled=True, dry_run=False, after_ms=3000, topics=(topic,), max_actions_per_hour=2
    )
    cluster = replace(config.clusters[0], remediation=rules)
    counter = Counter(
        "kafka_txn_remediations", "test", ["kafka_cluster", "action", "result"], registry=CollectorRegistry()
    )
    remediation = Remediation([cluster], counter=counter, state_dir=str(tmp_path), start=False)
    daemon = Daemon(
        config,
        registry=CollectorRegistry(),
        pipeline=PipelineRunner(config.spark, config.pipeline, session=spark),
        listeners=[remediation],
    )
    daemons.append(daemon)
    genuine = hanging(topic, partition=0)
    owned = hanging(topic, partition=1)
    third = hanging(topic, partition=2)
    produce_plain(kafka.bootstrap_servers, topic, partition=0, records=3)
    try:
        first_hanging = None
        while remediation.queued < 2:
            daemon.jobs[0].run_cycle()
            since = remediation.state("test").hanging_since
            if since and first_hanging is None:
                first_hanging = min(since.values())
                assert not remediation.queued, "acted before `after`"
        result = daemon.store.get("test").result
        assert result is not None
        assert result.computed_at_ms - (first_hanging or 0) >= rules.after_ms
        # Between the confirmation and the action, the owned one's coordinator answers again:
        # its open transaction now includes the partition.
        with RawClient(kafka.bootstrap_servers) as raw:
            raw.add_partitions_to_txn(
                owned.transactional_id, owned.producer_id, owned.producer_epoch, [(topic, 1)]
            )
        assert remediation.process_pending() == 2

        results = {(e["partition"], e["result"]) for e in remediation.audit}
        assert results == {(0, "aborted"), (1, "refused")}, list(remediation.audit)
        assert open_starts(kafka, topic, 0) == []
        assert kafka.end_offsets(topic, 0)[1] > genuine.start_offset
        assert read_committed(kafka, topic, 0, want=3) == [b"plain"] * 3
        assert open_starts(kafka, topic, 1) == [owned.start_offset]  # never touched
        assert (counted(counter, "aborted"), counted(counter, "refused")) == (1.0, 1.0)

        # The hourly budget (2) is spent: the third stays, cycle after cycle.
        for _ in range(3):
            daemon.jobs[0].run_cycle()
        assert remediation.process_pending() == 0
        assert open_starts(kafka, topic, 2) == [third.start_offset]

        # A restarted daemon (the same state_dir) never acts again on what it did, and keeps
        # the hour's budget.
        again = Remediation([cluster], counter=counter, state_dir=str(tmp_path), start=False)
        assert set(again.state("test").done) == set(remediation.state("test").done)
        for _ in range(2):
            daemon.jobs[0].run_cycle()
            latest = daemon.store.get("test").result
            assert latest is not None
            again(daemon_snapshot_stub(), latest)
        assert again.process_pending() == 0
        assert len(again.audit) == 0
    finally:
        with ClusterAdmin(bootstrap_servers=kafka.bootstrap_servers) as admin:  # end the owned one
            admin.force_terminate(owned.transactional_id, kafka.coordinator_of(owned.transactional_id))
        remediation.close()


def daemon_snapshot_stub() -> ClusterSnapshot:
    return ClusterSnapshot(cluster="test", taken_at_ms=0)


def test_remediation_in_a_dry_run_acts_on_nothing_and_reports(
    kafka: KafkaCluster,
    topic: str,
    hanging: HangingFactory,
    spark: SparkSession,
    daemons: list[Daemon],
) -> None:
    config = daemon_config(kafka.bootstrap_servers, topic, {"after": "0s", "topics": [topic]})
    assert config.clusters[0].remediation.dry_run is True
    daemon = Daemon(
        config,
        registry=CollectorRegistry(),
        pipeline=PipelineRunner(config.spark, config.pipeline, session=spark),
    )
    daemons.append(daemon)
    assert daemon.remediation is not None
    stuck = hanging(topic, partition=0)
    deadline = time.monotonic() + 120
    while not daemon.remediation.audit:
        assert time.monotonic() < deadline, "no dry-run report"
        daemon.jobs[0].run_cycle()
        time.sleep(0.5)
    (entry,) = daemon.remediation.audit
    assert (entry["result"], entry["dry_run"], entry["start_offset"]) == ("dry_run", True, stuck.start_offset)
    assert entry["written"] == "nothing (dry run)" and entry["initiator"] == "remediation"
    assert open_starts(kafka, topic, 0) == [stuck.start_offset]
    samples = {
        s.labels["result"]: s.value
        for m in daemon.registry.collect()
        if m.name == "kafka_txn_remediations"
        for s in m.samples
        if s.name.endswith("_total")
    }
    assert samples == {"aborted": 0.0, "dry_run": 1.0, "refused": 0.0, "failed": 0.0}
    # Reported once, not every cycle.
    for _ in range(2):
        daemon.jobs[0].run_cycle()
    time.sleep(1)
    assert len(daemon.remediation.audit) == 1
