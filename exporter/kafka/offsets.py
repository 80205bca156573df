"""Partition offsets (ListOffsets latest, both isolation levels; earliest on demand; confluent-kafka)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from exporter.kafka.configs import RESULT_MARGIN_S
from exporter.kafka.results import Collected, Gather, timeout_ms
from exporter.model import PartitionOffsets


def partition_offsets(
    admin: Any,
    partitions: Iterable[tuple[str, int]],
    leaders: Mapping[tuple[str, int], int],
    request_timeout_ms: int,
    deadline: float | None,
) -> Collected[PartitionOffsets]:
    """High watermark and LSO of every partition; a partition whose offsets could not be read
    has -1 for them, and one error (the first of its two reads that failed)."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka import TopicPartition as CTopicPartition
    from confluent_kafka.admin import OffsetSpec

    gather: Gather[PartitionOffsets] = Gather("ListOffsets")
    tps = sorted(set(partitions))
    if not tps:
        return gather.result()
    timeout_s = timeout_ms(request_timeout_ms, deadline, gather.api) / 1000
    started = time.monotonic()
    request = {CTopicPartition(t, p): OffsetSpec.latest() for t, p in tps}
    pending = {
        kind: admin.list_offsets(request, isolation_level=isolation, request_timeout=timeout_s)
        for kind, isolation in (
            ("hwm", IsolationLevel.READ_UNCOMMITTED),
            ("lso", IsolationLevel.READ_COMMITTED),
        )
    }
    values: dict[str, dict[tuple[str, int], int]] = {"hwm": {}, "lso": {}}
    failed: set[tuple[str, int]] = set()
    for kind, futures in pending.items():
        for ctp, future in futures.items():
            key = (ctp.topic, ctp.partition)
            offset = _offset(future, timeout_s, started)
            if isinstance(offset, int):
                values[kind][key] = offset
            elif key not in failed:
                failed.add(key)
                where = leaders.get(key, -1)
                gather.fail(offset, broker_id=where, topic=key[0], partition=key[1], message="")
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
