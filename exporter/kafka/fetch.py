"""The timestamp of the batch at an open transaction's start offset (Fetch, kafka-python)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from exporter.kafka._protocol import ProtocolClient
from exporter.kafka.results import Collected, Gather, timeout_ms
from exporter.model import BatchTimestamp


def batch_timestamps(
    client: ProtocolClient,
    offsets_by_broker: Mapping[int, Iterable[tuple[str, int, int]]],
    request_timeout_ms: int,
    deadline: float | None = None,
) -> Collected[BatchTimestamp]:
    """One Fetch per wanted offset, all in flight together.

    A broker returns a batch larger than partition_max_bytes only for the first partition of a
    request, and one byte is all that is asked for. Only open transactions the coordinator
    does not cover need this, and each is read once (the collector caches the timestamps).
    """
    from kafka.protocol.consumer.fetch import FetchRequest

    gather: Gather[BatchTimestamp] = Gather("Fetch")
    requests = []
    for broker_id, items in offsets_by_broker.items():
        for topic, partition, offset in sorted(set(items)):
            request = FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=1,
                max_bytes=1,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[
                    FetchRequest.FetchTopic(
                        topic=topic,
                        partitions=[
                            FetchRequest.FetchTopic.FetchPartition(
                                partition=partition,
                                current_leader_epoch=-1,
                                fetch_offset=offset,
                                last_fetched_epoch=-1,
                                log_start_offset=-1,
                                partition_max_bytes=1,
                            )
                        ],
                    )
                ],
                forgotten_topics_data=[],
                rack_id="",
                min_version=4,
                max_version=12,
            )
            requests.append(({(topic, partition): offset}, broker_id, request))
    if not requests:
        return gather.result()
    wait_ms = timeout_ms(request_timeout_ms, deadline, gather.api)
    for wanted, broker_id, response in client.run(client.send_all, requests, wait_ms):
        if isinstance(response, BaseException):
            gather.fail(response, broker_id=broker_id)
            continue
        for topic in response.responses:
            for part in topic.partitions:
                key = (topic.topic, part.partition_index)
                if not gather.ok(part.error_code, broker_id=broker_id, topic=key[0], partition=key[1]):
                    continue
                ts = first_batch_timestamp(part.records, wanted.get(key, -1))
                if ts is not None:
                    gather.add(BatchTimestamp(key[0], key[1], wanted[key], ts))
    return gather.result()


def first_batch_timestamp(records: bytes | None, offset: int) -> int | None:
    """Timestamp of the batch holding ``offset``: its first record's CreateTime, or the
    append time on LogAppendTime topics."""
    if not records:
        return None
    from kafka.record import MemoryRecords

    batches = MemoryRecords(records)
    while batches.has_next():
        batch = batches.next_batch()
        if batch is None:
            break
        last_offset = batch.base_offset + batch.last_offset_delta
        if last_offset < offset:
            continue
        if batch.timestamp_type == 1:  # LogAppendTime: the broker stamped the batch
            return int(batch.max_timestamp)
        return int(batch.first_timestamp)
    return None
