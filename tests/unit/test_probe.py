"""doctor's probes read Kafka's answers right: each authorization error becomes the missing
permission it means, an unused transactional id answered "not found" means Describe is
allowed, and nothing that would write is sent. (The everything-allowed case runs on the real
broker in tests/integration/test_cli.py.)"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from exporter.kafka.admin import ClusterAdmin, ClusterMetadata, Collected
from exporter.kafka.errors import KafkaRequestError
from exporter.kafka.probe import Permission, probe_permissions
from exporter.model import Broker, BrokerConfig, CollectionError, TransactionDescription


class DenyingAdmin:
    """A principal with Describe on topics but no Read on ``orders``, no Describe on
    transactional ids and no DescribeConfigs."""

    def __init__(self, *, find_fails: bool = False) -> None:
        self.find_fails = find_fails
        self.sent: list[str] = []

    #: Topics that exist but that Kafka refuses to describe to this principal.
    hidden = ("secret-topic",)

    def metadata(self, topic_filter: Any = None, *, expect: Iterable[str] = ()) -> ClusterMetadata:
        leaders = {("orders", 0): 1, ("orders", 1): 2, ("payments", 0): 2, ("__transaction_state", 0): 1}
        listed = {t for t, _ in leaders}
        if topic_filter is not None:
            leaders = {tp: b for tp, b in leaders.items() if topic_filter(tp[0])}
        refused = tuple(
            (t, "TOPIC_AUTHORIZATION_FAILED") for t in sorted(expect) if t in self.hidden and t not in listed
        )
        return ClusterMetadata(
            brokers=(Broker(1, "h", 1), Broker(2, "h", 2)), leaders=leaders, refused_topics=refused
        )

    def describe_producers(self, by_broker: Mapping[int, Iterable[tuple[str, int]]]) -> Any:
        self.sent.append(f"DescribeProducers{sorted((b, sorted(t)) for b, t in by_broker.items())}")
        return Collected(
            (),
            (
                CollectionError(
                    "DescribeProducers",
                    "TOPIC_AUTHORIZATION_FAILED",
                    broker_id=1,
                    topic="orders",
                    partition=0,
                ),
            ),
        )

    def find_transaction_coordinators(self, ids: Iterable[str]) -> dict[str, int]:
        self.sent.append("FindCoordinator")
        if self.find_fails:
            raise KafkaRequestError("FindCoordinator", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
        return {i: 1 for i in ids}

    def describe_transactions(self, ids: Mapping[int, Iterable[str]]) -> Any:
        self.sent.append("DescribeTransactions")
        [tid] = [t for ts in ids.values() for t in ts]
        error = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
        return Collected(
            (TransactionDescription(1, tid, error),),
            (CollectionError("DescribeTransactions", error, broker_id=1),),
        )

    def broker_configs(self, brokers: Iterable[int]) -> Collected[BrokerConfig]:
        self.sent.append("DescribeConfigs")
        return Collected(
            (),
            tuple(
                CollectionError("DescribeConfigs", "CLUSTER_AUTHORIZATION_FAILED", broker_id=b)
                for b in brokers
            ),
        )


def results(
    admin: DenyingAdmin, topics: tuple[str, ...] | None = None
) -> dict[tuple[str, str, str], Permission]:
    checks = probe_permissions(cast(ClusterAdmin, admin), topics)
    return {(c.resource_type, c.resource, c.operation): c.permission for c in checks}


def test_each_authorization_error_is_the_permission_it_means() -> None:
    admin = DenyingAdmin()
    assert results(admin) == {
        ("Topic", "*", "Describe"): Permission.OK,
        ("Topic", "__transaction_state", "Describe"): Permission.OK,
        ("Topic", "orders", "Read"): Permission.MISSING,
        ("TransactionalId", "*", "Describe"): Permission.MISSING,
        ("Cluster", "kafka-cluster", "DescribeConfigs"): Permission.MISSING,
        ("Cluster", "kafka-cluster", "ClusterAction"): Permission.NOT_PROBED,
        ("TransactionalId", "*", "Write"): Permission.NOT_PROBED,
    }
    # One partition per topic, grouped by leader; nothing that writes.
    assert admin.sent == [
        "DescribeProducers[(1, [('orders', 0)]), (2, [('payments', 0)])]",
        "FindCoordinator",
        "DescribeTransactions",
        "DescribeConfigs",
    ]


def test_find_coordinator_refused_means_describe_on_transactional_ids_is_missing() -> None:
    assert results(DenyingAdmin(find_fails=True))[("TransactionalId", "*", "Describe")] is (
        Permission.MISSING
    )


def test_a_named_topic_missing_from_metadata_lacks_describe() -> None:
    found = results(DenyingAdmin(), ("payments", "secret-topic"))
    assert found[("Topic", "secret-topic", "Describe")] is Permission.MISSING
    assert found[("Topic", "payments", "Describe")] is Permission.OK
    assert found[("Topic", "__transaction_state", "Describe")] is Permission.OK


def test_a_refused_topic_and_an_absent_one_are_told_apart() -> None:
    admin = DenyingAdmin()
    checks = {
        c.resource: c for c in probe_permissions(cast(ClusterAdmin, admin), ["secret-topic", "no-such-topic"])
    }
    assert "TOPIC_AUTHORIZATION_FAILED" in checks["secret-topic"].detail
    assert "does not exist" in checks["no-such-topic"].detail
