"""OffsetFetch responses read from the wire into columns, and ListOffsets requests written to
it (exporter.kafka.wire), against kafka-python's own encoder and decoder of the same
messages."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.broker_version_data import BrokerVersionData
from kafka.protocol.consumer.group import OffsetFetchRequest, OffsetFetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse, OffsetSpec

from exporter.kafka.groups import _offset_fetch_request
from exporter.kafka.offsets import list_offsets_request
from exporter.kafka.wire import (
    LIST_OFFSETS_VERSIONS,
    OFFSET_FETCH_VERSIONS,
    GroupOffsetsRead,
    MalformedResponseError,
    OffsetFetchColumns,
    TopicOffsets,
    columns_of,
    decode_offset_fetch,
    encode_list_offsets,
)

Group = OffsetFetchResponse.OffsetFetchResponseGroup
Topic = Group.OffsetFetchResponseTopics
Partition = Topic.OffsetFetchResponsePartitions


def response(version: int) -> OffsetFetchResponse:
    """Groups with several topics, an error on a partition and on a group, null, empty and
    long metadata (a length of two varint bytes), negative and large offsets."""

    def partition(index: int, offset: int, metadata: str | None = "", error: int = 0) -> Any:
        return Partition(
            partition_index=index,
            committed_offset=offset,
            committed_leader_epoch=index % 3 - 1,
            metadata=metadata,
            error_code=error,
        )

    return OffsetFetchResponse(
        throttle_time_ms=25,
        groups=[
            Group(
                group_id="orders-enricher",
                topics=[
                    Topic(name="orders", partitions=[partition(p, 1000 + p) for p in range(5)]),
                    Topic(
                        name="payments",
                        partitions=[
                            partition(0, -1, metadata=None),
                            partition(1, 2**40, metadata="m" * 300),
                            partition(2, -1, error=88),  # UNSTABLE_OFFSET_COMMIT
                        ],
                    ),
                ],
                error_code=0,
            ),
            Group(group_id="gone", topics=[], error_code=16),
            Group(group_id="ünïcode-grøup", topics=[Topic(name="t", partitions=[])], error_code=0),
        ],
        version=version,
    )


@pytest.mark.parametrize("version", list(OFFSET_FETCH_VERSIONS))
def test_the_wire_reader_reads_what_kafka_python_reads(version: int) -> None:
    data = response(version).encode(version=version)
    expected = columns_of(OffsetFetchResponse.decode(data, version=version))
    assert decode_offset_fetch(data) == expected
    assert expected.groups[0].topics[1].error_codes == [0, 0, 88]
    assert expected.groups[1].error_code == 16


def test_tagged_fields_are_skipped_wherever_a_structure_ends() -> None:
    def uvarint(n: int) -> bytes:
        out = b""
        while n >= 0x80:
            out += bytes([n & 0x7F | 0x80])
            n >>= 7
        return out + bytes([n])

    def string(s: str) -> bytes:
        return uvarint(len(s.encode()) + 1) + s.encode()

    tag = uvarint(1) + uvarint(7) + uvarint(3) + b"xyz"  # one tagged field: tag 7, 3 bytes
    partition = (
        (3).to_bytes(4, "big")
        + (42).to_bytes(8, "big")
        + (-1).to_bytes(4, "big", signed=True)
        + string("")
        + (0).to_bytes(2, "big")
        + tag
    )
    topic = string("t") + uvarint(2) + partition + tag
    group = string("g") + uvarint(2) + topic + (0).to_bytes(2, "big") + tag
    data = (0).to_bytes(4, "big") + uvarint(2) + group + tag
    assert decode_offset_fetch(data) == OffsetFetchColumns(
        0, [GroupOffsetsRead("g", 0, [TopicOffsets("t", [3], [42], [0])])]
    )


def test_bytes_that_end_early_or_run_on_are_a_value_error_naming_the_response() -> None:
    data = response(8).encode(version=8)
    for broken in (data[:-3], data[: len(data) // 2], data + b"\x00\x00"):
        with pytest.raises(MalformedResponseError, match="malformed OffsetFetch response"):
            decode_offset_fetch(broken)
    assert issubclass(MalformedResponseError, ValueError)  # kafka-python's reader catches it


def test_only_the_collectors_own_requests_are_read_into_columns() -> None:
    """The wire reader is attached to the OffsetFetch requests the collector sends, never to
    kafka-python's registry: every other OffsetFetch of the process (kafka-python's own
    ``list_group_offsets``) is decoded by kafka-python."""
    for version in OFFSET_FETCH_VERSIONS:
        ours = _offset_fetch_request({"g": None}, stable=True)
        group = OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g", topics=None)
        theirs = OffsetFetchRequest(groups=[group], require_stable=True)
        for request in (ours, theirs):
            request.API_VERSION = version  # as the connection negotiates it
            request.with_header(correlation_id=7, client_id="test")
        assert ours.encode(framed=True, header=True) == theirs.encode(framed=True, header=True)
        data = response(version).encode(version=version)
        assert ours.header.correlation_id == 7
        assert ours.header.get_response_class().decode(data) == decode_offset_fetch(data)
        assert isinstance(theirs.header.get_response_class().decode(data), OffsetFetchResponse)
    # kafka-python's own response class (a proxy to it) is still the one registered
    registered = ResponseClassRegistry._response_class_registry[OffsetFetchResponse.API_KEY]
    assert registered.__name__.startswith(OffsetFetchResponse.__name__)


#: Partition lists whose compact lengths take one and two varint bytes, a topic name as long
#: as Kafka allows (249: a two-byte compact length), a topic of one partition.
LIST_OFFSETS_TOPICS = {
    "bench-txn": list(range(200)),
    "t" * 249: [0, 7, 2**31 - 1],
    "one": [5],
}


def kafka_pythons_list_offsets(isolation_level: int, timestamp: int) -> ListOffsetsRequest:
    topic = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=[
            topic(
                name=t,
                partitions=[topic.ListOffsetsPartition(partition_index=p, timestamp=timestamp) for p in ps],
            )
            for t, ps in LIST_OFFSETS_TOPICS.items()
        ],
    )


@pytest.mark.parametrize("isolation_level", [0, 1])
@pytest.mark.parametrize("version", list(LIST_OFFSETS_VERSIONS))
def test_a_list_offsets_request_is_the_bytes_kafka_python_writes_header_and_frame_included(
    version: int, isolation_level: int
) -> None:
    ours = list_offsets_request(isolation_level, LIST_OFFSETS_TOPICS, OffsetSpec.LATEST)
    theirs = kafka_pythons_list_offsets(isolation_level, OffsetSpec.LATEST)
    for request in (ours, theirs):  # as kafka-python's connection sends a request
        request.API_VERSION = version
        request.with_header(correlation_id=4242, client_id="kafka-txn-exporter")
    assert ours.encode(framed=True, header=True) == theirs.encode(framed=True, header=True)
    assert ours.header.request_api_version == version
    assert ours.expect_response()


def test_the_written_body_is_the_body_kafka_python_writes_for_any_timestamp() -> None:
    for timestamp in (OffsetSpec.EARLIEST, OffsetSpec.LATEST, 1_700_000_000_000):
        theirs = kafka_pythons_list_offsets(1, timestamp)
        for version in LIST_OFFSETS_VERSIONS:
            assert encode_list_offsets(version, 1, LIST_OFFSETS_TOPICS, timestamp) == theirs.encode(
                version=version
            )


def test_a_list_offsets_request_is_negotiated_only_to_a_version_it_writes() -> None:
    request = list_offsets_request(1, {"t": [0]}, OffsetSpec.LATEST)
    newer_broker = BrokerVersionData(api_versions={ListOffsetsRequest.API_KEY: (1, 15)})
    older_broker = BrokerVersionData(api_versions={ListOffsetsRequest.API_KEY: (0, 4)})
    assert newer_broker.api_version(request) == LIST_OFFSETS_VERSIONS[-1]
    assert older_broker.api_version(request) == 4
    request.API_VERSION = 1  # no isolation level: the LSO cannot be asked
    with pytest.raises(ValueError, match="v1 is not written here"):
        request.encode(framed=True, header=True)


def test_the_answer_to_a_written_request_is_decoded_by_kafka_python() -> None:
    request = list_offsets_request(1, {"t": [0]}, OffsetSpec.LATEST)
    request.API_VERSION = 11
    request.with_header(correlation_id=1, client_id="x")
    assert request.header.get_response_class() is ListOffsetsResponse[11]
