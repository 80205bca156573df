"""Which permissions the exporter's principal has, probed with the requests a cycle and the
operator commands send. Built only on :class:`~exporter.kafka.admin.ClusterAdmin`'s public
methods; nothing here writes to the cluster.

Kafka answers an unauthorized request in three ways, and each probe reads the one that
applies: a topic the principal may not Describe is missing from Metadata; DescribeProducers
answers TOPIC_AUTHORIZATION_FAILED without Read on the topic (Kafka 4.x); FindCoordinator and
DescribeTransactions answer TRANSACTIONAL_ID_AUTHORIZATION_FAILED without Describe on the
transactional id (for an id nobody uses, TRANSACTIONAL_ID_NOT_FOUND means it is allowed);
DescribeConfigs answers an authorization error without DescribeConfigs on the cluster.
ListTransactions answers nothing special: it silently leaves out the ids the principal may not
Describe, which is why the TransactionalId probe matters.

WriteTxnMarkers (ClusterAction, for ``abort``) and InitProducerId (Write on the transactional
id, for ``force-terminate``) cannot be probed without writing: they are reported as not
probed, with the ACL they need.
"""

from __future__ import annotations

import enum
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from exporter.kafka.admin import TRANSACTION_STATE_TOPIC, ClusterAdmin
from exporter.kafka.errors import KafkaRequestError

_AUTH_ERRORS = frozenset(
    {
        "TOPIC_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "GROUP_AUTHORIZATION_FAILED",
    }
)


class Permission(enum.StrEnum):
    OK = "ok"
    MISSING = "missing"
    #: The probe failed for another reason (the broker did not answer): see the detail.
    UNVERIFIED = "unverified"
    #: Probing it would write to the cluster.
    NOT_PROBED = "not_probed"


@dataclass(frozen=True, slots=True)
class PermissionCheck:
    """One permission a complete cycle or an operator command needs."""

    resource_type: str  # Topic, TransactionalId, Cluster
    resource: str  # a name or *
    operation: str  # Describe, Read, DescribeConfigs, ClusterAction, Write
    needed_for: str
    permission: Permission
    detail: str = ""


def probe_permissions(admin: ClusterAdmin, topics: Sequence[str] | None = None) -> list[PermissionCheck]:
    """Probe every permission; ``topics``: the topics to check (None: every visible topic).
    Raises KafkaUnavailable when the cluster cannot be reached at all."""
    wanted = None if topics is None else set(topics)
    metadata = admin.metadata(
        None if wanted is None else (lambda t: t in wanted or t == TRANSACTION_STATE_TOPIC),
        expect=(TRANSACTION_STATE_TOPIC, *(wanted or ())),
    )
    refused = dict(metadata.refused_topics)
    brokers = [b.broker_id for b in metadata.brokers]
    checks: list[PermissionCheck] = []
    visible = sorted({t for t, _ in metadata.leaders} - {TRANSACTION_STATE_TOPIC})

    # Describe on topics: Metadata shows only the topics the principal may Describe.
    if wanted is not None:
        for topic in sorted(wanted - set(visible)):
            checks.append(
                PermissionCheck(
                    "Topic",
                    topic,
                    "Describe",
                    "Metadata (every cycle)",
                    Permission.MISSING,
                    f"Kafka refuses it ({refused[topic]}): grant Read (it implies Describe)"
                    if topic in refused
                    else "not in Metadata: the topic does not exist",
                )
            )
        for topic in sorted(wanted & set(visible)):
            checks.append(
                PermissionCheck("Topic", topic, "Describe", "Metadata (every cycle)", Permission.OK)
            )
    else:
        checks.append(
            PermissionCheck(
                "Topic",
                "*",
                "Describe",
                "Metadata (every cycle)",
                Permission.OK,
                f"{len(visible)} topic(s) visible; Kafka hides the topics the principal may not "
                "Describe, so a topic missing here lacks Describe",
            )
        )

    # __transaction_state metadata: which coordinators lead which ids.
    state = [p for t, p in metadata.leaders if t == TRANSACTION_STATE_TOPIC]
    checks.append(
        PermissionCheck(
            "Topic",
            TRANSACTION_STATE_TOPIC,
            "Describe",
            "Metadata of the coordinators' partitions",
            Permission.OK
            if state
            else Permission.MISSING
            if TRANSACTION_STATE_TOPIC in refused
            else Permission.UNVERIFIED,
            f"{len(state)} partition(s) visible"
            if state
            else f"Kafka refuses it ({refused[TRANSACTION_STATE_TOPIC]})"
            if TRANSACTION_STATE_TOPIC in refused
            else "not in Metadata: no transaction was ever used on this cluster",
        )
    )

    # Read on topics: DescribeProducers (one partition of each topic, per leader).
    checks.extend(_probe_read(admin, metadata.leaders, visible))

    # Describe on TransactionalId *: an id nobody uses.
    checks.append(_probe_transactional_ids(admin))

    # DescribeConfigs on the brokers.
    configs = admin.broker_configs(brokers)
    denied = [e for e in configs.errors if e.error in _AUTH_ERRORS]
    other = [e for e in configs.errors if e.error not in _AUTH_ERRORS]
    checks.append(
        PermissionCheck(
            "Cluster",
            "kafka-cluster",
            "DescribeConfigs",
            "broker transaction settings",
            Permission.MISSING if denied else Permission.UNVERIFIED if other else Permission.OK,
            "; ".join(f"broker {e.broker_id}: {e.error}" for e in configs.errors),
        )
    )

    checks.append(
        PermissionCheck(
            "Cluster",
            "kafka-cluster",
            "ClusterAction",
            "abort (WriteTxnMarkers)",
            Permission.NOT_PROBED,
            "only abort needs it; probing would write a marker",
        )
    )
    checks.append(
        PermissionCheck(
            "TransactionalId",
            "*",
            "Write",
            "force-terminate (InitProducerId)",
            Permission.NOT_PROBED,
            "only force-terminate needs it, on the ids it terminates; "
            "probing would create a transactional id",
        )
    )
    return checks


def _probe_read(
    admin: ClusterAdmin, leaders: Mapping[tuple[str, int], int], topics: Sequence[str]
) -> list[PermissionCheck]:
    by_broker: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for topic in topics:
        partitions = sorted(p for (t, p), leader in leaders.items() if t == topic and leader >= 0)
        if partitions:
            by_broker[leaders[(topic, partitions[0])]].append((topic, partitions[0]))
    if not by_broker:
        return [
            PermissionCheck(
                "Topic",
                "*",
                "Read",
                "DescribeProducers (every cycle)",
                Permission.UNVERIFIED,
                "no topic with a leader to probe",
            )
        ]
    result = admin.describe_producers(by_broker)
    denied = sorted({e.topic for e in result.errors if e.error in _AUTH_ERRORS and e.topic})
    denied_brokers = [e for e in result.errors if e.error in _AUTH_ERRORS and not e.topic]
    other = [e for e in result.errors if e.error not in _AUTH_ERRORS]
    checks = [
        PermissionCheck(
            "Topic",
            t,
            "Read",
            "DescribeProducers (every cycle)",
            Permission.MISSING,
            "TOPIC_AUTHORIZATION_FAILED",
        )
        for t in denied
    ]
    for e in denied_brokers:
        checks.append(
            PermissionCheck(
                "Topic",
                "*",
                "Read",
                "DescribeProducers (every cycle)",
                Permission.MISSING,
                f"broker {e.broker_id}: {e.error}",
            )
        )
    probed = sum(len(v) for v in by_broker.values())
    if not denied and not denied_brokers:
        checks.append(
            PermissionCheck(
                "Topic",
                "*",
                "Read",
                "DescribeProducers (every cycle)",
                Permission.UNVERIFIED if other else Permission.OK,
                "; ".join(f"broker {e.broker_id}: {e.error}" for e in other) or f"{probed} topic(s) probed",
            )
        )
    return checks


def _probe_transactional_ids(admin: ClusterAdmin) -> PermissionCheck:
    probe_id = f"kafka-txn-exporter-probe-{uuid.uuid4().hex}"

    def check(permission: Permission, detail: str) -> PermissionCheck:
        return PermissionCheck(
            "TransactionalId",
            "*",
            "Describe",
            "ListTransactions and DescribeTransactions (every cycle)",
            permission,
            detail,
        )

    try:
        coordinator = admin.find_transaction_coordinators([probe_id])[probe_id]
    except KafkaRequestError as e:
        if "AUTHORIZATION_FAILED" in f"{e.error} {e.message}":
            return check(
                Permission.MISSING,
                f"FindCoordinator: {e.error}; ListTransactions "
                "silently leaves out the ids the principal may not Describe",
            )
        return check(Permission.UNVERIFIED, f"FindCoordinator: {e.error}")
    described = admin.describe_transactions({coordinator: [probe_id]})
    errors = [e.error for e in described.errors] + [d.error for d in described.rows if d.error is not None]
    if any(e in _AUTH_ERRORS for e in errors):
        return check(
            Permission.MISSING,
            "DescribeTransactions of an unused id answered "
            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED; ListTransactions silently leaves "
            "out the ids the principal may not Describe",
        )
    if errors == ["TRANSACTIONAL_ID_NOT_FOUND"]:
        return check(
            Permission.OK, "DescribeTransactions of an unused id answered TRANSACTIONAL_ID_NOT_FOUND"
        )
    return check(Permission.UNVERIFIED, f"DescribeTransactions answered {', '.join(errors) or 'ok'}")
