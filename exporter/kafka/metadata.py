"""Metadata (confluent-kafka): brokers, partition leaders and replicas."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.model import TRANSACTION_STATE_TOPIC, Broker

__all__ = ["TRANSACTION_STATE_TOPIC", "ClusterMetadata", "cluster_metadata", "refused_topics"]


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    brokers: tuple[Broker, ...]
    #: (topic, partition) -> leader broker id (-1 when leaderless)
    leaders: Mapping[tuple[str, int], int]
    controller_id: int = -1
    #: (topic, partition) -> replica broker ids (the CLI's ``find-hanging --broker-id``)
    replicas: Mapping[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    #: __transaction_state partition -> leader (-1 when leaderless), whatever the topic filter.
    #: A leaderless partition's ids are listed by no coordinator, and a leader that changes
    #: while the coordinators are listed may be missed by both: either makes the listing
    #: incomplete (``SnapshotCollector._list_transactions``).
    transaction_state_leaders: Mapping[int, int] = field(default_factory=dict)
    #: (topic, Kafka error name) of expected topics the listing left out and that Kafka then
    #: refused to describe (TOPIC_AUTHORIZATION_FAILED: no Describe ACL on the topic). The
    #: full listing drops such topics silently; asked by name, Kafka says why.
    refused_topics: tuple[tuple[str, str], ...] = ()


def cluster_metadata(md: Any, topic_filter: Callable[[str], bool] | None) -> ClusterMetadata:
    """A librdkafka ``ClusterMetadata`` (``AdminClient.list_topics``) as the exporter's."""
    brokers = tuple(
        sorted((Broker(b.id, b.host, b.port) for b in md.brokers.values()), key=lambda b: b.broker_id)
    )
    leaders: dict[tuple[str, int], int] = {}
    replicas: dict[tuple[str, int], tuple[int, ...]] = {}
    state_leaders = transaction_state_leaders(md)
    for name, topic in md.topics.items():
        if topic_filter is not None and not topic_filter(name):
            continue
        if topic.error is not None:
            continue
        for pid, partition in topic.partitions.items():
            leaders[(name, pid)] = partition.leader
            replicas[(name, pid)] = tuple(partition.replicas)
    return ClusterMetadata(
        brokers=brokers,
        leaders=leaders,
        controller_id=getattr(md, "controller_id", -1),
        replicas=replicas,
        transaction_state_leaders=state_leaders,
    )


def transaction_state_leaders(md: Any) -> dict[int, int]:
    """``{partition: leader}`` of ``__transaction_state`` in a librdkafka ``ClusterMetadata``
    (empty when the topic is absent or its metadata has an error)."""
    state = md.topics.get(TRANSACTION_STATE_TOPIC)
    if state is None or state.error is not None:
        return {}
    return {p: m.leader for p, m in state.partitions.items()}


def refused_topics(admin: Any, names: Sequence[str], wait_ms: int) -> tuple[tuple[str, str], ...]:
    """(topic, error) of each of ``names`` that Kafka refuses to describe.

    DescribeTopics is a Metadata request for just these names that never creates a topic.
    Only an authorization error is a refusal: a topic that does not exist (e.g.
    ``__transaction_state`` before the cluster's first transaction) is none, and an error of
    the request as a whole refuses nothing (the next cycle asks again).
    """
    from confluent_kafka import TopicCollection

    from exporter.kafka.errors import error_name

    refused: list[tuple[str, str]] = []
    try:
        futures = admin.describe_topics(TopicCollection(list(names)), request_timeout=wait_ms / 1000)
    except Exception:
        return ()
    for name, future in futures.items():
        try:
            future.result(timeout=wait_ms / 1000 + 1)
        except Exception as e:
            error = error_name(e)
            if "AUTHORIZATION" in error:
                refused.append((name, error))
    return tuple(sorted(refused))
