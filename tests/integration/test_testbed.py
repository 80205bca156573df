"""Acceptance of the test bed: every scenario makes a real transactional state, and Kafka's
own tools (kafka-transactions.sh, JmxTool) see it. Runs on one node and on three."""

from __future__ import annotations

import time

import pytest

from testbed.broker import KafkaCluster
from testbed.maven import KafkaDistribution, verify
from testbed.oracles import JmxTool, TransactionsCommand
from testbed.scenarios import (
    DEFAULT_LATE_BACKDATE_MS,
    OpenTransaction,
    produce_plain,
    run_coordinator_timeout,
    run_transaction,
    verification_value,
)
from tests.fixtures_kafka import KAFKA_CLUSTERS, HangingFactory

pytestmark = [pytest.mark.kafka, pytest.mark.parametrize("kafka_any", KAFKA_CLUSTERS,
                                                          indirect=True)]  # fmt: skip


def wait_for_lso(cluster: KafkaCluster, topic: str, partition: int, *, lag: int,
                 timeout_s: float = 30.0) -> None:  # fmt: skip
    """Wait until HWM - LSO (ListOffsets) equals ``lag``: markers are written async."""
    deadline = time.monotonic() + timeout_s
    while True:
        hwm, lso = cluster.end_offsets(topic, partition)
        if hwm - lso == lag:
            return
        assert time.monotonic() < deadline, f"HWM {hwm} - LSO {lso} != {lag}"
        time.sleep(0.2)


def test_distribution_is_verified(kafka_any: KafkaCluster, kafka_dist: KafkaDistribution) -> None:
    assert verify(kafka_dist.home, kafka_dist.version, kafka_dist.tools_version)
    assert kafka_any.live_broker_ids() == set(kafka_any.nodes)
    assert all(node.log_path.stat().st_size > 0 for node in kafka_any)


def test_committed_and_aborted_transactions(
    kafka_any: KafkaCluster, topic: str, transactions_cli: TransactionsCommand
) -> None:
    committed = run_transaction(kafka_any.bootstrap_servers, topic, commit=True)
    aborted = run_transaction(kafka_any.bootstrap_servers, topic, partition=1, commit=False)

    states = {t.transactional_id: t.state for t in transactions_cli.list_transactions()}

    assert states[committed.transactional_id] == "CompleteCommit"
    assert states[aborted.transactional_id] == "CompleteAbort"


def test_hanging_transaction_is_seen_by_kafka_tools(
    kafka_any: KafkaCluster,
    kafka_dist: KafkaDistribution,
    topic: str,
    hanging: HangingFactory,
    transactions_cli: TransactionsCommand,
) -> None:
    late = hanging(topic, partition=1, backdate_ms=DEFAULT_LATE_BACKDATE_MS)
    fresh = hanging(topic, partition=2)

    found = transactions_cli.find_hanging(topic=topic, max_transaction_timeout_min=0)
    gauges = {
        node.node_id: JmxTool(kafka_dist, node.jmx_port).late_transactions() for node in kafka_any
    }

    assert {(h.partition, h.producer_id, h.start_offset) for h in found} == {
        (late.partition, late.producer_id, late.start_offset),
        (fresh.partition, fresh.producer_id, fresh.start_offset),
    }
    assert gauges[late.leader] == 1  # only the back-dated one is late
    assert sum(gauges.values()) == 1
    if kafka_any.size > 1:
        assert late.coordinator != late.leader
    assert verification_value(kafka_any, late.leader) == "true"  # restored

    transactions_cli.abort(topic, late.partition, late.start_offset)
    transactions_cli.abort(topic, fresh.partition, fresh.start_offset)
    assert transactions_cli.find_hanging(topic=topic, max_transaction_timeout_min=0) == []


def test_lso_lag_grows_behind_open_transaction(
    kafka_any: KafkaCluster, kafka_dist: KafkaDistribution, topic: str
) -> None:
    leader = kafka_any.leader_of(topic, 0)
    jmx = JmxTool(kafka_dist, kafka_any.node(leader).jmx_port)
    txn_id = kafka_any.transactional_id_coordinated_by("kte-lso", avoid={leader})

    with OpenTransaction(kafka_any.bootstrap_servers, topic, transactional_id=txn_id) as txn:
        txn.begin(records=2)
        produce_plain(kafka_any.bootstrap_servers, topic, records=5)
        wait_for_lso(kafka_any, topic, 0, lag=7)
        lag_open = jmx.lso_lag(topic, 0)
        produce_plain(kafka_any.bootstrap_servers, topic, records=5)
        wait_for_lso(kafka_any, topic, 0, lag=12)
        lag_grown = jmx.lso_lag(topic, 0)
        txn.commit()
    wait_for_lso(kafka_any, topic, 0, lag=0)
    lag_committed = jmx.lso_lag(topic, 0)

    assert (lag_open, lag_grown, lag_committed) == (7, 12, 0)


def test_coordinator_timeout_ends_in_complete_abort(
    kafka_any: KafkaCluster, topic: str, transactions_cli: TransactionsCommand
) -> None:
    leader = kafka_any.leader_of(topic, 0)
    txn_id = kafka_any.transactional_id_coordinated_by("kte-timeout", avoid={leader})

    result = run_coordinator_timeout(kafka_any.bootstrap_servers, topic,
                                     transactional_id=txn_id, transaction_timeout_ms=3_000)  # fmt: skip
    described = transactions_cli.describe(txn_id)

    assert result.ongoing.state == "Ongoing"
    assert described.state == "CompleteAbort"
    assert described.producer_id == result.ongoing.producer_id
    assert described.producer_epoch == result.ongoing.producer_epoch + 1
    assert described.partitions == ()


def test_broker_can_be_stopped_and_restarted(kafka_any: KafkaCluster) -> None:
    if kafka_any.size == 1:
        pytest.skip("stopping the only node leaves no cluster to observe")
    victim = max(kafka_any.nodes)

    kafka_any.stop_broker(victim)
    live_while_stopped = kafka_any.live_broker_ids()
    kafka_any.start_broker(victim)

    assert victim not in live_while_stopped
    assert kafka_any.live_broker_ids() == set(kafka_any.nodes)
