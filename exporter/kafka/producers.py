"""Active producers per partition (DescribeProducers, kafka-python protocol)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from exporter.kafka._protocol import ProtocolClient
from exporter.kafka.results import Collected, Gather, timeout_ms
from exporter.model import ProducerState


def describe_producers(
    client: ProtocolClient,
    partitions_by_broker: Mapping[int, Iterable[tuple[str, int]]],
    request_timeout_ms: int,
    deadline: float | None,
) -> Collected[ProducerState]:
    """One request per broker with all its partitions, all in flight together."""
    from kafka.protocol.admin.transactions import DescribeProducersRequest

    gather: Gather[ProducerState] = Gather("DescribeProducers")
    requests = []
    for broker_id, tps in partitions_by_broker.items():
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, partition in tps:
            by_topic[topic].append(partition)
        if by_topic:
            request = DescribeProducersRequest(
                topics=[
                    DescribeProducersRequest.TopicRequest(name=t, partition_indexes=sorted(ps))
                    for t, ps in sorted(by_topic.items())
                ]
            )
            requests.append((broker_id, broker_id, request))
    if not requests:
        return gather.result()
    wait_ms = timeout_ms(request_timeout_ms, deadline, gather.api)
    for broker_id, _, response in client.run(client.send_all, requests, wait_ms):
        if isinstance(response, BaseException):
            gather.fail(response, broker_id=broker_id)
            continue
        for topic in response.topics:
            for part in topic.partitions:
                if not gather.ok(
                    part.error_code,
                    broker_id=broker_id,
                    topic=topic.name,
                    partition=part.partition_index,
                    message=part.error_message,
                ):
                    continue
                gather.add(
                    *(
                        ProducerState(
                            topic=topic.name,
                            partition=part.partition_index,
                            broker_id=broker_id,
                            producer_id=p.producer_id,
                            producer_epoch=p.producer_epoch,
                            last_sequence=p.last_sequence,
                            last_timestamp_ms=p.last_timestamp,
                            coordinator_epoch=p.coordinator_epoch,
                            current_txn_start_offset=p.current_txn_start_offset,
                        )
                        for p in part.active_producers
                    )
                )
    return gather.result()
