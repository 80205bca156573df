"""The daemon against real brokers, checked against Kafka's own tools and JMX gauges.

Cycles are run directly (``ClusterJob.run_cycle``) where a test checks values, so that each
assertion sees exactly one known cycle; the scheduler, the HTTP endpoints and SIGTERM are
tested on a running daemon and on the real command line.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession

from exporter.config import Config, parse_config
from exporter.daemon import Daemon, PipelineRunner
from testbed.broker import KafkaCluster, free_port
from testbed.maven import KafkaDistribution
from testbed.oracles import JmxTool, TransactionsCommand
from testbed.scenarios import (
    OpenTransaction,
    produce_plain,
    run_coordinator_timeout,
    run_transaction,
)
from tests.fixtures_kafka import KAFKA_CLUSTERS, HangingFactory

pytestmark = [pytest.mark.kafka, pytest.mark.spark]
LATE_BACKDATE_MS = 30 * 60 * 1000  # past transaction.max.timeout.ms (15 min) + 5 min


def make_config(bootstrap: str, **cluster: object) -> Config:
    return parse_config(
        {
            "web": {"listen_address": "127.0.0.1:0"},
            "pipeline": {"hanging_confirm_cycles": 1, "lso_lag_series": "all"},
            "clusters": [
                {
                    "name": "test",
                    "bootstrap_servers": bootstrap,
                    "interval": "2s",
                    "request_timeout": "1500ms",
                    **cluster,
                }
            ],
        },
        env={},
    )


@pytest.fixture
def daemon_for(spark: SparkSession) -> Iterator[Callable[..., Daemon]]:
    made: list[Daemon] = []

    def factory(bootstrap: str, **cluster: object) -> Daemon:
        config = make_config(bootstrap, **cluster)
        daemon = Daemon(
            config,
            registry=CollectorRegistry(),
            pipeline=PipelineRunner(config.spark, config.pipeline, session=spark),
        )
        made.append(daemon)
        return daemon

    yield factory
    for d in made:
        d.stop()


def cycle(daemon: Daemon) -> CollectorRegistry:
    daemon.jobs[0].run_cycle()
    return daemon.registry


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"kafka_cluster": "test", **labels})


def hanging_series(registry: CollectorRegistry) -> list[dict[str, str]]:
    return [
        dict(s.labels)
        for m in registry.collect()
        if m.name == "kafka_txn_hanging_transaction_info"
        for s in m.samples
    ]


@pytest.mark.parametrize("kafka_any", KAFKA_CLUSTERS, indirect=True)
def test_every_scenario_matches_kafkas_own_tools(
    kafka_any: KafkaCluster,
    kafka_dist: KafkaDistribution,
    topic: str,
    hanging: HangingFactory,
    transactions_cli: TransactionsCommand,
    daemon_for: Callable[..., Daemon],
) -> None:
    bootstrap = kafka_any.bootstrap_servers
    run_transaction(bootstrap, topic, partition=0, commit=True)
    run_transaction(bootstrap, topic, partition=0, commit=False)
    stuck = hanging(topic, partition=1, backdate_ms=LATE_BACKDATE_MS)
    with OpenTransaction(bootstrap, topic, partition=2) as legit:
        legit.begin(records=2)
        produce_plain(bootstrap, topic, partition=2, records=5)
        daemon = daemon_for(bootstrap, topics={"allow": [topic]})
        registry = cycle(daemon)

        # The hanging transaction, with what an operator needs to abort it.
        found = [s for s in hanging_series(registry) if s["topic"] == topic]
        assert [(s["partition"], s["producer_id"], s["start_offset"]) for s in found] == [
            ("1", str(stuck.producer_id), str(stuck.start_offset))
        ]
        assert found[0]["transactional_id"] == stuck.transactional_id
        # The coordinator went back to Empty: Kafka calls it "partition not in the transaction".
        assert found[0]["reason"] in ("coordinator_not_open", "partition_not_in_transaction")
        assert found[0]["broker"] == str(stuck.leader)
        assert value(registry, "kafka_txn_hanging_transactions", broker=str(stuck.leader)) == 1
        # The legitimate open transaction is open and ongoing, not hanging.
        assert (value(registry, "kafka_txn_open_transactions", **{"class": "ongoing"}) or 0) >= 1
        assert (
            value(
                registry,
                "kafka_txn_partition_max_active_transaction_duration_seconds",
                topic=topic,
                partition="2",
            )
            is not None
        )

        # Oracle 1: everything Kafka's own find-hanging reports, we report.
        theirs = {
            (h.topic, h.partition, h.producer_id, h.start_offset)
            for h in transactions_cli.find_hanging(topic=topic, max_transaction_timeout_min=0)
        }
        ours = {
            (s["topic"], int(s["partition"]), int(s["producer_id"]), int(s["start_offset"])) for s in found
        }
        assert theirs, "Kafka's find-hanging should see the injected transaction"
        assert theirs <= ours

        # Oracle 2: the brokers' JMX gauges (read after the cycle; nothing changes between).
        for node_id, node in kafka_any.nodes.items():
            jmx = JmxTool(kafka_dist, node.jmx_port)
            assert (
                value(registry, "kafka_txn_partitions_with_late_transactions", broker=str(node_id))
                == jmx.late_transactions()
            )
            for partition in range(3):
                if kafka_any.leader_of(topic, partition) != node_id:
                    continue
                assert value(
                    registry,
                    "kafka_txn_partition_last_stable_offset_lag",
                    topic=topic,
                    partition=str(partition),
                ) == jmx.lso_lag(topic, partition)
        lag = value(registry, "kafka_txn_partition_last_stable_offset_lag", topic=topic, partition="2")
        assert lag is not None and lag >= 5

        legit.commit()
    # EndTxn returns once the coordinator has logged PrepareCommit; the partition leader
    # gets its marker a moment later, so the LSO catches up within a cycle or two (and a
    # cycle reads offsets and producers concurrently, so one may see the marker first).
    deadline = time.monotonic() + 30
    while True:
        registry = cycle(daemon)
        lag = value(registry, "kafka_txn_partition_last_stable_offset_lag", topic=topic, partition="2")
        age = value(
            registry,
            "kafka_txn_partition_max_active_transaction_duration_seconds",
            topic=topic,
            partition="2",
        )
        if (lag == 0 and age is None) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert lag == 0
    assert age is None
    assert value(registry, "kafka_txn_exporter_up") == 1


def test_coordinator_timeout_abort_is_counted(
    kafka: KafkaCluster,
    topic: str,
    daemon_for: Callable[..., Daemon],
) -> None:
    daemon = daemon_for(kafka.bootstrap_servers, topics={"allow": [topic]})
    registry = cycle(daemon)
    # The counter exists at 0 for every coordinator before any abort (rate() has data).
    assert value(registry, "kafka_txn_coordinator_timeout_aborts_total", coordinator="1") is not None
    before = sum(
        s.value
        for m in registry.collect()
        if m.name == "kafka_txn_coordinator_timeout_aborts"
        for s in m.samples
        if s.name.endswith("_total")
    )
    # Cycles run while the producer goes quiet until its coordinator aborts it (KIP-588).
    stop_at = time.monotonic() + 60
    import threading

    result: list[object] = []
    worker = threading.Thread(
        target=lambda: result.append(
            run_coordinator_timeout(kafka.bootstrap_servers, topic, partition=0, transaction_timeout_ms=3000)
        )
    )
    worker.start()
    while worker.is_alive() and time.monotonic() < stop_at:
        cycle(daemon)
        time.sleep(0.2)
    worker.join(timeout=5)
    assert result, "the coordinator did not abort the transaction on time"
    after = before
    for _ in range(3):
        registry = cycle(daemon)
        after = sum(
            s.value
            for m in registry.collect()
            if m.name == "kafka_txn_coordinator_timeout_aborts"
            for s in m.samples
            if s.name.endswith("_total")
        )
        if after > before:
            break
    assert after == before + 1


@pytest.mark.cluster
def test_one_broker_down_loses_only_its_part(
    kafka_cluster3: KafkaCluster,
    daemon_for: Callable[..., Daemon],
) -> None:
    cluster = kafka_cluster3
    topic = cluster.create_topic(
        f"down-{os.getpid()}-{time.monotonic_ns()}", partitions=6, replication_factor=1
    )
    leaders = cluster.partition_leaders(topic)
    victim = 3
    assert victim in leaders.values() and len(set(leaders.values())) > 1
    daemon = daemon_for(cluster.bootstrap_servers, topics={"allow": [topic]})
    assert value(cycle(daemon), "kafka_txn_exporter_up") == 1
    cluster.stop_broker(victim)
    try:
        registry = cycle(daemon)
        assert value(registry, "kafka_txn_exporter_up") == 0
        for partition, leader in leaders.items():
            lag = value(
                registry, "kafka_txn_partition_last_stable_offset_lag", topic=topic, partition=str(partition)
            )
            if leader != victim:
                assert lag == 0, f"partition {partition} on a live broker lost its metrics"
        assert value(registry, "kafka_txn_exporter_cycles_total", result="partial") == 1
    finally:
        cluster.start_broker(victim)
    deadline = time.monotonic() + 60
    while value(cycle(daemon), "kafka_txn_exporter_up") != 1:
        assert time.monotonic() < deadline, "the exporter did not recover after the broker returned"
        time.sleep(1)


@pytest.mark.cluster
def test_a_commit_while_the_partitions_only_replica_is_offline_leaves_a_hanging_transaction(
    kafka_cluster3: KafkaCluster,
    kafka_dist: KafkaDistribution,
    daemon_for: Callable[..., Daemon],
) -> None:
    """Kafka makes this one itself: a transaction committed while its partition's only replica
    is offline gets no marker there (the coordinator logs "Couldn't find leader endpoint ...
    likely deleted already and hence can be skipped") and completes. When the replica returns,
    the partition holds an open transaction its coordinator calls CompleteCommit: hanging. The
    exporter reports it with its transactional id, as Kafka's find-hanging does, and the
    coordinator was never left in PrepareCommit (no markers pending)."""
    cluster = kafka_cluster3
    topic = cluster.create_topic(f"orphan-{os.getpid()}-{time.monotonic_ns()}", replication_factor=1)
    leader = cluster.leader_of(topic, 0)
    txn_id = cluster.transactional_id_coordinated_by("kte-orphan", avoid={leader})
    coordinator = cluster.coordinator_of(txn_id)
    assert coordinator != leader
    tool = TransactionsCommand(kafka_dist, cluster.bootstrap_servers)
    daemon = daemon_for(cluster.bootstrap_servers, topics={"allow": [topic]})
    with OpenTransaction(cluster.bootstrap_servers, topic, transactional_id=txn_id) as txn:
        txn.begin(records=3)
        cluster.stop_broker(leader)
        try:
            txn.commit()  # the coordinator answers; the marker for the offline partition is skipped
        finally:
            cluster.start_broker(leader)
    deadline = time.monotonic() + 60
    while True:
        registry = cycle(daemon)
        found = [s for s in hanging_series(registry) if s["topic"] == topic]
        if found or time.monotonic() > deadline:
            break
        time.sleep(1)
    try:
        assert [(s["partition"], s["transactional_id"], s["start_offset"]) for s in found] == [
            ("0", txn_id, "0")
        ]
        assert found[0]["reason"] in ("coordinator_not_open", "partition_not_in_transaction")
        # The coordinator finished the commit: nothing in PrepareCommit, no markers pending.
        labels = {"coordinator": str(coordinator)}
        states = "kafka_txn_coordinator_transactions"
        assert (value(registry, states, **labels, state="CompleteCommit") or 0) >= 1
        assert value(registry, states, **labels, state="PrepareCommit") == 0
        assert value(registry, "kafka_txn_coordinator_prepare_time_max_seconds", **labels) == 0
        theirs = tool.find_hanging(topic=topic, max_transaction_timeout_min=0)
        assert [(h.partition, h.producer_id, h.start_offset) for h in theirs] == [
            (0, int(found[0]["producer_id"]), 0)
        ]
    finally:
        if found:
            tool.abort(topic, 0, 0)  # leave the shared cluster clean


def test_cluster_unreachable_then_back(
    kafka: KafkaCluster,
    daemon_for: Callable[..., Daemon],
) -> None:
    daemon = daemon_for(kafka.bootstrap_servers)
    assert value(cycle(daemon), "kafka_txn_exporter_up") == 1
    kafka.stop_broker(1)
    try:
        registry = cycle(daemon)
        assert value(registry, "kafka_txn_exporter_up") == 0
        assert value(registry, "kafka_txn_exporter_cycles_total", result="failed") == 1
        # The last results stay, with their age, so alerts do not resolve on their own.
        assert value(registry, "kafka_txn_exporter_snapshot_age_seconds") is not None
    finally:
        kafka.start_broker(1)
    deadline = time.monotonic() + 60
    while value(cycle(daemon), "kafka_txn_exporter_up") != 1:
        assert time.monotonic() < deadline, "the exporter did not recover after the broker returned"
        time.sleep(1)


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_endpoints_readiness_and_promtool(
    kafka: KafkaCluster,
    daemon_for: Callable[..., Daemon],
) -> None:
    dead = daemon_for(f"127.0.0.1:{free_port()}", request_timeout="500ms")
    dead.start()
    base = f"http://127.0.0.1:{dead.port}"
    assert http_get(f"{base}/healthz")[0] == 200
    time.sleep(1.5)
    assert http_get(f"{base}/readyz")[0] == 503
    assert 'kafka_txn_exporter_up{kafka_cluster="test"} 0.0' in http_get(f"{base}/metrics")[1]

    live = daemon_for(kafka.bootstrap_servers)
    live.start()
    base = f"http://127.0.0.1:{live.port}"
    deadline = time.monotonic() + 60
    while http_get(f"{base}/readyz")[0] != 200:
        assert time.monotonic() < deadline, "never ready"
        time.sleep(0.5)
    status, text = http_get(f"{base}/metrics")
    assert status == 200
    assert 'kafka_txn_exporter_up{kafka_cluster="test"} 1.0' in text
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: install the Debian package prometheus"
    check = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60, check=False
    )
    assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()


def test_command_line_daemon_stops_on_sigterm(kafka: KafkaCluster, tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "config.yml"
    config.write_text(f"""
web: {{listen_address: "127.0.0.1:{port}"}}
spark: {{local_dir: "{tmp_path / "spark"}"}}
clusters:
  - name: test
    bootstrap_servers: "{kafka.bootstrap_servers}"
    interval: 2s
    request_timeout: 1s
    kafka: {{client.id: "sigterm-test"}}
""")
    exe = Path(sys.executable).with_name("kafka-txn-exporter")
    log_path = tmp_path / "daemon.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            [str(exe), "run", "--config.file", str(config)], stdout=log_file, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if http_get(f"http://127.0.0.1:{port}/readyz")[0] == 200:
                        break
                except OSError:
                    pass
                assert proc.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, log_path.read_text()[-3000:]
                time.sleep(0.5)
            # Twice, like an impatient operator or an orchestrator: the second signal must
            # not deadlock the first one's handling.
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=15) == 0, log_path.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "exporter stopped" in log_path.read_text()


def test_start_time_of_every_hanging_transaction_comes_from_its_batch(
    kafka: KafkaCluster,
    topic: str,
    hanging: HangingFactory,
    daemon_for: Callable[..., Daemon],
) -> None:
    """Several uncovered transactions on one broker: each gets its own batch timestamp."""
    made = [hanging(topic, partition=p, backdate_ms=LATE_BACKDATE_MS + p * 60_000) for p in range(3)]
    registry = cycle(daemon_for(kafka.bootstrap_servers, topics={"allow": [topic]}))
    found = {int(s["partition"]): s for s in hanging_series(registry) if s["topic"] == topic}
    assert sorted(found) == [0, 1, 2]
    assert {s["start_time_source"] for s in found.values()} == {"batch_timestamp"}
    for txn in made:
        age = value(
            registry,
            "kafka_txn_partition_max_active_transaction_duration_seconds",
            topic=topic,
            partition=str(txn.partition),
        )
        assert age is not None
        assert abs(age - (time.time() * 1000 - txn.timestamp_ms) / 1000) < 120


@pytest.mark.parametrize("kept", [True, False], ids=["state-dir", "no-state-dir"])
def test_a_restarted_daemon_keeps_a_confirmed_hanging_transaction_hanging_with_a_state_dir(
    kafka: KafkaCluster,
    topic: str,
    hanging: HangingFactory,
    spark: SparkSession,
    tmp_path: Path,
    kept: bool,
) -> None:
    """Two-cycle confirmation, as the daemon runs by default. With ``state_dir`` the new
    process goes on from its predecessor's confirmation: the finding is hanging on its first
    cycle, and the page never loses its series. Without it, the confirmation starts over."""
    hanging(topic, partition=0, backdate_ms=LATE_BACKDATE_MS)
    raw: dict[str, object] = {
        "web": {"listen_address": "127.0.0.1:0"},
        "clusters": [
            {
                "name": "test",
                "bootstrap_servers": kafka.bootstrap_servers,
                "interval": "2s",
                "request_timeout": "1500ms",
                "topics": {"allow": [topic]},
            }
        ],
    }
    if kept:
        raw["state_dir"] = str(tmp_path / "state")
    config = parse_config(raw, env={})
    assert config.pipeline.hanging_confirm_cycles == 2

    def run(cycles: int) -> list[int]:
        """A new daemon process (as far as memory goes): its hanging series per cycle."""
        daemon = Daemon(
            config,
            registry=CollectorRegistry(),
            pipeline=PipelineRunner(config.spark, config.pipeline, session=spark),
        )
        try:
            return [
                len([s for s in hanging_series(cycle(daemon)) if s["topic"] == topic]) for _ in range(cycles)
            ]
        finally:
            daemon.stop()

    assert run(2) == [0, 1]  # suspected, then confirmed
    assert run(1) == ([1] if kept else [0])


def test_a_hanging_transaction_whose_start_was_deleted_stays_hanging(
    kafka: KafkaCluster,
    topic: str,
    hanging: HangingFactory,
    daemon_for: Callable[..., Daemon],
) -> None:
    """DeleteRecords (as retention would) past a hanging transaction's first offset: Kafka
    lifts the LSO to the new log start, yet the transaction is still open and still holds
    the LSO there. "The LSO has passed its start" is no proof of a close then: the exporter
    reads the log start after the LSO and keeps the finding."""
    from confluent_kafka import TopicPartition as CTopicPartition
    from confluent_kafka.admin import AdminClient

    txn = hanging(topic, partition=0, backdate_ms=LATE_BACKDATE_MS)
    produce_plain(kafka.bootstrap_servers, topic, partition=0, records=5)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    end = txn.start_offset + 3
    for future in admin.delete_records([CTopicPartition(topic, 0, end)]).values():
        future.result(30)
    registry = cycle(daemon_for(kafka.bootstrap_servers, topics={"allow": [topic]}))
    found = [s for s in hanging_series(registry) if s["topic"] == topic]
    assert [(s["partition"], s["start_offset"]) for s in found] == [("0", str(txn.start_offset))]
    lag = value(registry, "kafka_txn_partition_last_stable_offset_lag", topic=topic, partition="0")
    assert lag is not None and lag > 0  # the LSO stays at the log start, below the high watermark
