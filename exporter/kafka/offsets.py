"""Partition offsets (ListOffsets latest, both isolation levels, then earliest; confluent-kafka)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from exporter.kafka.configs import RESULT_MARGIN_S
from exporter.kafka.results import Collected, Gather, timeout_ms
from exporter.model import PartitionOffsets

#: The log start offsets are asked for only with at least this much of the timeout left.
MIN_EARLIEST_TIMEOUT_S = 0.2


def partition_offsets(
    admin: Any,
    partitions: Iterable[tuple[str, int]],
    leaders: Mapping[tuple[str, int], int],
    request_timeout_ms: int,
    deadline: float | None,
) -> Collected[PartitionOffsets]:
    """High watermark and LSO of every partition, then the log start offset of those whose LSO
    was read; an offset that could not be read is -1, with one error per partition (the first
    of its reads that failed).

    The log start offset is read after the LSO on purpose: it only grows, so the value read is
    at least the one the LSO was computed with, and a transaction starting at or above it was
    not lifted past by retention (the pipeline's "the LSO has passed it" evidence)."""
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
    values: dict[str, dict[tuple[str, int], int]] = {"hwm": {}, "lso": {}, "start": {}}
    failed: set[tuple[str, int]] = set()

    def settle(kind: str, futures: Mapping[Any, Any], wait_s: float, message: str = "") -> None:
        """Each future's offset into ``values[kind]``; the first failure of a partition is
        its error."""
        for ctp, future in futures.items():
            key = (ctp.topic, ctp.partition)
            error: BaseException | str
            try:
                offset = int(future.result(timeout=wait_s + RESULT_MARGIN_S).offset)
            except Exception as e:
                error = e
            else:
                if offset >= 0:
                    values[kind][key] = offset
                    continue
                # librdkafka answers a request that timed out with offset -1001 (invalid),
                # not an error; "latest" and "earliest" are never negative otherwise.
                late = time.monotonic() - started >= timeout_s
                error = "REQUEST_TIMED_OUT" if late else "OFFSET_NOT_AVAILABLE"
            if key not in failed:
                failed.add(key)
                gather.fail(
                    error, broker_id=leaders.get(key, -1), topic=key[0], partition=key[1], message=message
                )

    for kind, futures in pending.items():
        settle(kind, futures, timeout_s)
    # The log start, after the LSO (see above); evidence only: without time left it stays
    # unknown (-1), which proves nothing either way.
    earliest = [key for key in tps if key in values["lso"]]
    left_s = timeout_s - (time.monotonic() - started)
    if earliest and left_s >= MIN_EARLIEST_TIMEOUT_S:
        request = {CTopicPartition(t, p): OffsetSpec.earliest() for t, p in earliest}
        settle("start", admin.list_offsets(request, request_timeout=left_s), left_s, message="earliest")
    gather.add(
        *(
            PartitionOffsets(
                topic=t,
                partition=p,
                leader=leaders.get((t, p), -1),
                high_watermark=values["hwm"].get((t, p), -1),
                last_stable_offset=values["lso"].get((t, p), -1),
                log_start_offset=values["start"].get((t, p), -1),
            )
            for t, p in tps
        )
    )
    return gather.result()
