"""Acceptance of the test bed: every scenario makes a real transactional state, and Kafka's
own tools (kafka-transactions.sh, JmxTool) see it. Runs on one node and on three."""

from __future__ import annotations

import time

import pytest

from testbed import acls, faults
from testbed.broker import SASL_LISTENER, KafkaCluster, port_is_open
from testbed.churn import JavaChurn, LibrdkafkaChurn
from testbed.maven import KafkaDistribution, verify
from testbed.oracles import JmxTool, ToolError, TransactionsCommand
from testbed.scenarios import (
    DEFAULT_LATE_BACKDATE_MS,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    OpenTransaction,
    force_terminate,
    open_invisible_transaction,
    open_two_phase_commit_transaction,
    produce_plain,
    run_coordinator_timeout,
    run_timeout_then_reinit,
    run_transaction,
    verification_value,
    wait_for_transaction_state,
)
from tests.fixtures_kafka import KAFKA_CLUSTERS, SLOW_LISTENER, HangingFactory

pytestmark = [pytest.mark.kafka]
#: The original scenarios run on one node and on three.
on_both = pytest.mark.parametrize("kafka_any", KAFKA_CLUSTERS, indirect=True)


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


@on_both
def test_distribution_is_verified(kafka_any: KafkaCluster, kafka_dist: KafkaDistribution) -> None:
    assert verify(kafka_dist.home, kafka_dist.version, kafka_dist.tools_version)
    assert kafka_any.live_broker_ids() == set(kafka_any.nodes)
    assert all(node.log_path.stat().st_size > 0 for node in kafka_any)


@on_both
def test_committed_and_aborted_transactions(
    kafka_any: KafkaCluster, topic: str, transactions_cli: TransactionsCommand
) -> None:
    committed = run_transaction(kafka_any.bootstrap_servers, topic, commit=True)
    aborted = run_transaction(kafka_any.bootstrap_servers, topic, partition=1, commit=False)

    states = {t.transactional_id: t.state for t in transactions_cli.list_transactions()}

    assert states[committed.transactional_id] == "CompleteCommit"
    assert states[aborted.transactional_id] == "CompleteAbort"


@on_both
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
    gauges = {node.node_id: JmxTool(kafka_dist, node.jmx_port).late_transactions() for node in kafka_any}

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


@on_both
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


@on_both
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


@on_both
def test_broker_can_be_stopped_and_restarted(kafka_any: KafkaCluster) -> None:
    if kafka_any.size == 1:
        pytest.skip("stopping the only node leaves no cluster to observe")
    victim = max(kafka_any.nodes)

    kafka_any.stop_broker(victim)
    live_while_stopped = kafka_any.live_broker_ids()
    kafka_any.start_broker(victim)

    assert victim not in live_while_stopped
    assert kafka_any.live_broker_ids() == set(kafka_any.nodes)


# -- authorizer: least privilege hides transactions (issue 10, item 1) -----------------------


def tool_as(cluster: KafkaCluster, dist: KafkaDistribution, user: str) -> TransactionsCommand:
    """Kafka's kafka-transactions.sh as a SASL user of the cluster."""
    return TransactionsCommand(dist, cluster.bootstrap_for(SASL_LISTENER),
                               command_config=cluster.client_properties_file(user))  # fmt: skip


def test_team_principal_cannot_list_an_applications_open_transaction(
    kafka_acl: KafkaCluster, kafka_dist: KafkaDistribution, topic: str
) -> None:
    team = acls.team_acls(acls.user(acls.TEAM_USER), [topic])
    with acls.granted(kafka_acl, team):
        txn = open_invisible_transaction(kafka_acl, topic, partition=1)
        try:
            as_super = TransactionsCommand(kafka_dist, kafka_acl.bootstrap_servers)
            as_app = tool_as(kafka_acl, kafka_dist, acls.APP_USER)
            as_team = tool_as(kafka_acl, kafka_dist, acls.TEAM_USER)

            seen_by_super = {t.transactional_id: t.state for t in as_super.list_transactions()}
            seen_by_app = {t.transactional_id for t in as_app.list_transactions()}
            seen_by_team = {t.transactional_id for t in as_team.list_transactions()}
            # ...but the partition shows the open transaction to the team (Read on the topic).
            producers = as_team.describe_producers(topic, 1)
        finally:
            txn.abort()
        acls.revoke(kafka_acl, acls.application_acls(acls.user(acls.APP_USER), topic))

    assert txn.transactional_id.startswith(acls.APP_TRANSACTIONAL_ID_PREFIX)
    assert seen_by_super[txn.transactional_id] == "Ongoing"
    assert txn.transactional_id in seen_by_app
    assert txn.transactional_id not in seen_by_team  # silently left out, no error
    assert [p.current_txn_start_offset for p in producers] == [0]


def test_describe_producers_needs_read_on_the_topic(
    kafka_acl: KafkaCluster, kafka_dist: KafkaDistribution, topic: str
) -> None:
    exporter = acls.user(acls.EXPORTER_USER)
    table = acls.exporter_acls(exporter, [topic])
    read = acls.Acl(exporter, "TOPIC", topic, "READ")
    as_exporter = tool_as(kafka_acl, kafka_dist, acls.EXPORTER_USER)
    with acls.granted(kafka_acl, table):
        with_read = as_exporter.describe_producers(topic, 0)
        acls.revoke(kafka_acl, [read])
        with pytest.raises(ToolError, match=r"TopicAuthorizationException|not authorized"):
            as_exporter.describe_producers(topic, 0)
        acls.grant(kafka_acl, [read])
        granted_keys = acls.describe(kafka_acl)
    assert with_read == []
    assert {(a.resource_type, a.name, a.operation) for a in table} <= {
        (k[0], k[1], k[4]) for k in granted_keys
    }
    assert not any(k[3] == exporter for k in acls.describe(kafka_acl))


# -- two-phase commit (KIP-939) ------------------------------------------------------------


def test_two_phase_commit_transaction_stays_open_until_force_terminated(
    kafka_2pc: KafkaCluster, kafka_dist: KafkaDistribution, topic: str
) -> None:
    tools = TransactionsCommand(kafka_dist, kafka_2pc.bootstrap_servers)
    prepared = open_two_phase_commit_transaction(kafka_2pc, topic, partition=0, records=2)
    other = open_two_phase_commit_transaction(kafka_2pc, topic, partition=1)

    described = tools.describe(prepared.transactional_id)
    on_partition = tools.describe_producers(topic, 0)
    hwm, lso = kafka_2pc.end_offsets(topic, 0)
    tools.force_terminate(prepared.transactional_id)  # Kafka's own tool
    force_terminate(kafka_2pc.bootstrap_servers, other.transactional_id)  # the raw way
    # InitProducerId completes the abort before it answers: the id is Empty, epoch bumped.
    ended = wait_for_transaction_state(kafka_2pc.bootstrap_servers, prepared.transactional_id,
                                       {"Empty", "CompleteAbort"})  # fmt: skip
    ended_raw = wait_for_transaction_state(kafka_2pc.bootstrap_servers, other.transactional_id,
                                           {"Empty", "CompleteAbort"})  # fmt: skip
    wait_for_lso(kafka_2pc, topic, 0, lag=0)
    wait_for_lso(kafka_2pc, topic, 1, lag=0)

    assert described.state == "Ongoing"
    assert described.timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS
    assert described.partitions == (f"{topic}-0",)
    assert [p.current_txn_start_offset for p in on_partition] == [prepared.start_offset]
    assert (hwm - lso) == 2
    assert ended.producer_epoch > prepared.producer_epoch
    assert ended_raw.producer_epoch > other.producer_epoch


# -- churn: two producers, two transaction versions -----------------------------------------


def test_churn_drivers_commit_short_transactions_and_stop_by_themselves(
    kafka: KafkaCluster, kafka_dist: KafkaDistribution, topic: str
) -> None:
    duration_s = 20.0
    rdkafka = LibrdkafkaChurn(kafka.bootstrap_servers, topic, duration_s=duration_s,
                              partitions=(0, 1), max_transactions=1000)  # fmt: skip
    java = JavaChurn(kafka_dist, kafka.bootstrap_servers, topic, duration_s=duration_s,
                     throughput=20, transaction_duration_ms=500)  # fmt: skip
    with rdkafka, java:
        rdkafka.join()
        java.wait()
    tools = TransactionsCommand(kafka_dist, kafka.bootstrap_servers)
    rd_state = tools.describe(rdkafka.transactional_id)
    java_state = tools.describe(java.transactional_id)
    for partition in range(3):
        wait_for_lso(kafka, topic, partition, lag=0)

    assert not rdkafka.running and not java.running
    assert rdkafka.stats.errors == [] and java.stats.errors == []
    assert rdkafka.stats.transactions_committed >= 5
    assert java.stats.records == java.num_records
    assert rd_state.state == "CompleteCommit"
    assert java_state.state in ("CompleteCommit", "Empty")
    # TV1 (librdkafka) keeps the epoch across commits; TV2 (the 4.x Java client) bumps it at
    # every commit, so the Java producer's epoch counts its transactions.
    if kafka_dist.major >= 4:
        assert rd_state.producer_epoch == 0
        assert java_state.producer_epoch >= 5


# -- KIP-588: timed out, re-initialised at once ----------------------------------------------


def test_timed_out_producer_reinitialises_before_an_observer_sees_the_abort(
    kafka: KafkaCluster, kafka_dist: KafkaDistribution, topic: str
) -> None:
    reopened, producer = run_timeout_then_reinit(kafka.bootstrap_servers, topic,
                                                 transaction_timeout_ms=2000)  # fmt: skip
    assert producer is not None
    tools = TransactionsCommand(kafka_dist, kafka.bootstrap_servers)
    seen_reopened = tools.describe(reopened.transactional_id)
    producer.abort()
    empty, _ = run_timeout_then_reinit(kafka.bootstrap_servers, topic, partition=1,
                                       transaction_timeout_ms=2000, reopen=False)  # fmt: skip

    assert reopened.ongoing.state == "Ongoing"
    assert reopened.aborted.producer_epoch > reopened.ongoing.producer_epoch
    assert reopened.final.state == "Ongoing"
    assert reopened.final.producer_epoch > reopened.aborted.producer_epoch
    assert reopened.final.start_time_ms >= reopened.deadline_ms
    assert seen_reopened.state == "Ongoing"
    assert seen_reopened.producer_epoch == reopened.final.producer_epoch
    assert empty.final.state == "Empty"
    assert empty.final.producer_epoch > empty.aborted.producer_epoch


# -- fault tools --------------------------------------------------------------------------


def api_versions_answered(port: int, *, wait_s: float) -> bool:
    """Connect to a broker port and send ApiVersions v0 by hand: was it answered?"""
    import socket
    import struct

    # request header v1: api key 18, version 0, correlation id 1, client id "kte"
    body = struct.pack(">hhih", 18, 0, 1, 3) + b"kte"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        sock.settimeout(wait_s)
        try:
            return len(sock.recv(4)) == 4
        except TimeoutError:
            return False


def test_paused_broker_accepts_connections_and_never_answers(kafka_faults: KafkaCluster) -> None:
    port = kafka_faults.node(1).port
    answered_before = api_versions_answered(port, wait_s=10)
    with faults.paused(kafka_faults, 1):
        answered_paused = api_versions_answered(port, wait_s=3)
    answered_after = api_versions_answered(port, wait_s=10)

    assert (answered_before, answered_paused, answered_after) == (True, False, True)
    assert kafka_faults.live_broker_ids() == {1}


def test_killed_broker_restarts_with_its_committed_data(kafka_faults: KafkaCluster, topic: str) -> None:
    run_transaction(kafka_faults.bootstrap_servers, topic, records=4)
    wait_for_lso(kafka_faults, topic, 0, lag=0)
    before = kafka_faults.end_offsets(topic, 0)
    pid = kafka_faults.node(1).pid

    kafka_faults.kill_broker(1)
    down = port_is_open(kafka_faults.node(1).port)
    kafka_faults.start_broker(1)

    assert pid is not None and kafka_faults.node(1).pid not in (None, pid)
    assert not down
    assert kafka_faults.end_offsets(topic, 0) == before


def test_slow_listener_delays_every_request_through_its_proxy(kafka_faults: KafkaCluster) -> None:
    from confluent_kafka.admin import AdminClient

    proxy = kafka_faults.proxy(1, SLOW_LISTENER)
    admin = AdminClient({"bootstrap.servers": kafka_faults.bootstrap_for(SLOW_LISTENER)})
    admin.list_topics(timeout=30)  # connected, through the proxy
    with faults.slowed(kafka_faults, 0.5):
        started = time.monotonic()
        md = admin.list_topics(timeout=30)
        slowed_s = time.monotonic() - started

    assert proxy.connections >= 1
    assert md.brokers[1].port == proxy.listen_port  # the broker advertises the proxy
    assert slowed_s >= 0.5  # a lower bound only: sleeping never ends early


def test_topic_changes_mid_cycle(kafka: KafkaCluster, topic: str) -> None:
    faults.add_partitions(kafka, topic, 5)
    grown = kafka.partition_leaders(topic)
    faults.delete_topic(kafka, topic)

    assert sorted(grown) == [0, 1, 2, 3, 4]
    assert topic not in kafka.admin().list_topics(timeout=10).topics


@pytest.mark.cluster
def test_transaction_state_leadership_moves_with_an_open_transaction(
    kafka_cluster3: KafkaCluster, kafka_dist: KafkaDistribution
) -> None:
    cluster = kafka_cluster3
    topic = cluster.create_topic(f"move-{time.monotonic_ns()}", partitions=1)
    txn_id = cluster.transactional_id_coordinated_by("kte-move", broker_ids={1})
    tools = TransactionsCommand(kafka_dist, cluster.bootstrap_servers)
    with OpenTransaction(cluster.bootstrap_servers, topic, transactional_id=txn_id) as txn:
        txn.begin()
        before = tools.describe(txn_id)
        faults.move_transaction_state_leader(cluster, txn_id, 2)
        after = wait_for_transaction_state(cluster.bootstrap_servers, txn_id, {"Ongoing"})
        faults.move_transaction_state_leader(cluster, txn_id, 1)  # back, for other tests

    assert (before.coordinator, before.state) == (1, "Ongoing")
    assert (after.coordinator_id, after.producer_id) == (2, before.producer_id)
