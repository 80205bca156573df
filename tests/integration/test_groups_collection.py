"""Consumer-group collection against the real single-node broker, with real confluent-kafka
consumers and transactional producers."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.groups import collect_consumable_checks, collect_group_offsets, offsets_of
from exporter.model import GroupOffset
from testbed.broker import KafkaCluster
from testbed.scenarios import OpenTransaction, produce_plain, run_transaction

pytestmark = pytest.mark.kafka


@pytest.fixture
def admin(kafka: KafkaCluster) -> Iterator[ClusterAdmin]:
    with ClusterAdmin(bootstrap_servers=kafka.bootstrap_servers) as admin:
        yield admin


def consume_and_commit(
    kafka: KafkaCluster, group: str, topic: str, partition: int, isolation: str, expect: int
) -> int:
    """A real consumer reads ``expect`` records of one partition and commits its position."""
    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "group.id": group,
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        got = 0
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got += 1
            if got >= expect:
                break
        assert got == expect
        consumer.commit(asynchronous=False)
        [position] = consumer.position([TopicPartition(topic, partition)])
        return int(position.offset)
    finally:
        consumer.close()


def collect(
    admin: ClusterAdmin, kafka: KafkaCluster, topic: str, *groups: str
) -> dict[tuple[str, int], GroupOffset]:
    result = collect_group_offsets(
        admin._kafka_client(),
        broker_ids=kafka.live_broker_ids(),
        topic_filter=lambda t: t == topic,
        group_filter=lambda g: g in groups,
    )
    assert result.errors == ()
    return {(o.group, o.partition): o for o in offsets_of(result)}


def test_read_committed_group_behind_an_open_transaction_has_committed_at_the_lso(
    kafka: KafkaCluster, admin: ClusterAdmin, topic: str
) -> None:
    produce_plain(kafka.bootstrap_servers, topic, partition=0, records=5)
    reader, uncommitted = f"rc-{uuid.uuid4().hex[:8]}", f"ru-{uuid.uuid4().hex[:8]}"
    with OpenTransaction(kafka.bootstrap_servers, topic, partition=0) as txn:
        txn.begin(records=3)
        hwm, lso = kafka.end_offsets(topic, 0)
        assert (lso, hwm) == (5, 8)
        assert consume_and_commit(kafka, reader, topic, 0, "read_committed", 5) == 5
        assert consume_and_commit(kafka, uncommitted, topic, 0, "read_uncommitted", 8) == 8

        rows = collect(admin, kafka, topic, reader, uncommitted)
    assert rows[(reader, 0)].committed_offset == lso
    assert rows[(uncommitted, 0)].committed_offset == hwm
    assert rows[(reader, 0)].coordinator_id in kafka.live_broker_ids()
    assert not rows[(reader, 0)].pending_transactional_commit
    assert rows[(reader, 0)].group_state == "Empty"  # the consumer has left


def test_pending_transactional_offset_commit_is_reported_until_the_transaction_commits(
    kafka: KafkaCluster, admin: ClusterAdmin, topic: str
) -> None:
    group = f"eos-{uuid.uuid4().hex[:8]}"
    produce_plain(kafka.bootstrap_servers, topic, partition=1, records=4)
    consumer = Consumer(
        {"bootstrap.servers": kafka.bootstrap_servers, "group.id": group, "enable.auto.commit": False}
    )
    producer = Producer(
        {"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": f"{group}-tx", "linger.ms": 0}
    )
    try:
        consumer.commit(offsets=[TopicPartition(topic, 1, 1)], asynchronous=False)
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, value=b"out", partition=2)
        producer.send_offsets_to_transaction(
            [TopicPartition(topic, 1, 3)], consumer.consumer_group_metadata(), 30
        )
        pending = collect(admin, kafka, topic, group)[(group, 1)]
        assert pending.pending_transactional_commit
        assert pending.committed_offset == 1  # the last stable commit
        producer.commit_transaction(30)
        # The commit returns once the coordinator decided; the group coordinator learns it
        # from the markers a moment later: read again until then (bounded).
        done = collect(admin, kafka, topic, group)[(group, 1)]
        for _ in range(50):
            if not done.pending_transactional_commit:
                break
            time.sleep(0.2)
            done = collect(admin, kafka, topic, group)[(group, 1)]
        assert not done.pending_transactional_commit
        assert done.committed_offset == 3
    finally:
        consumer.close()


def test_group_filter_and_topic_filter_limit_what_is_collected(
    kafka: KafkaCluster, admin: ClusterAdmin, topic: str
) -> None:
    produce_plain(kafka.bootstrap_servers, topic, partition=0, records=2)
    wanted, other = f"keep-{uuid.uuid4().hex[:8]}", f"drop-{uuid.uuid4().hex[:8]}"
    for group in (wanted, other):
        consume_and_commit(kafka, group, topic, 0, "read_committed", 2)
    rows = collect(admin, kafka, topic, wanted)
    assert set(rows) == {(wanted, 0)}
    assert (
        collect_group_offsets(
            admin._kafka_client(), broker_ids=kafka.live_broker_ids(), topic_filter=lambda t: False
        ).rows
        == ()
    )


def test_unreachable_coordinator_becomes_a_collection_error(kafka: KafkaCluster, admin: ClusterAdmin) -> None:
    result = collect_group_offsets(admin._kafka_client(), broker_ids=[4242], topic_filter=lambda t: True)
    assert result.rows == ()
    assert [(e.api, e.broker_id) for e in result.errors] == [("ListGroups", 4242)]


def test_only_transaction_markers_before_the_lso_leave_nothing_consumable(
    kafka: KafkaCluster, admin: ClusterAdmin, topic: str
) -> None:
    # A committed transaction of 2 records (offsets 0-1, marker at 2), an aborted one
    # (3-4, marker at 5), then one plain record (6).
    run_transaction(kafka.bootstrap_servers, topic, partition=0, records=2, commit=True)
    run_transaction(kafka.bootstrap_servers, topic, partition=0, records=2, commit=False)
    produce_plain(kafka.bootstrap_servers, topic, partition=0, records=1)
    _, lso = kafka.end_offsets(topic, 0)
    assert lso == 7
    gaps = [(topic, 0, 2, 3), (topic, 0, 2, 6), (topic, 0, 2, 7), (topic, 0, 0, 7)]
    result = collect_consumable_checks(admin._kafka_client(), gaps, {(topic, 0): kafka.leader_of(topic, 0)})
    assert result.errors == ()
    assert {(c.from_offset, c.to_offset): c.consumable_records for c in result.rows} == {
        (2, 3): 0,
        (2, 6): 0,
        (2, 7): 1,
        (0, 7): 3,
    }
