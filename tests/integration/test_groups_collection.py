"""Consumer-group collection against the real single-node broker, with real confluent-kafka
consumers and transactional producers."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.consumable import Gap, collect_consumable_checks, consumable_gaps
from exporter.kafka.groups import collect_group_offsets, offsets_of
from exporter.model import GroupOffset, PartitionOffsets
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
    hwm, lso = kafka.end_offsets(topic, 0)
    assert lso == 7
    leaders = {(topic, 0): kafka.leader_of(topic, 0)}
    whole = collect_consumable_checks(
        admin._kafka_client(), [Gap(topic, 0, (0, 1, 2), 7, hwm)], leaders, max_bytes=1 << 20
    )
    before_marker = collect_consumable_checks(
        admin._kafka_client(), [Gap(topic, 0, (2, 5), 6, hwm)], leaders, max_bytes=1 << 20
    )
    assert whole.errors == () and before_marker.errors == ()
    assert {(c.from_offset, c.to_offset): (c.consumable_records, c.exact) for c in whole.rows} == {
        (0, 7): (3, True),
        (1, 7): (2, True),  # inside the first batch: record 1 and the plain record
        (2, 7): (1, True),
    }
    assert {(c.from_offset, c.to_offset): c.consumable_records for c in before_marker.rows} == {
        (2, 6): 0,
        (5, 6): 0,
    }


def read_committed_count(kafka: KafkaCluster, topic: str, partition: int, start: int, end: int) -> int:
    """What a real read_committed consumer (confluent-kafka) gets from ``start`` up to the
    LSO ``end``: the oracle of the consumable lag."""
    consumer = Consumer({
        "bootstrap.servers": kafka.bootstrap_servers, "group.id": f"oracle-{uuid.uuid4().hex[:8]}",
        "isolation.level": "read_committed", "enable.auto.commit": False,
    })  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        got = 0
        for _ in range(240):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None and message.offset() < end:
                got += 1
            [position] = consumer.position([TopicPartition(topic, partition)])
            if position.offset >= end:
                return got
        raise AssertionError(f"the read_committed consumer did not reach offset {end} of {topic}-{partition}")
    finally:
        consumer.close()


def test_consumable_records_are_what_a_read_committed_consumer_reads_behind_aborted_transactions(
    kafka: KafkaCluster, admin: ClusterAdmin, topic: str
) -> None:
    """More than 100 aborted records and their markers, committed transactions and plain
    records between committed offsets and the LSO: each check equals what a real
    read_committed consumer reads from that committed offset; read in rounds of small shares
    (a budget of many rounds) it is still exact; cut by the budget, an upper bound."""
    aborted = 0
    for i in range(15):
        run_transaction(kafka.bootstrap_servers, topic, partition=0, records=12, commit=i % 3 == 2)
        aborted += 0 if i % 3 == 2 else 12
        produce_plain(kafka.bootstrap_servers, topic, partition=0, records=i % 2)
    hwm, lso = kafka.end_offsets(topic, 0)
    for _ in range(50):  # the last abort returns before its marker is stable
        if lso == hwm:
            break
        time.sleep(0.2)
        hwm, lso = kafka.end_offsets(topic, 0)
    assert lso == hwm and aborted == 120  # and 15 markers
    starts = (0, 5, 33, 88, 150, lso - 2)
    offsets = [GroupOffset(f"g{s}", topic, 0, s, 1) for s in starts]
    [gap] = consumable_gaps(offsets, [PartitionOffsets(topic, 0, kafka.leader_of(topic, 0), hwm, lso)])
    leaders = {(topic, 0): kafka.leader_of(topic, 0)}
    read = collect_consumable_checks(admin._kafka_client(), [gap], leaders, max_bytes=1 << 20)
    small = collect_consumable_checks(
        admin._kafka_client(), [gap], leaders, max_bytes=1 << 20, partition_max_bytes=200
    )
    cut = collect_consumable_checks(
        admin._kafka_client(), [gap], leaders, max_bytes=300, partition_max_bytes=200
    )
    oracle = {s: read_committed_count(kafka, topic, 0, s, lso) for s in starts}
    assert read.errors == () and small.errors == () and cut.errors == ()
    assert {c.from_offset: (c.consumable_records, c.exact) for c in read.rows} == {
        s: (n, True) for s, n in oracle.items()
    }
    assert set(read.rows) == set(small.rows)
    assert not any(c.exact for c in cut.rows)
    assert all(c.consumable_records >= oracle[c.from_offset] for c in cut.rows)
    assert all(c.consumable_records <= lso - c.from_offset for c in cut.rows)


def test_kafka_pythons_own_offset_fetch_works_in_a_process_that_collected_group_offsets(
    kafka: KafkaCluster, admin: ClusterAdmin, topic: str
) -> None:
    """The collector reads OffsetFetch responses into columns for its own requests only:
    kafka-python's ``list_group_offsets`` decodes its own (it failed with "'OffsetFetchColumns'
    object has no attribute 'error_code'" when the reader replaced kafka-python's response
    class for the process)."""
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition as KafkaTopicPartition

    produce_plain(kafka.bootstrap_servers, topic, partition=0, records=2)
    group = f"kp-{uuid.uuid4().hex[:8]}"
    consume_and_commit(kafka, group, topic, 0, "read_committed", 2)
    assert collect(admin, kafka, topic, group)[(group, 0)].committed_offset == 2
    theirs = KafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
    try:
        offsets = theirs.list_group_offsets(group)
    finally:
        theirs.close()
    assert offsets[group][KafkaTopicPartition(topic, 0)].offset == 2
