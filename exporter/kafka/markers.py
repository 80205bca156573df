"""The two writes of the operator CLI (kafka-python protocol): WriteTxnMarkers(ABORT) to a
partition leader, and InitProducerId(keepPreparedTxn=false) at a coordinator."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.kafka._protocol import ProtocolClient
from exporter.kafka.errors import KafkaRequestError, error_name, error_name_for_code, is_retriable

#: force-terminate asks again while the coordinator answers a retriable error, this long.
FORCE_TERMINATE_RETRY_S = 10.0
FORCE_TERMINATE_BACKOFF_S = 0.2
#: Retriable, but asking the same broker again cannot help: the caller must find the
#: coordinator anew.
_COORDINATOR_MOVED = frozenset({"NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE"})


@dataclass(frozen=True, slots=True)
class AbortSpec:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


def write_abort_marker(client: ProtocolClient, spec: AbortSpec, leader: int, request_timeout_ms: int) -> None:
    """WriteTxnMarkers(ABORT) to the partition leader, as Kafka's admin abort does."""
    from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

    api = "WriteTxnMarkers"
    marker = WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=spec.producer_id,
        producer_epoch=spec.producer_epoch,
        transaction_result=False,
        coordinator_epoch=spec.coordinator_epoch,
        topics=[
            WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic(
                name=spec.topic, partition_indexes=[spec.partition]
            )
        ],
    )
    [(_, _, response)] = client.run(
        client.send_all, [(None, leader, WriteTxnMarkersRequest(markers=[marker]))], request_timeout_ms
    )
    if isinstance(response, BaseException):
        raise KafkaRequestError(api, error_name(response), broker_id=leader, message=str(response))
    for result in response.markers:
        for topic in result.topics:
            for part in topic.partitions:
                if part.error_code != 0:
                    raise KafkaRequestError(api, error_name_for_code(part.error_code), broker_id=leader)


def force_terminate(
    client: ProtocolClient, transactional_id: str, coordinator: int, request_timeout_ms: int
) -> tuple[int, int]:
    """InitProducerId(keepPreparedTxn=false) for the id: fences its producer and aborts its
    open transaction (KIP-939 forceTerminateTransaction). Returns (producer id, epoch).

    The coordinator answers a retriable error (CONCURRENT_TRANSACTIONS while it aborts,
    COORDINATOR_LOAD_IN_PROGRESS) for a while: ask again for up to
    :data:`FORCE_TERMINATE_RETRY_S`. Any other error raises a KafkaRequestError whose
    ``retriable`` says whether the caller may try again (after finding the coordinator anew)."""
    result: tuple[int, int] = client.run(
        _force_terminate, client, transactional_id, coordinator, request_timeout_ms
    )
    return result


async def _force_terminate(
    client: ProtocolClient, transactional_id: str, coordinator: int, request_timeout_ms: int
) -> tuple[int, int]:
    from kafka.protocol.producer.transaction import InitProducerIdRequest

    api = "InitProducerId"
    attempts = int(FORCE_TERMINATE_RETRY_S / FORCE_TERMINATE_BACKOFF_S)
    error = ""
    for _ in range(attempts):
        request = InitProducerIdRequest(
            transactional_id=transactional_id,
            transaction_timeout_ms=60_000,
            producer_id=-1,
            producer_epoch=-1,
            enable2_pc=False,
            keep_prepared_txn=False,
        )
        [(_, _, response)] = await client.send_all([(None, coordinator, request)], request_timeout_ms)
        if isinstance(response, BaseException):
            raise KafkaRequestError(api, error_name(response), broker_id=coordinator, message=str(response))
        if response.error_code == 0:
            return int(response.producer_id), int(response.producer_epoch)
        error = error_name_for_code(response.error_code)
        if not is_retriable(error) or error in _COORDINATOR_MOVED:
            raise KafkaRequestError(api, error, broker_id=coordinator)
        await client.sleep(FORCE_TERMINATE_BACKOFF_S)
    raise KafkaRequestError(
        api,
        error,
        broker_id=coordinator,
        message=f"the coordinator kept answering {error} for {FORCE_TERMINATE_RETRY_S:.0f} s",
    )
