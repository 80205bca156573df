"""Fault tools for the fault suite (issue 13), on a running :class:`KafkaCluster`.

Process faults are methods of the cluster (``pause_broker``/``resume_broker``: SIGSTOP and
SIGCONT, the broker accepts connections and never answers; ``kill_broker``: SIGKILL;
``start_broker``: restart with log recovery); here are context managers for them, and the
metadata faults:

* :func:`paused` / :func:`killed`: a fault for the length of a ``with`` block.
* :func:`slowed`: added latency on a ``via_proxy`` listener (see :mod:`testbed.proxy`).
* :func:`move_transaction_state_leader`: move a ``__transaction_state`` partition's leader
  (replica reorder + preferred election), so the coordinator of its ids moves and the new
  one loads the partition (COORDINATOR_LOAD_IN_PROGRESS meanwhile).
* :func:`delete_topic`, :func:`add_partitions`: topic changes between or during cycles.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import NewPartitions

from testbed.broker import TRANSACTION_STATE_TOPIC, KafkaCluster, transaction_state_partition

log = logging.getLogger(__name__)


@contextmanager
def paused(cluster: KafkaCluster, node_id: int) -> Iterator[None]:
    """SIGSTOP a node for the block; SIGCONT afterwards (also on error)."""
    cluster.pause_broker(node_id)
    try:
        yield
    finally:
        cluster.resume_broker(node_id)


@contextmanager
def killed(cluster: KafkaCluster, node_id: int, *, restart: bool = True) -> Iterator[None]:
    """SIGKILL a node for the block; restart it afterwards (and wait until it is back)."""
    cluster.kill_broker(node_id)
    try:
        yield
    finally:
        if restart:
            cluster.start_broker(node_id)


@contextmanager
def slowed(cluster: KafkaCluster, delay_s: float, *, node_id: int | None = None,
           listener: str | None = None) -> Iterator[None]:  # fmt: skip
    """Add ``delay_s`` per request on proxied listeners for the block."""
    if not cluster.proxies:
        raise RuntimeError("this cluster has no via_proxy listener to slow down")
    cluster.set_latency(delay_s, node_id=node_id, listener=listener)
    try:
        yield
    finally:
        cluster.set_latency(0.0, node_id=node_id, listener=listener)


def transaction_state_replicas(cluster: KafkaCluster) -> dict[int, list[int]]:
    """``{__transaction_state partition: replica list}``, preferred leader first."""
    md = cluster.admin().list_topics(topic=TRANSACTION_STATE_TOPIC, timeout=10)
    meta = md.topics[TRANSACTION_STATE_TOPIC]
    return {p.id: list(p.replicas) for p in meta.partitions.values()}


def move_transaction_state_leader(
    cluster: KafkaCluster, transactional_id: str, to_broker: int, *, timeout_s: float = 60.0
) -> int:
    """Make ``to_broker`` the coordinator of ``transactional_id``: reorder the replicas of
    its ``__transaction_state`` partition so that ``to_broker`` is preferred
    (AlterPartitionReassignments with the same replica set: nothing is copied), then elect
    the preferred leader, and wait until FindCoordinator answers ``to_broker``.

    Returns the partition moved. Needs a replica on ``to_broker`` (3 nodes: every broker).
    """
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition as KafkaTopicPartition

    cluster.ensure_transaction_state_topic()
    state_partition = transaction_state_partition(transactional_id,
                                                  cluster.transaction_state_partitions)  # fmt: skip
    replicas = transaction_state_replicas(cluster)[state_partition]
    if to_broker not in replicas:
        raise ValueError(f"broker {to_broker} has no replica of {TRANSACTION_STATE_TOPIC}-"
                         f"{state_partition} (replicas {replicas})")  # fmt: skip
    reordered = [to_broker, *[r for r in replicas if r != to_broker]]
    if reordered != replicas:
        kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers.split(","),
                                  client_id="kte-testbed-faults")  # fmt: skip
        try:
            kadmin.alter_partition_reassignments(
                {KafkaTopicPartition(TRANSACTION_STATE_TOPIC, state_partition): reordered}
            )
        finally:
            kadmin.close()
        _wait(
            lambda: transaction_state_replicas(cluster)[state_partition] == reordered,
            timeout_s,
            f"replica order {reordered} of partition {state_partition}",
        )
    tp = TopicPartition(TRANSACTION_STATE_TOPIC, state_partition)

    def elected() -> bool:
        try:
            cluster.admin().elect_leaders(ElectionType.PREFERRED, [tp]).result(timeout=15)
        except KafkaException as exc:
            # ELECTION_NOT_NEEDED: already the leader.
            log.debug("preferred election of %s: %s", tp, exc)
        return cluster.leader_of(TRANSACTION_STATE_TOPIC, state_partition) == to_broker

    _wait(elected, timeout_s, f"leader {to_broker} of {TRANSACTION_STATE_TOPIC}-{state_partition}")
    _wait(lambda: cluster.coordinator_of(transactional_id) == to_broker, timeout_s,
          f"coordinator {to_broker} for {transactional_id}")  # fmt: skip
    log.info("%s-%d now led by %d", TRANSACTION_STATE_TOPIC, state_partition, to_broker)
    return state_partition


def delete_topic(cluster: KafkaCluster, topic: str, *, timeout_s: float = 30.0) -> None:
    """Delete a topic and wait until the metadata no longer has it."""
    futures = cluster.admin().delete_topics([topic], operation_timeout=timeout_s)
    futures[topic].result(timeout=timeout_s)

    def gone() -> bool:
        md = cluster.admin().list_topics(timeout=5)
        return topic not in md.topics

    _wait(gone, timeout_s, f"deletion of {topic}")


def add_partitions(cluster: KafkaCluster, topic: str, total: int, *,
                   timeout_s: float = 30.0) -> None:  # fmt: skip
    """Grow ``topic`` to ``total`` partitions and wait until every one has a leader."""
    futures = cluster.admin().create_partitions([NewPartitions(topic, total)],
                                                operation_timeout=timeout_s)  # fmt: skip
    futures[topic].result(timeout=timeout_s)

    def led() -> bool:
        leaders = cluster.partition_leaders(topic)
        return len(leaders) == total and all(v >= 0 for v in leaders.values())

    _wait(led, timeout_s, f"{total} led partitions of {topic}")


def _wait(probe: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if probe():
                return
        except KafkaException as exc:
            log.debug("waiting for %s: %s", what, exc)
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.3)


__all__ = [
    "add_partitions",
    "delete_topic",
    "killed",
    "move_transaction_state_leader",
    "paused",
    "slowed",
    "transaction_state_replicas",
]
