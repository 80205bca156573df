"""The consumer-group family end to end (issues 16 and 41): real consumers, a real hanging
transaction, the daemon's own cycles, what a scrape would show, and the CLI's abort.

A read_committed group reads up to the LSO that a hanging transaction holds and commits
there; a read_uncommitted group reads everything. The daemon must report the first group
blocked by that transaction (with its transactional id and the application it is attributed
to), with consumable lag 0 and blocked lag = the offsets behind the LSO, and never the second;
after ``abort`` the consumer gets the records, and the finding and both lags clear.

Consumers that commit their last record + 1 (confluent-kafka with an explicit offset, and
Kafka's Java KafkaConsumer calling ``commitSync`` with ``record.offset() + 1`` as Spring
does) sit before the commit marker of the transaction they read: blocked all the same behind
a hanging transaction, and caught up (consumable lag 0, never blocked) on a healthy
transactional partition.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession

from exporter.cli import main
from exporter.config import parse_config
from exporter.daemon import Daemon, PipelineRunner
from testbed.broker import KafkaCluster
from testbed.jvmclients import JavaClients, commit_last_plus_one, prepare
from testbed.scenarios import (
    commit_last_plus_one_confluent,
    create_hanging_transaction,
    produce_plain,
    run_transaction,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

BLOCKED_AFTER = 2
BEFORE, AFTER = 3, 5  # plain records before the hanging transaction's one record, and after
APPLICATION = "billing-enricher"


def samples(registry: CollectorRegistry, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(s.labels), s.value)
        for metric in registry.collect()
        for s in metric.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def lag(registry: CollectorRegistry, kind: str, group: str) -> float | None:
    found = samples(registry, f"kafka_txn_consumer_group_lag_{kind}", group=group)
    return sum(v for _, v in found) if found else None


def blocked(registry: CollectorRegistry, group: str) -> list[dict[str, str]]:
    return [lab for lab, _ in samples(registry, "kafka_txn_consumer_group_blocked_info", group=group)]


def consume_and_commit(kafka: KafkaCluster, group: str, topic: str, isolation: str, expect: int) -> None:
    """A real consumer of ``group`` reads ``expect`` more records of partition 0 from its
    committed position and commits where it is."""
    consumer = Consumer({
        "bootstrap.servers": kafka.bootstrap_servers, "group.id": group,
        "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })  # fmt: skip
    try:
        consumer.subscribe([topic])
        got = 0
        for _ in range(120):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got += 1
            if got >= expect and consumer.assignment():
                break
        assert got == expect, f"{group} read {got} records, expected {expect}"
        [position] = consumer.position([TopicPartition(topic, 0)])
        consumer.commit(offsets=[TopicPartition(topic, 0, position.offset)], asynchronous=False)
    finally:
        consumer.close()


@pytest.fixture
def groups_daemon(kafka: KafkaCluster, spark: SparkSession, topic: str) -> Iterator[Daemon]:
    config = parse_config({
        "web": {"listen_address": "127.0.0.1:0"},
        "clusters": [{
            "name": "groups", "bootstrap_servers": kafka.bootstrap_servers,
            "interval": "10s", "request_timeout": "5s", "topics": {"allow": [topic]},
            "groups": {"allow": ["kte-rc-.*", "kte-ru-.*"], "blocked_after_cycles": BLOCKED_AFTER},
        }],
    })  # fmt: skip
    daemon = Daemon(config, registry=CollectorRegistry(),
                    pipeline=PipelineRunner(config.spark, config.pipeline, session=spark))  # fmt: skip
    yield daemon
    daemon.stop()


def cycle(daemon: Daemon) -> CollectorRegistry:
    daemon.jobs[0].run_cycle()
    return daemon.registry


def test_read_committed_group_is_blocked_by_the_hanging_transaction_until_abort(
    kafka: KafkaCluster, topic: str, groups_daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    committed_group, uncommitted_group = f"kte-rc-{uuid.uuid4().hex[:8]}", f"kte-ru-{uuid.uuid4().hex[:8]}"
    produce_plain(kafka.bootstrap_servers, topic, partition=0, records=BEFORE)
    stuck = create_hanging_transaction(
        kafka, topic, partition=0, transactional_id=f"{APPLICATION}-{uuid.uuid4()}-1"
    )
    produce_plain(kafka.bootstrap_servers, topic, partition=0, records=AFTER)
    hwm, lso = kafka.end_offsets(topic, 0)
    assert (lso, hwm) == (stuck.start_offset, stuck.start_offset + 1 + AFTER)

    consume_and_commit(kafka, committed_group, topic, "read_committed", BEFORE)
    consume_and_commit(kafka, uncommitted_group, topic, "read_uncommitted", BEFORE + 1 + AFTER)
    seen = [cycle(groups_daemon) for _ in range(BLOCKED_AFTER + 1)]
    stuck_view = seen[-1]
    findings = blocked(stuck_view, committed_group)
    consumable, behind = (
        lag(stuck_view, "consumable", committed_group),
        lag(stuck_view, "blocked", committed_group),
    )
    uncommitted_blocked = [blocked(r, uncommitted_group) for r in seen]
    uncommitted_lags = (
        lag(stuck_view, "consumable", uncommitted_group),
        lag(stuck_view, "blocked", uncommitted_group),
    )

    code = main([
        "abort", "--bootstrap-server", kafka.bootstrap_servers, "--topic", topic, "--partition", "0",
        "--start-offset", str(stuck.start_offset), "--yes",
    ])  # fmt: skip
    out = capsys.readouterr().out
    consume_and_commit(kafka, committed_group, topic, "read_committed", AFTER)
    cleared = cycle(groups_daemon)

    assert len(findings) == 1, findings
    [finding] = findings
    assert finding["topic"] == topic and finding["partition"] == "0"
    assert finding["transactional_id"] == stuck.transactional_id
    assert finding["start_offset"] == str(stuck.start_offset)
    assert finding["application"] == APPLICATION
    assert consumable == 0
    assert behind == hwm - lso
    assert all(b == [] for b in uncommitted_blocked)
    assert list(uncommitted_lags) == [0, 0]
    assert code == 0, out
    assert blocked(cleared, committed_group) == []
    assert [lag(cleared, "consumable", committed_group), lag(cleared, "blocked", committed_group)] == [0, 0]


@pytest.fixture(scope="module")
def java_clients() -> JavaClients:
    return prepare()


def lag_bounds(registry: CollectorRegistry, group: str) -> float | None:
    found = samples(registry, "kafka_txn_consumer_group_lag_consumable_upper_bound_partitions", group=group)
    return sum(v for _, v in found) if found else None


def test_consumers_committing_their_last_record_plus_one_are_blocked_behind_a_hanging_transaction_only(
    kafka: KafkaCluster, topic: str, groups_daemon: Daemon, java_clients: JavaClients
) -> None:
    # Partition 0: a committed transaction (records 0-2, its marker at 3), then a hanging
    # transaction at 4 and plain records after it. Partition 1: the same committed
    # transaction and nothing open (LSO = HWM = 4).
    for partition in (0, 1):
        run_transaction(kafka.bootstrap_servers, topic, partition=partition, records=3, commit=True)
    stuck = create_hanging_transaction(
        kafka, topic, partition=0, transactional_id=f"{APPLICATION}-{uuid.uuid4()}-1"
    )
    produce_plain(kafka.bootstrap_servers, topic, partition=0, records=AFTER)
    hwm, lso = kafka.end_offsets(topic, 0)
    assert (stuck.start_offset, lso, hwm) == (4, 4, 5 + AFTER)
    assert kafka.end_offsets(topic, 1) == (4, 4)

    suffix = uuid.uuid4().hex[:8]
    blocked_groups = {f"kte-rc-confluent-{suffix}": "confluent", f"kte-rc-java-{suffix}": "java"}
    healthy_groups = {f"kte-rc-confluent-ok-{suffix}": "confluent", f"kte-rc-java-ok-{suffix}": "java"}
    committed = {}
    for groups, partition in ((blocked_groups, 0), (healthy_groups, 1)):
        for group, client in groups.items():
            if client == "java":
                committed[group] = commit_last_plus_one(
                    java_clients, kafka.bootstrap_servers, group, topic, partition, 3
                )
            else:
                committed[group] = commit_last_plus_one_confluent(
                    kafka.bootstrap_servers, group, topic, partition, 3
                )
    assert set(committed.values()) == {3}  # the commit marker's offset, below the LSO

    everyone = [*blocked_groups, *healthy_groups]
    found = []  # what each cycle's scrape shows (the registry is live: read after each cycle)
    for _ in range(BLOCKED_AFTER + 1):
        view = cycle(groups_daemon)
        found.append({g: blocked(view, g) for g in everyone})
    lags = {g: (lag(view, "consumable", g), lag(view, "blocked", g), lag_bounds(view, g)) for g in everyone}

    # found blocked within blocked_after_cycles, named with the hanging transaction
    assert all(found[i][g] == [] for i in range(BLOCKED_AFTER - 1) for g in everyone), found
    for group in blocked_groups:
        for shown in found[BLOCKED_AFTER - 1 :]:
            [finding] = shown[group]
            assert (finding["topic"], finding["partition"]) == (topic, "0")
            assert finding["transactional_id"] == stuck.transactional_id
            assert finding["start_offset"] == str(stuck.start_offset)
            assert finding["application"] == APPLICATION
        assert lags[group] == (0, hwm - lso, 0)
    # caught up on a healthy transactional partition: exact consumable lag 0, never blocked
    for group in healthy_groups:
        assert all(shown[group] == [] for shown in found)
        assert lags[group] == (0, 0, 0)
