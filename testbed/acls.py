"""ACLs on a test cluster that runs KRaft's StandardAuthorizer (``KafkaCluster(authorizer=True)``).

The test bed's own PLAINTEXT listener is a super user, so grants and revocations go through
:meth:`KafkaCluster.admin` (confluent-kafka's ``create_acls`` / ``delete_acls``) and are
waited for: StandardAuthorizer applies ACLs from the metadata log, a moment after the
controller accepted them, so :func:`grant` and :func:`revoke` poll DescribeAcls on every
broker until each one reports the change.

Users of the SASL listener (``sasl_users``) used by the tests:

* :data:`EXPORTER_USER`: the exporter's principal; tests grant it exactly the documented
  table (:func:`exporter_acls`) or that table minus one row.
* :data:`APP_USER`: an application that owns the transactional ids ``app-*`` and writes its
  topic (:func:`application_acls`).
* :data:`TEAM_USER`: a principal with a team's usual grant, Describe on its own
  transactional-id prefix only (:func:`team_acls`): ListTransactions leaves every other id out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from testbed.broker import TRANSACTION_STATE_TOPIC, KafkaCluster

log = logging.getLogger(__name__)

EXPORTER_USER = "exporter"
APP_USER = "app"
TEAM_USER = "team"
#: Passwords of the SASL users of the ``kafka_acl`` fixture (test-only secrets).
TEST_SASL_USERS = {
    EXPORTER_USER: "exporter-secret",
    APP_USER: "app-secret",
    TEAM_USER: "team-secret",
}
APP_TRANSACTIONAL_ID_PREFIX = "app-"
TEAM_TRANSACTIONAL_ID_PREFIX = "team-"
CLUSTER_RESOURCE = "kafka-cluster"


@dataclass(frozen=True, slots=True)
class Acl:
    """One ALLOW (or DENY) rule: ``principal`` may ``operation`` on a resource."""

    principal: str  # "User:exporter"
    resource_type: str  # TOPIC, GROUP, TRANSACTIONAL_ID, CLUSTER
    name: str
    operation: str  # READ, WRITE, DESCRIBE, DESCRIBE_CONFIGS, ...
    pattern: str = "LITERAL"  # or PREFIXED
    permission: str = "ALLOW"
    host: str = "*"

    def binding(self) -> AclBinding:
        return AclBinding(
            _restype(self.resource_type), self.name, ResourcePatternType[self.pattern],
            self.principal, self.host, AclOperation[self.operation],
            AclPermissionType[self.permission],
        )  # fmt: skip

    def binding_filter(self) -> AclBindingFilter:
        return AclBindingFilter(
            _restype(self.resource_type), self.name, ResourcePatternType[self.pattern],
            self.principal, self.host, AclOperation[self.operation],
            AclPermissionType[self.permission],
        )  # fmt: skip

    def __str__(self) -> str:
        pattern = "" if self.pattern == "LITERAL" else f" ({self.pattern.lower()})"
        return (f"{self.permission} {self.principal} {self.operation} on "
                f"{self.resource_type} {self.name}{pattern}")  # fmt: skip


def _restype(name: str) -> ResourceType:
    """librdkafka names Kafka's CLUSTER resource type (code 4) BROKER."""
    return ResourceType.BROKER if name == "CLUSTER" else ResourceType[name]


def _restype_name(restype: ResourceType) -> str:
    return "CLUSTER" if restype == ResourceType.BROKER else restype.name


def user(name: str) -> str:
    return f"User:{name}"


def _key(binding: AclBinding) -> tuple[str, str, str, str, str, str]:
    return (_restype_name(binding.restype), binding.name, binding.resource_pattern_type.name,
            binding.principal, binding.operation.name, binding.permission_type.name)  # fmt: skip


def _acl_key(acl: Acl) -> tuple[str, str, str, str, str, str]:
    return (acl.resource_type, acl.name, acl.pattern, acl.principal, acl.operation,
            acl.permission)  # fmt: skip


def describe(cluster: KafkaCluster, *, node_id: int | None = None) -> set[tuple[str, ...]]:
    """Every ACL (as a key tuple) that one broker (any when ``node_id`` is None) reports."""
    admin = cluster.admin() if node_id is None else _node_admin(cluster, node_id)
    match_all = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY,
    )  # fmt: skip
    bindings = admin.describe_acls(match_all, request_timeout=10).result(timeout=15)
    return {_key(b) for b in bindings}


def _node_admin(cluster: KafkaCluster, node_id: int) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.node(node_id).bootstrap, "logger": log})


def _wait(cluster: KafkaCluster, acls: list[Acl], *, present: bool, timeout_s: float) -> None:
    wanted = {_acl_key(a) for a in acls}
    deadline = time.monotonic() + timeout_s
    for node_id in sorted(cluster.nodes):
        if not cluster.node(node_id).running:
            continue
        while True:
            try:
                seen = describe(cluster, node_id=node_id)
            except KafkaException as exc:
                log.debug("DescribeAcls on %d: %s", node_id, exc)
                seen = set()
            done = wanted <= seen if present else not (wanted & seen)
            if done:
                break
            if time.monotonic() > deadline:
                state = "granted" if present else "revoked"
                raise TimeoutError(f"ACLs not {state} on broker {node_id}: "
                                   + ", ".join(str(a) for a in acls))  # fmt: skip
            time.sleep(0.2)


def grant(cluster: KafkaCluster, acls: Iterable[Acl], *, timeout_s: float = 30.0) -> None:
    """Create ACLs (as the super user) and wait until every broker applies them."""
    todo = list(acls)
    if not todo:
        return
    futures = cluster.admin().create_acls([a.binding() for a in todo], request_timeout=15)
    for future in futures.values():
        future.result(timeout=20)
    _wait(cluster, todo, present=True, timeout_s=timeout_s)
    log.info("granted: %s", "; ".join(str(a) for a in todo))


def revoke(cluster: KafkaCluster, acls: Iterable[Acl], *, timeout_s: float = 30.0) -> None:
    """Delete exactly these ACLs and wait until every broker dropped them."""
    todo = list(acls)
    if not todo:
        return
    futures = cluster.admin().delete_acls([a.binding_filter() for a in todo],
                                          request_timeout=15)  # fmt: skip
    for future in futures.values():
        future.result(timeout=20)
    _wait(cluster, todo, present=False, timeout_s=timeout_s)
    log.info("revoked: %s", "; ".join(str(a) for a in todo))


def revoke_all(cluster: KafkaCluster, principal: str, *, timeout_s: float = 30.0) -> None:
    """Delete every ACL of ``principal``."""
    match = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY,
        AclPermissionType.ANY,
    )  # fmt: skip
    futures = cluster.admin().delete_acls([match], request_timeout=15)
    deleted: list[Acl] = []
    for future in futures.values():
        for b in future.result(timeout=20):
            deleted.append(Acl(b.principal, _restype_name(b.restype), b.name, b.operation.name,
                               b.resource_pattern_type.name, b.permission_type.name, b.host))  # fmt: skip
    _wait(cluster, deleted, present=False, timeout_s=timeout_s)


@contextmanager
def granted(cluster: KafkaCluster, acls: Iterable[Acl]) -> Iterator[list[Acl]]:
    """Grant for the block, revoke afterwards."""
    todo = list(acls)
    grant(cluster, todo)
    try:
        yield todo
    finally:
        revoke(cluster, todo)


# -- the ACL sets the tests use ------------------------------------------------------------


def exporter_acls(principal: str, topics: Iterable[str]) -> list[Acl]:
    """The exporter's documented least-privilege table (docs/testbed.md, "ACLs of the
    exporter"), one row per ACL, for the monitored ``topics``.

    Read-only monitoring; the operator verbs (abort, force-terminate) need more (the table
    lists them separately: :func:`operator_acls`).
    """
    rows = [
        Acl(principal, "CLUSTER", CLUSTER_RESOURCE, "DESCRIBE_CONFIGS"),
        Acl(principal, "TRANSACTIONAL_ID", "*", "DESCRIBE"),
        Acl(principal, "TOPIC", TRANSACTION_STATE_TOPIC, "DESCRIBE"),
    ]
    # Read implies Describe (Metadata, ListOffsets): a separate Describe row would change
    # nothing when removed, and DescribeProducers needs Read anyway.
    rows.extend(Acl(principal, "TOPIC", topic, "READ") for topic in topics)
    return rows


def operator_acls(principal: str, topics: Iterable[str]) -> list[Acl]:
    """What ``abort`` (WriteTxnMarkers: ClusterAction on the cluster) and force-terminate
    (Write on the transactional id) need on top of :func:`exporter_acls`."""
    del topics  # WriteTxnMarkers is authorized on the cluster, not per topic
    return [
        Acl(principal, "CLUSTER", CLUSTER_RESOURCE, "CLUSTER_ACTION"),
        Acl(principal, "TRANSACTIONAL_ID", "*", "WRITE"),
    ]


def application_acls(principal: str, topic: str,
                     prefix: str = APP_TRANSACTIONAL_ID_PREFIX) -> list[Acl]:  # fmt: skip
    """A transactional producer's grant: Write/Describe on its own id prefix and its topic."""
    return [
        Acl(principal, "TRANSACTIONAL_ID", prefix, "WRITE", pattern="PREFIXED"),
        Acl(principal, "TRANSACTIONAL_ID", prefix, "DESCRIBE", pattern="PREFIXED"),
        Acl(principal, "TOPIC", topic, "WRITE"),
        Acl(principal, "TOPIC", topic, "DESCRIBE"),
    ]


def team_acls(principal: str, topics: Iterable[str] = (),
              prefix: str = TEAM_TRANSACTIONAL_ID_PREFIX) -> list[Acl]:  # fmt: skip
    """A team's usual monitoring grant: Describe on its own transactional-id prefix (not
    ``*``), and Describe/Read on its topics."""
    rows = [Acl(principal, "TRANSACTIONAL_ID", prefix, "DESCRIBE", pattern="PREFIXED")]
    # Read implies Describe (Metadata, ListOffsets): a separate Describe row would change
    # nothing when removed, and DescribeProducers needs Read anyway.
    rows.extend(Acl(principal, "TOPIC", topic, "READ") for topic in topics)
    return rows


__all__ = [
    "APP_TRANSACTIONAL_ID_PREFIX",
    "APP_USER",
    "CLUSTER_RESOURCE",
    "EXPORTER_USER",
    "TEAM_TRANSACTIONAL_ID_PREFIX",
    "TEAM_USER",
    "TEST_SASL_USERS",
    "Acl",
    "application_acls",
    "describe",
    "exporter_acls",
    "grant",
    "granted",
    "operator_acls",
    "revoke",
    "revoke_all",
    "team_acls",
    "user",
]
