"""The collection cycle against a real broker: the visibility probe, read-verify and the
cycle deadline (``exporter.kafka.collector``).

Every test uses the session's single-node cluster; the deadline test pauses its JVM
(SIGSTOP) for a few seconds and resumes it before it returns.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

import pytest

from exporter.kafka.admin import ClusterAdmin, ClusterMetadata
from exporter.kafka.collector import SnapshotCollector
from exporter.kafka.metadata import TRANSACTION_STATE_TOPIC
from exporter.kafka.transactions import VISIBILITY_PROBE_ID
from exporter.model import ClusterSnapshot
from exporter.pipeline.compute import listing_incomplete
from testbed.broker import BrokerStartError, KafkaCluster, Listener
from testbed.maven import KafkaDistribution
from testbed.scenarios import OpenTransaction, produce_plain, run_transaction

pytestmark = pytest.mark.kafka

#: The cycle deadline of the hanging-broker test, and what it may overrun by (thread
#: hand-over and the snapshot's assembly, not a request).
DEADLINE_S = 3.0
DEADLINE_MARGIN_S = 1.0
REQUEST_TIMEOUT_MS = 10_000


def collector_for(cluster: KafkaCluster, topic: str | None = None,
                  admin: ClusterAdmin | None = None) -> SnapshotCollector:  # fmt: skip
    admin = admin or ClusterAdmin(bootstrap_servers=cluster.bootstrap_servers,
                                  request_timeout_ms=REQUEST_TIMEOUT_MS)  # fmt: skip
    return SnapshotCollector(cluster="test", admin=admin,
                             topic_filter=None if topic is None else (lambda t: t == topic))  # fmt: skip


@pytest.fixture
def collect(kafka: KafkaCluster) -> Iterator[Callable[..., ClusterSnapshot]]:
    # On a cluster that never had a transaction, the first probe makes Kafka create
    # __transaction_state and answers COORDINATOR_NOT_AVAILABLE (documented).
    kafka.ensure_transaction_state_topic()
    made: list[SnapshotCollector] = []

    def run(topic: str | None = None, **kwargs: object) -> ClusterSnapshot:
        collector = collector_for(kafka, topic)
        made.append(collector)
        return collector.collect(**kwargs)  # type: ignore[arg-type]

    yield run
    for collector in made:
        collector.close()


# -- visibility probe ------------------------------------------------------------------------


def test_without_an_authorizer_every_transactional_id_is_visible(
    collect: Callable[..., ClusterSnapshot], topic: str
) -> None:
    snapshot = collect(topic)

    assert snapshot.errors == ()
    assert snapshot.transactional_ids_visible is True
    # The probe id is described, never listed: no producer ever uses it.
    assert VISIBILITY_PROBE_ID not in {t.transactional_id for t in snapshot.listed_transactions}
    assert "visibility_probe" in dict(snapshot.stage_seconds)


# -- read-verify -----------------------------------------------------------------------------


def test_an_open_transaction_is_in_both_reads_and_a_committed_one_in_neither(
    kafka: KafkaCluster, collect: Callable[..., ClusterSnapshot], topic: str
) -> None:
    run_transaction(kafka.bootstrap_servers, topic, partition=1, records=2, commit=True)
    with OpenTransaction(kafka.bootstrap_servers, topic, partition=0,
                         transaction_timeout_ms=120_000) as txn:  # fmt: skip
        txn.begin(records=3)
        snapshot = collect(topic)

    assert snapshot.errors == ()
    [first] = [p for p in snapshot.producers if p.current_txn_start_offset >= 0]
    assert (first.topic, first.partition) == (topic, 0)
    committed = [p for p in snapshot.producers if (p.topic, p.partition) == (topic, 1)]
    assert committed and all(p.current_txn_start_offset == -1 for p in committed)

    # Re-read after DescribeTransactions: only the partition with the open transaction,
    # which still shows the same (producer id, start offset).
    assert snapshot.reread_partitions == frozenset({(topic, 0)})
    assert {(p.topic, p.partition) for p in snapshot.reread_producers} == {(topic, 0)}
    assert (first.producer_id, first.current_txn_start_offset) in {
        (p.producer_id, p.current_txn_start_offset) for p in snapshot.reread_producers
    }
    assert "reread_producers" in dict(snapshot.stage_seconds)


def test_no_open_transaction_means_no_re_read(
    kafka: KafkaCluster, collect: Callable[..., ClusterSnapshot], topic: str
) -> None:
    run_transaction(kafka.bootstrap_servers, topic, partition=2, records=1, commit=True)

    snapshot = collect(topic)

    assert snapshot.errors == ()
    assert snapshot.producers
    assert snapshot.reread_producers == ()
    assert snapshot.reread_partitions == frozenset()


# -- coordinator moves -----------------------------------------------------------------------


def test_many_requests_in_flight_to_one_broker_are_all_answered(kafka: KafkaCluster, topic: str) -> None:
    """A cycle sends a stage's requests to a broker all at once, and stages overlap (two
    ListOffsets per leader, DescribeProducers, ListTransactions, one Fetch per hanging start
    offset...). kafka-python pauses a connection at 5 requests in flight by default and fails
    the sixth at once ("Node paused"): 20 Fetches to one leader must all be answered."""
    produce_plain(kafka.bootstrap_servers, topic, partition=0, records=20)
    admin = ClusterAdmin(bootstrap_servers=kafka.bootstrap_servers, request_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        leader = admin.metadata(lambda t: t == topic).leaders[(topic, 0)]
        result = admin.batch_timestamps({leader: [(topic, 0, offset) for offset in range(20)]})
    finally:
        admin.close()

    assert result.errors == ()
    assert sorted(b.offset for b in result.rows) == list(range(20))


def test_a_coordinator_that_moved_during_the_listing_makes_the_listing_incomplete(
    kafka: KafkaCluster, topic: str
) -> None:
    # The cycle's Metadata names another leader for __transaction_state-0 than the one the
    # collector reads after ListTransactions: to the collector, that partition moved while
    # the brokers were listed, so "listed by nobody" proves nothing this cycle.
    kafka.ensure_transaction_state_topic()
    collector = collector_for(kafka, topic)
    read = collector.admin.metadata

    def moved_metadata(*args: object, **kwargs: object) -> ClusterMetadata:
        metadata = read(*args, **kwargs)  # type: ignore[arg-type]
        leaders = dict(metadata.transaction_state_leaders)
        leaders[0] = leaders[0] + 100
        return replace(metadata, transaction_state_leaders=leaders)

    collector.admin.metadata = moved_metadata  # type: ignore[method-assign]
    try:
        snapshot = collector.collect()
    finally:
        collector.close()

    moved = [e for e in snapshot.errors if e.api == "ListTransactions"]
    assert [(e.error, e.topic, e.partition) for e in moved] == [
        ("NOT_COORDINATOR", TRANSACTION_STATE_TOPIC, 0)
    ]
    assert snapshot.coordinators_listed == {b.broker_id for b in snapshot.brokers}
    assert listing_incomplete(snapshot)


def test_a_listing_without_a_move_is_complete(
    kafka: KafkaCluster, collect: Callable[..., ClusterSnapshot]
) -> None:
    snapshot = collect()

    assert not [e for e in snapshot.errors if e.api == "ListTransactions"]
    assert not listing_incomplete(snapshot)


# -- cycle deadline --------------------------------------------------------------------------


def test_a_deadline_that_is_long_enough_changes_nothing(
    kafka: KafkaCluster, collect: Callable[..., ClusterSnapshot], topic: str
) -> None:
    with OpenTransaction(kafka.bootstrap_servers, topic, partition=0) as txn:
        txn.begin(records=1)
        snapshot = collect(topic, deadline_s=30.0)

    assert snapshot.errors == ()
    assert snapshot.transactional_ids_visible is True
    assert txn.transactional_id in {t.transactional_id for t in snapshot.transactions}
    assert snapshot.reread_partitions == frozenset({(topic, 0)})


class HangsAfterMetadata(ClusterAdmin):
    """The real admin client; once Metadata is answered, the broker's JVM is paused."""

    def __init__(self, cluster: KafkaCluster, *, armed: bool) -> None:
        super().__init__(bootstrap_servers=cluster.bootstrap_servers,
                         request_timeout_ms=REQUEST_TIMEOUT_MS)  # fmt: skip
        process = cluster.node(1).process
        assert process is not None
        self.pid = process.pid
        self.armed = armed
        self.paused = False

    def metadata(self, topic_filter: Callable[[str], bool] | None = None, *,
                 expect: Iterable[str] = (), deadline: float | None = None) -> ClusterMetadata:  # fmt: skip
        answered = super().metadata(topic_filter, expect=expect, deadline=deadline)
        if self.armed:
            os.kill(self.pid, signal.SIGSTOP)
            self.paused = True
        return answered

    def resume(self) -> None:
        if self.paused:
            os.kill(self.pid, signal.SIGCONT)
            self.paused = False


@pytest.mark.parametrize("warm", [False, True], ids=["fresh-clients", "connected-clients"])
def test_a_broker_that_hangs_after_metadata_gives_a_partial_cycle_within_the_deadline(
    kafka: KafkaCluster, topic: str, warm: bool
) -> None:
    kafka.ensure_transaction_state_topic()
    admin = HangsAfterMetadata(kafka, armed=False)
    collector = collector_for(kafka, topic, admin)
    try:
        if warm:  # both clients connected: only requests can hang, not a bootstrap
            assert collector.collect().errors == ()
        admin.armed = True
        started = time.monotonic()
        try:
            snapshot = collector.collect(deadline_s=DEADLINE_S)
        finally:
            elapsed = time.monotonic() - started
            admin.resume()
        print(f"cycle with a paused broker: {elapsed:.2f} s (deadline {DEADLINE_S} s)")

        assert elapsed < DEADLINE_S + DEADLINE_MARGIN_S
        assert [b.broker_id for b in snapshot.brokers] == [1]  # metadata was answered
        assert not snapshot.complete
        failed_apis = {e.api for e in snapshot.errors}
        assert {"DescribeProducers", "ListTransactions", "ListOffsets"} <= failed_apis
        assert {e.error for e in snapshot.errors} <= {
            "DEADLINE_EXCEEDED", "REQUEST_TIMED_OUT", "BROKER_NOT_AVAILABLE"}  # fmt: skip
        assert snapshot.transactional_ids_visible is None
        # Offsets not read are unknown (-1), never librdkafka's "invalid" placeholder.
        assert {(p.high_watermark, p.last_stable_offset) for p in snapshot.partitions} == {(-1, -1)}
        # Nothing read is passed off as complete: no listing counts as answered.
        assert snapshot.coordinators_listed == frozenset()
    finally:
        admin.resume()
        collector.close()
    # The broker serves the next cycle normally.
    recovered = collector_for(kafka, topic)
    try:
        assert _eventually_complete(recovered).transactional_ids_visible is True
    finally:
        recovered.close()


def _eventually_complete(collector: SnapshotCollector, attempts: int = 10) -> ClusterSnapshot:
    snapshot = collector.collect(deadline_s=20.0)
    for _ in range(attempts):
        if snapshot.complete:
            break
        time.sleep(1.0)
        snapshot = collector.collect(deadline_s=20.0)
    assert snapshot.errors == ()
    return snapshot


# -- visibility under an authorizer ----------------------------------------------------------

EXPORTER_USER, EXPORTER_PASSWORD = "exporter", "exporter-Secret-77"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def authorized_kafka(kafka_dist: KafkaDistribution) -> Iterator[KafkaCluster]:
    """One node with KRaft's StandardAuthorizer: the test bed's own PLAINTEXT listener (and
    the controller's) are the super user ANONYMOUS; the exporter logs in over SASL/PLAIN."""
    login = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
             f'user_{EXPORTER_USER}="{EXPORTER_PASSWORD}";')  # fmt: skip
    cluster = KafkaCluster(
        kafka_dist,
        server_properties={"authorizer.class.name": STANDARD_AUTHORIZER,
                           "super.users": "User:ANONYMOUS"},
        extra_listeners={"SASL": Listener("SASL_PLAINTEXT", {
            "sasl.enabled.mechanisms": "PLAIN", "plain.sasl.jaas.config": login})},
    )  # fmt: skip
    try:
        cluster.start()
    except BrokerStartError as exc:
        pytest.fail(f"Kafka test cluster with an authorizer did not start:\n{exc}")
    try:
        cluster.ensure_transaction_state_topic()
        yield cluster
    finally:
        cluster.stop()


def _grant_describe(cluster: KafkaCluster, name: str, pattern: str) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    binding = AclBinding(ResourceType.TRANSACTIONAL_ID, name, ResourcePatternType[pattern],
                         f"User:{EXPORTER_USER}", "*", AclOperation.DESCRIBE,
                         AclPermissionType.ALLOW)  # fmt: skip
    for future in cluster.admin().create_acls([binding]).values():
        future.result(timeout=30)


def _exporter_admin(cluster: KafkaCluster) -> ClusterAdmin:
    return ClusterAdmin(bootstrap_servers=cluster.bootstrap_for("SASL"), properties={
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.username": EXPORTER_USER, "sasl.password": EXPORTER_PASSWORD,
    }, request_timeout_ms=REQUEST_TIMEOUT_MS)  # fmt: skip


def _probe_until(admin: ClusterAdmin, expected: bool, attempts: int = 20) -> tuple[bool, ...]:
    """ACLs reach the broker through the metadata log: probe until they apply (bounded)."""
    probed = admin.probe_visibility()
    for _ in range(attempts):
        if probed.rows == (expected,):
            break
        time.sleep(0.5)
        probed = admin.probe_visibility()
    assert probed.errors == ()
    return probed.rows


def test_a_principal_limited_to_its_own_prefix_may_not_see_every_transactional_id(
    authorized_kafka: KafkaCluster,
) -> None:
    """Least privilege (Describe on the team's prefix): ListTransactions may leave ids out,
    and the probe says so; Describe on every id (``*``) makes them all visible."""
    _grant_describe(authorized_kafka, "team-a.", "PREFIXED")
    admin = _exporter_admin(authorized_kafka)
    collector = SnapshotCollector(cluster="authorized", admin=admin, topic_filter=lambda _t: False)
    try:
        assert _probe_until(admin, False) == (False,)
        snapshot = collector.collect()
        assert snapshot.transactional_ids_visible is False
        # The probe's answer is not a failure of the cycle.
        assert not [e for e in snapshot.errors if e.api in ("FindCoordinator", "DescribeTransactions")]

        _grant_describe(authorized_kafka, "*", "LITERAL")
        assert _probe_until(admin, True) == (True,)
        assert collector.collect().transactional_ids_visible is True
    finally:
        collector.close()
