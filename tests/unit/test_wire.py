"""OffsetFetch responses read from the wire into columns (exporter.kafka.wire), against
kafka-python's own encoder and decoder of the same responses."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.api_header import RequestHeader, ResponseClassRegistry
from kafka.protocol.consumer.group import OffsetFetchResponse

from exporter.kafka._protocol import decode_with
from exporter.kafka.groups import _read_offset_fetch_as_columns
from exporter.kafka.wire import (
    OFFSET_FETCH_VERSIONS,
    GroupOffsetsRead,
    MalformedResponseError,
    OffsetFetchColumns,
    TopicOffsets,
    columns_of,
    decode_offset_fetch,
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


def test_kafka_python_hands_offset_fetch_v8_and_v9_to_the_wire_reader_and_decodes_the_rest() -> None:
    _read_offset_fetch_as_columns()
    _read_offset_fetch_as_columns()  # idempotent

    def decoder(version: int) -> object:
        header = RequestHeader(
            request_api_key=OffsetFetchResponse.API_KEY,
            request_api_version=version,
            correlation_id=1,
            client_id="test",
        )
        return ResponseClassRegistry.get_response_class(header)

    for version in OFFSET_FETCH_VERSIONS:
        data = response(version).encode(version=version)
        # making versioned classes (kafka-python re-registers each) leaves the reader in place
        OffsetFetchResponse.decode(data, version=version)
        assert isinstance(decoder(version).decode(data), OffsetFetchColumns)  # type: ignore[attr-defined]
    assert decoder(7) is OffsetFetchResponse[7]
    # installing the same reader again leaves one layer
    decode_with(OffsetFetchResponse, OFFSET_FETCH_VERSIONS, decode_offset_fetch)
    assert decoder(7) is OffsetFetchResponse[7]
