"""Metadata (confluent-kafka): brokers, partition leaders and replicas."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.model import Broker

TRANSACTION_STATE_TOPIC = "__transaction_state"


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    brokers: tuple[Broker, ...]
    #: (topic, partition) -> leader broker id (-1 when leaderless)
    leaders: Mapping[tuple[str, int], int]
    controller_id: int = -1
    #: (topic, partition) -> replica broker ids (the CLI's ``find-hanging --broker-id``)
    replicas: Mapping[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    #: __transaction_state partitions without a leader: the transactional ids they hold are
    #: listed by no coordinator, so "listed by nobody" proves nothing this cycle.
    leaderless_transaction_state: tuple[int, ...] = ()


def cluster_metadata(md: Any, topic_filter: Callable[[str], bool] | None) -> ClusterMetadata:
    """A librdkafka ``ClusterMetadata`` (``AdminClient.list_topics``) as the exporter's."""
    brokers = tuple(
        sorted((Broker(b.id, b.host, b.port) for b in md.brokers.values()), key=lambda b: b.broker_id)
    )
    leaders: dict[tuple[str, int], int] = {}
    replicas: dict[tuple[str, int], tuple[int, ...]] = {}
    state = md.topics.get(TRANSACTION_STATE_TOPIC)
    leaderless_state: tuple[int, ...] = ()
    if state is not None and state.error is None:
        leaderless_state = tuple(sorted(p for p, m in state.partitions.items() if m.leader < 0))
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
        leaderless_transaction_state=leaderless_state,
    )
