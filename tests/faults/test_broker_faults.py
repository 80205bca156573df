"""Faults on the Kafka side (issue 13, faults 1-6), against the exporter as a black box.

For each fault, what must hold: nothing lost (a confirmed hanging transaction stays exported),
partial results visible (``up`` / cycle results / request errors), no false finding (a
legitimate open transaction is never ``hanging`` or ``suspected_hanging``), and recovery
within 2 intervals (counted in cycles, never timed). Every wait is bounded.
"""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry

from exporter.daemon import Daemon
from exporter.kafka.admin import ClusterAdmin
from testbed import acls, faults
from testbed.broker import SASL_LISTENER, KafkaCluster
from testbed.maven import KafkaDistribution
from testbed.oracles import TransactionsCommand
from testbed.scenarios import OpenTransaction, create_hanging_transaction
from tests.faults.conftest import INTERVAL_S, DaemonFactory
from tests.faults.support import (
    CycleInThread,
    cycles,
    false_findings,
    hanging_keys,
    run_cycles,
    run_scheduled_cycles,
    samples,
    snapshot,
    strike_after_metadata,
    total,
    up,
)
from tests.fixtures_kafka import SLOW_LISTENER

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.spark,
]

CONFIRM = 2  # the default hanging_confirm_cycles
STATES = "kafka_txn_coordinator_transactions"
PREPARE_TIME = "kafka_txn_coordinator_prepare_time_max_seconds"
RECOVERY_CYCLES = 2


def recover(daemon: Daemon) -> list[CollectorRegistry]:
    """The daemon's next RECOVERY_CYCLES cycles, one interval apart."""
    return run_scheduled_cycles(daemon, RECOVERY_CYCLES, INTERVAL_S)


# -- 1. broker killed during a cycle ---------------------------------------------------------


def test_broker_killed_during_a_cycle_keeps_the_finding_and_recovers(
    kafka_faults: KafkaCluster, topic: str, fault_daemon: DaemonFactory
) -> None:
    stuck = create_hanging_transaction(kafka_faults, topic, partition=1)
    key = (1, stuck.producer_id, stuck.start_offset)
    daemon = fault_daemon(kafka_faults.bootstrap_servers, topics=[topic])
    before = run_cycles(daemon, CONFIRM)
    assert key in hanging_keys(before[-1], topic)

    strike_after_metadata(daemon, lambda: kafka_faults.kill_broker(1))
    in_flight = CycleInThread(daemon).start()
    try:
        ended = in_flight.finished()
        during = snapshot(daemon.registry)
    finally:
        kafka_faults.start_broker(1)
    after = recover(daemon)

    assert ended, f"the cycle did not end: {in_flight.error!r}"
    assert up(during) == 0 or cycles(during, "partial") + cycles(during, "failed") >= 1
    assert key in hanging_keys(during, topic)  # nothing lost while the broker is down
    assert all(key in hanging_keys(r, topic) for r in after)
    assert up(after[-1]) == 1
    kafka_faults_abort(kafka_faults, topic, stuck.partition, stuck.start_offset)


def test_a_broker_back_since_the_last_cycle_is_tried_by_the_next_one_whatever_its_reconnect_backoff(
    kafka_faults: KafkaCluster, topic: str, fault_daemon: DaemonFactory
) -> None:
    """kafka-python holds a node back after failed connections (up to 6 s with jitter) and
    fails a request sent meanwhile without trying it. When the broker came back inside that
    window, the next cycle was lost although the broker answered (in CI, still one interval
    after the restart)."""
    daemon = fault_daemon(kafka_faults.bootstrap_servers, topics=[topic])
    run_cycles(daemon, 1)
    kafka_faults.kill_broker(1)
    try:
        down = run_cycles(daemon, 1)
    finally:
        kafka_faults.start_broker(1)
    # The attempts made while it was down ended just before it came back: the worst case.
    manager = daemon.jobs[0]._collector.admin._protocol_client._manager  # type: ignore[union-attr]
    for _ in range(8):
        manager.update_backoff(1)
    assert manager.connection_delay(1) > 2.0
    back = run_cycles(daemon, 1)

    assert up(down[-1]) == 0
    assert up(back[-1]) == 1
    assert cycles(back[-1], "complete") == 2


def kafka_faults_abort(cluster: KafkaCluster, topic: str, partition: int, offset: int) -> None:
    from testbed.oracles import TransactionsCommand

    TransactionsCommand(cluster.dist, cluster.bootstrap_servers).abort(topic, partition, offset)


# -- 2. broker paused (accepts, never answers) for 2 intervals -------------------------------


def test_paused_broker_gives_bounded_failed_cycles_and_no_false_finding(
    kafka_faults: KafkaCluster, topic: str, fault_daemon: DaemonFactory
) -> None:
    daemon = fault_daemon(kafka_faults.bootstrap_servers, topics=[topic])
    with OpenTransaction(
        kafka_faults.bootstrap_servers, topic, partition=0, transaction_timeout_ms=900_000
    ) as legit:
        legit.begin()
        run_cycles(daemon, 1)
        with faults.paused(kafka_faults, 1):  # two intervals' worth of cycles
            ended = [CycleInThread(daemon).start().finished() for _ in range(2)]
            during = snapshot(daemon.registry)
        after = recover(daemon)
        legit.commit()

    assert ended == [True, True]
    assert up(during) == 0
    assert cycles(during, "failed") + cycles(during, "partial") >= 2
    assert false_findings(during) == {}
    assert all(false_findings(r) == {} for r in after)
    assert up(after[-1]) == 1
    assert cycles(after[-1], "complete") >= 2  # the one before and the recovery


# -- 3. slow broker (delay proxy) ------------------------------------------------------------


def test_slow_broker_still_gives_complete_cycles_without_false_findings(
    kafka_faults: KafkaCluster, topic: str, fault_daemon: DaemonFactory
) -> None:
    daemon = fault_daemon(kafka_faults.bootstrap_for(SLOW_LISTENER), topics=[topic])
    stuck = create_hanging_transaction(kafka_faults, topic, partition=2)
    with OpenTransaction(
        kafka_faults.bootstrap_servers, topic, partition=0, transaction_timeout_ms=900_000
    ) as legit:
        legit.begin()
        with faults.slowed(kafka_faults, 0.2):
            slow = run_cycles(daemon, CONFIRM + 1)
        legit.commit()
    kafka_faults_abort(kafka_faults, topic, stuck.partition, stuck.start_offset)

    # The stuck transaction is the one finding (suspected, then hanging); the legitimate
    # one on partition 0 never is.
    assert all(sum(false_findings(r).values()) <= 1 for r in slow)
    assert all(all(p != 0 for p, _, _ in hanging_keys(r, topic)) for r in slow)
    assert (2, stuck.producer_id, stuck.start_offset) in hanging_keys(slow[-1], topic)
    assert up(slow[-1]) == 1


# -- 4. __transaction_state leader moved / coordinator loading -------------------------------


@pytest.mark.cluster
def test_coordinator_move_never_makes_a_live_transaction_a_finding(
    kafka_cluster3: KafkaCluster, fault_daemon: DaemonFactory
) -> None:
    cluster = kafka_cluster3
    topic = cluster.create_topic(f"coord-move-{time.monotonic_ns()}", partitions=1)
    # Whichever broker coordinates it: earlier tests may have moved leaderships around.
    txn_id = cluster.transactional_id_coordinated_by("kte-fault-move")
    coordinator = cluster.coordinator_of(txn_id)
    elsewhere = min(set(cluster.nodes) - {coordinator})
    daemon = fault_daemon(cluster.bootstrap_servers, topics=[topic])
    with OpenTransaction(
        cluster.bootstrap_servers, topic, transactional_id=txn_id, transaction_timeout_ms=900_000
    ) as legit:
        legit.begin()
        before = run_cycles(daemon, 1)
        move = lambda: faults.move_transaction_state_leader(cluster, txn_id, elsewhere)  # noqa: E731
        strike_after_metadata(daemon, move)
        ended = CycleInThread(daemon).start().finished()
        during = snapshot(daemon.registry)
        after = recover(daemon)
        faults.move_transaction_state_leader(cluster, txn_id, coordinator)
        legit.commit()

    assert ended
    for registry in (*before, during, *after):
        assert false_findings(registry) == {}
    assert up(after[-1]) == 1
    assert samples(after[-1], "kafka_txn_open_transactions", **{"class": "ongoing"})[0][1] == 1


@pytest.mark.cluster
def test_metadata_is_asked_again_of_another_broker_when_the_chosen_one_is_silent(
    kafka_markers: KafkaCluster,
) -> None:
    """librdkafka keeps sending Metadata to the broker it is connected to; when that broker
    is paused, one cycle's wait still leaves room for an attempt another broker answers."""
    cluster = kafka_markers
    with ClusterAdmin(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=2000) as admin:
        # The broker librdkafka asks, by its address: a bootstrap connection has no id (-1).
        answered = admin._admin().list_topics(timeout=10).orig_broker_name  # "host:port/id"
        port = int(answered.split("/")[0].rsplit(":", 1)[1])
        chosen = next(n for n, node in cluster.nodes.items() if node.port == port)
        with faults.paused(cluster, chosen):
            started = time.monotonic()
            metadata = admin.metadata(deadline=started + 3.0)  # the test daemon's metadata budget
            took = time.monotonic() - started
    assert {b.broker_id for b in metadata.brokers} == set(cluster.nodes)
    assert took < 3.0


# -- 4b. partition leader paused during a commit: markers pending ----------------------------


@pytest.mark.cluster
def test_a_commit_whose_partition_leader_is_paused_is_reported_as_markers_pending_until_it_answers(
    kafka_markers: KafkaCluster, kafka_dist: KafkaDistribution, fault_daemon: DaemonFactory
) -> None:
    """The commit is decided (the coordinator logged PrepareCommit and answered EndTxn) but
    its marker cannot reach the paused leader: the coordinator lists the id in PrepareCommit
    and the exporter counts how long, per coordinator, without calling anything hanging. When
    the leader answers again the marker lands, PrepareCommit ends and the time returns to 0;
    Kafka's tool agrees the commit completed and nothing hangs."""
    cluster = kafka_markers
    topic = cluster.create_topic(f"markers-{time.monotonic_ns()}", partitions=1, replication_factor=1)
    leader = cluster.leader_of(topic, 0)
    txn_id = cluster.transactional_id_coordinated_by("kte-markers", avoid={leader})
    coordinator = str(cluster.coordinator_of(txn_id))
    assert coordinator != str(leader)
    # A longer interval than the suite's: every cycle with the paused node must get as far as
    # ListTransactions, however loaded the machine (the stages' budgets follow the interval).
    daemon = fault_daemon(
        clusters=[{"name": "fault", "bootstrap_servers": cluster.bootstrap_servers,
                   "topics": {"allow": [topic]}, "interval": "20s"}]
    )  # fmt: skip
    run_cycles(daemon, 1)
    with OpenTransaction(cluster.bootstrap_servers, topic, transactional_id=txn_id) as txn:
        txn.begin(records=3)
        with faults.paused(cluster, leader):
            txn.commit()
            during = run_cycles(daemon, 3)
        deadline = time.monotonic() + 60
        while True:
            after = run_cycles(daemon, 1)[-1]
            prepare = total(after, PREPARE_TIME, coordinator=coordinator)
            # The marker lands first; the clients' connections to the resumed node may take
            # a cycle more (a partial one) to answer again.
            if (prepare == 0 and up(after) == 1) or time.monotonic() > deadline:
                break
            time.sleep(1)

    in_prepare = [total(r, STATES, coordinator=coordinator, state="PrepareCommit") for r in during]
    assert in_prepare == [1, 1, 1]
    pending = [total(r, PREPARE_TIME, coordinator=coordinator) for r in during]
    assert 0 <= pending[0] < pending[1] < pending[2]  # counted from the first sighting
    assert all(false_findings(r) == {} for r in (*during, after))
    assert prepare == 0
    assert total(after, STATES, coordinator=coordinator, state="PrepareCommit") == 0
    assert up(after) == 1
    tool = TransactionsCommand(kafka_dist, cluster.bootstrap_servers)
    assert tool.describe(txn_id).state == "CompleteCommit"
    assert tool.find_hanging(topic=topic, max_transaction_timeout_min=0) == []


# -- 5. topic deleted and partitions added mid-cycle ------------------------------------------


def test_topic_deleted_and_partitions_added_mid_cycle(
    kafka_faults: KafkaCluster, fault_daemon: DaemonFactory
) -> None:
    stamp = time.monotonic_ns()
    doomed = kafka_faults.create_topic(f"doomed-{stamp}", partitions=2)
    growing = kafka_faults.create_topic(f"growing-{stamp}", partitions=2)
    daemon = fault_daemon(kafka_faults.bootstrap_servers, topics=[doomed, growing])
    run_cycles(daemon, 1)

    def reshape() -> None:
        faults.delete_topic(kafka_faults, doomed)
        faults.add_partitions(kafka_faults, growing, 4)

    strike_after_metadata(daemon, reshape)
    ended = CycleInThread(daemon).start().finished()
    after = recover(daemon)

    lag_partitions = {
        (lab["topic"], int(lab["partition"]))
        for lab, _ in samples(after[-1], "kafka_txn_partition_last_stable_offset_lag")
    }
    assert ended
    assert {(growing, p) for p in range(4)} <= lag_partitions
    assert not any(t == doomed for t, _ in lag_partitions)
    assert up(after[-1]) == 1
    assert all(false_findings(r) == {} for r in after)


# -- 6. authorization failure on some topics --------------------------------------------------


def test_unauthorized_topic_is_a_named_error_and_the_rest_is_still_reported(
    kafka_acl: KafkaCluster, fault_daemon: DaemonFactory
) -> None:
    stamp = time.monotonic_ns()
    allowed = kafka_acl.create_topic(f"allowed-{stamp}", partitions=2)
    forbidden = kafka_acl.create_topic(f"forbidden-{stamp}", partitions=2)
    exporter = acls.user(acls.EXPORTER_USER)
    table = acls.exporter_acls(exporter, [allowed, forbidden])
    # Describe on the forbidden topic (it is in the metadata) but no Read: DescribeProducers
    # fails for it, and only for it.
    granted = [a for a in table if not (a.name == forbidden and a.operation == "READ")]
    granted.append(acls.Acl(exporter, "TOPIC", forbidden, "DESCRIBE"))
    password_env = "KTE_FAULT_EXPORTER_PASSWORD"
    stuck = create_hanging_transaction(kafka_acl, allowed, partition=0)
    try:
        with acls.granted(kafka_acl, granted):
            daemon = fault_daemon(clusters=[{
                "name": "acl", "bootstrap_servers": kafka_acl.bootstrap_for(SASL_LISTENER),
                "topics": {"allow": [allowed, forbidden]},
                "kafka": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                          "sasl.username": acls.EXPORTER_USER,
                          "sasl.password": f"${{{password_env}}}"},
            }], env={password_env: acls.TEST_SASL_USERS[acls.EXPORTER_USER]})  # fmt: skip
            seen = run_cycles(daemon, CONFIRM)
    finally:
        kafka_faults_abort(kafka_acl, allowed, stuck.partition, stuck.start_offset)

    errors = {(lab["api"], lab["error"]) for lab, v in
              samples(seen[-1], "kafka_txn_exporter_request_errors_total") if v > 0}  # fmt: skip
    assert any("AUTHORIZATION" in error.upper() for _, error in errors), errors
    assert cycles(seen[-1], "partial") == CONFIRM
    assert (0, stuck.producer_id, stuck.start_offset) in hanging_keys(seen[-1], allowed)
    assert hanging_keys(seen[-1], forbidden) == set()
