"""Partition offsets: ListOffsets latest at both isolation levels (kafka-python protocol), and
earliest on demand (confluent-kafka)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from exporter.kafka._protocol import EncodedBy, ProtocolClient
from exporter.kafka.configs import RESULT_MARGIN_S
from exporter.kafka.results import Collected, Gather, timeout_ms
from exporter.kafka.wire import LIST_OFFSETS_VERSIONS, encode_list_offsets
from exporter.model import PartitionOffsets

#: Kafka's OFFSET_NOT_AVAILABLE: an answer without error whose offset is -1 (no such offset).
_OFFSET_NOT_AVAILABLE = 78


def partition_offsets(
    client: ProtocolClient,
    partitions: Iterable[tuple[str, int]],
    leaders: Mapping[tuple[str, int], int],
    request_timeout_ms: int,
    deadline: float | None,
) -> Collected[PartitionOffsets]:
    """High watermark and LSO of every partition: ListOffsets latest at both isolation levels,
    one request per leader and level, all in flight together. A partition whose offsets could
    not be read has -1 for them, and one error (the first of its two reads that failed).

    Sent through kafka-python's protocol layer rather than confluent-kafka's ``list_offsets``,
    which makes a Python future (with its lock and condition) for every partition and level:
    at 10k partitions those 20k futures were the largest transient allocation of a cycle
    (~25 MiB of the daemon's Python heap at its peak) and most of the stage's time. The
    requests' bytes are written by :func:`exporter.kafka.wire.encode_list_offsets`."""
    from kafka.protocol.consumer.offsets import IsolationLevel, OffsetSpec

    gather: Gather[PartitionOffsets] = Gather("ListOffsets")
    tps = sorted(set(partitions))
    if not tps:
        return gather.result()
    failed: set[tuple[str, int]] = set()
    by_leader: dict[int, dict[str, list[int]]] = {}
    for t, p in tps:
        leader = leaders.get((t, p), -1)
        if leader < 0:  # no leader to ask
            failed.add((t, p))
            gather.fail("LEADER_NOT_AVAILABLE", topic=t, partition=p, message="")
        else:
            by_leader.setdefault(leader, {}).setdefault(t, []).append(p)
    requests = [
        (kind, leader, list_offsets_request(int(isolation), by_topic, int(OffsetSpec.LATEST)))
        for kind, isolation in (
            ("hwm", IsolationLevel.READ_UNCOMMITTED),
            ("lso", IsolationLevel.READ_COMMITTED),
        )
        for leader, by_topic in by_leader.items()
    ]
    values: dict[str, dict[tuple[str, int], int]] = {"hwm": {}, "lso": {}}
    wait_ms = timeout_ms(request_timeout_ms, deadline, gather.api)
    for kind, broker_id, response in client.run(client.send_all, requests, wait_ms):
        if isinstance(response, BaseException):
            for t, ps in by_leader[broker_id].items():
                for p in ps:
                    if (t, p) not in failed:
                        failed.add((t, p))
                        gather.fail(response, broker_id=broker_id, topic=t, partition=p)
            continue
        got = values[kind]
        for topic in response.topics:
            for part in topic.partitions:
                key = (topic.name, part.partition_index)
                if part.error_code == 0 and part.offset >= 0:
                    got[key] = part.offset
                elif key not in failed:
                    failed.add(key)
                    gather.ok(
                        part.error_code or _OFFSET_NOT_AVAILABLE,
                        broker_id=broker_id,
                        topic=topic.name,
                        partition=part.partition_index,
                        message="",
                    )
    gather.add(
        *(
            PartitionOffsets(
                topic=t,
                partition=p,
                leader=leaders.get((t, p), -1),
                high_watermark=values["hwm"].get((t, p), -1),
                last_stable_offset=values["lso"].get((t, p), -1),
            )
            for t, p in tps
        )
    )
    return gather.result()


def list_offsets_request(
    isolation_level: int, topics: Mapping[str, Sequence[int]], timestamp: int
) -> EncodedBy:
    """A ListOffsets request of ``timestamp`` for every partition of ``topics`` (name ->
    partition numbers), written by :func:`exporter.kafka.wire.encode_list_offsets`."""
    from kafka.protocol.consumer.offsets import ListOffsetsRequest

    shell = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=[],
        min_version=LIST_OFFSETS_VERSIONS[0],
        max_version=LIST_OFFSETS_VERSIONS[-1],
    )
    return EncodedBy(
        shell,
        LIST_OFFSETS_VERSIONS,
        lambda version: encode_list_offsets(version, isolation_level, topics, timestamp),
    )


def log_start_offsets(
    admin: Any,
    partitions: Iterable[tuple[str, int]],
    leaders: Mapping[tuple[str, int], int],
    request_timeout_ms: int,
    deadline: float | None,
) -> Collected[tuple[str, int, int]]:
    """The log start offset (ListOffsets earliest) of each partition, as (topic, partition,
    offset) rows; a partition that could not be read has an error and no row."""
    from confluent_kafka import TopicPartition as CTopicPartition
    from confluent_kafka.admin import OffsetSpec

    gather: Gather[tuple[str, int, int]] = Gather("ListOffsets")
    tps = sorted(set(partitions))
    if not tps:
        return gather.result()
    timeout_s = timeout_ms(request_timeout_ms, deadline, gather.api) / 1000
    started = time.monotonic()
    request = {CTopicPartition(t, p): OffsetSpec.earliest() for t, p in tps}
    for ctp, future in admin.list_offsets(request, request_timeout=timeout_s).items():
        t, p = ctp.topic, ctp.partition
        offset = _offset(future, timeout_s, started)
        if isinstance(offset, int):
            gather.add((t, p, offset))
        else:
            gather.fail(offset, broker_id=leaders.get((t, p), -1), topic=t, partition=p, message="earliest")
    return gather.result()


def _offset(future: Any, timeout_s: float, started: float) -> int | BaseException | str:
    """A ListOffsets future's offset, or what to record as its error."""
    try:
        offset = int(future.result(timeout=timeout_s + RESULT_MARGIN_S).offset)
    except Exception as e:
        return e
    if offset >= 0:
        return offset
    # librdkafka answers a request that timed out with offset -1001 (invalid), not an error;
    # "latest" and "earliest" are never negative otherwise.
    late = time.monotonic() - started >= timeout_s
    return "REQUEST_TIMED_OUT" if late else "OFFSET_NOT_AVAILABLE"
