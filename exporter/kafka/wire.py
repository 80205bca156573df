"""Kafka messages read from and written to the wire directly, where kafka-python's objects
cost a cycle most: OffsetFetch responses read into columns, ListOffsets requests written.

**OffsetFetch responses (v8-v9) into columns.** kafka-python decodes a response into one
object per group, topic and partition: at 1000 groups x 100 partitions, 100k partition
objects and 0.11-0.16 s on the client's I/O thread, most of the group offsets' collection.
The collector wants columns (partition, committed offset, error code per topic of a group),
so :func:`decode_offset_fetch` reads them from the bytes in one pass, with one ``struct``
call per partition: ~0.03 s for the same response (``tests/unit/test_wire.py`` checks it
against kafka-python's own decoder on the responses kafka-python encodes).
:class:`exporter.kafka._protocol.DecodedBy` hands it the responses.

The layout (Kafka's ``OffsetFetchResponse.json``, flexible versions 6+): every array and
string is "compact" (an unsigned varint of length + 1, 0 for null), and every structure ends
with its tagged fields (a varint count, then tag, size and bytes each)::

    throttle_time_ms int32
    groups [group_id string,
            topics [name string,
                    partitions [partition_index int32, committed_offset int64,
                                committed_leader_epoch int32, metadata nullable string,
                                error_code int16, tags],
                    tags],
            error_code int16, tags]
    tags

**ListOffsets requests (v2-v11) from the topics' partition numbers.** Every collection asks
every partition's latest offset at both isolation levels: at 3000 partitions kafka-python
built 3000 partition objects (3.4 ms) and encoded them (5.3 ms at v11) for each of the two
requests: about 17 ms of the 60-110 ms of Python CPU a collection took.
:func:`encode_list_offsets` writes the same bytes with one ``struct`` call per partition;
:class:`exporter.kafka._protocol.EncodedBy` sends them (``tests/unit/test_wire.py`` checks
them against kafka-python's encoder, header and frame included, at every version). The
layout (Kafka's ``ListOffsetsRequest.json``, flexible versions 6+, non-flexible arrays an
int32 count and strings an int16 length)::

    replica_id int32, isolation_level int8 (v2+),
    topics [name string,
            partitions [partition_index int32, current_leader_epoch int32 (v4+),
                        timestamp int64, tags (v6+)],
            tags (v6+)],
    timeout_ms int32 (v10+), tags (v6+)
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The OffsetFetch versions whose responses this module reads (v10 names topics by id).
OFFSET_FETCH_VERSIONS = range(8, 10)
#: The ListOffsets versions whose requests this module writes (v2 brings the isolation level;
#: kafka-python knows none past 11).
LIST_OFFSETS_VERSIONS = range(2, 12)

_INT16 = struct.Struct(">h").unpack_from
_INT32 = struct.Struct(">i").unpack_from
#: partition_index, committed_offset, committed_leader_epoch
_PARTITION = struct.Struct(">iqi").unpack_from
_PARTITION_SIZE = 16


class MalformedResponseError(ValueError):
    """The bytes end early or do not follow the layout. A ValueError, so that kafka-python's
    reader turns it into its own protocol error for the request, as for its own decoder."""


@dataclass(frozen=True, slots=True)
class TopicOffsets:
    """One topic of one group: a column per partition field the collector reads."""

    name: str
    partitions: list[int]
    committed_offsets: list[int]
    error_codes: list[int]


@dataclass(frozen=True, slots=True)
class GroupOffsetsRead:
    group_id: str
    error_code: int
    topics: list[TopicOffsets]


@dataclass(frozen=True, slots=True)
class OffsetFetchColumns:
    """An OffsetFetch response (``throttle_time_ms`` is read by kafka-python's connection,
    which honours a broker's throttling)."""

    throttle_time_ms: int
    groups: list[GroupOffsetsRead]


def decode_offset_fetch(data: bytes | memoryview) -> OffsetFetchColumns:
    """An OffsetFetch v8-v9 response body (after the response header) as columns."""
    buf = memoryview(data)
    try:
        return _decode(buf)
    except (IndexError, struct.error, UnicodeDecodeError) as e:
        raise MalformedResponseError(f"malformed OffsetFetch response ({len(buf)} bytes): {e}") from e


def columns_of(response: Any) -> OffsetFetchColumns:
    """kafka-python's own decoded OffsetFetch response (v8+) as columns: the same result, for
    a response that reached the collector without this module (its decoder not installed)."""
    return OffsetFetchColumns(
        response.throttle_time_ms,
        [
            GroupOffsetsRead(
                g.group_id,
                g.error_code,
                [
                    TopicOffsets(
                        t.name,
                        [p.partition_index for p in t.partitions],
                        [p.committed_offset for p in t.partitions],
                        [p.error_code for p in t.partitions],
                    )
                    for t in g.topics
                ],
            )
            for g in response.groups
        ],
    )


def _decode(buf: memoryview) -> OffsetFetchColumns:
    (throttle,) = _INT32(buf, 0)
    pos = 4
    count, pos = _length(buf, pos)
    groups: list[GroupOffsetsRead] = []
    for _ in range(count):
        group, pos = _string(buf, pos)
        topic_count, pos = _length(buf, pos)
        topics: list[TopicOffsets] = []
        for _ in range(topic_count):
            name, pos = _string(buf, pos)
            partition_count, pos = _length(buf, pos)
            partitions: list[int] = []
            offsets: list[int] = []
            error_codes: list[int] = []
            for _ in range(partition_count):
                partition, offset, _epoch = _PARTITION(buf, pos)
                pos += _PARTITION_SIZE
                size = buf[pos]  # the metadata: almost always empty (1) or null (0)
                if size < 0x80:
                    pos += 1 + (size - 1 if size else 0)
                else:
                    size, pos = _uvarint(buf, pos)
                    pos += size - 1
                (error,) = _INT16(buf, pos)
                pos += 2
                pos = pos + 1 if buf[pos] == 0 else _skip_tags(buf, pos)
                partitions.append(partition)
                offsets.append(offset)
                error_codes.append(error)
            pos = _skip_tags(buf, pos)
            topics.append(TopicOffsets(name, partitions, offsets, error_codes))
        (error,) = _INT16(buf, pos)
        pos = _skip_tags(buf, pos + 2)
        groups.append(GroupOffsetsRead(group, error, topics))
    pos = _skip_tags(buf, pos)
    if pos != len(buf):
        raise MalformedResponseError(f"malformed OffsetFetch response: {len(buf) - pos} bytes after its end")
    return OffsetFetchColumns(throttle, groups)


def _uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise MalformedResponseError("malformed OffsetFetch response: a varint longer than 5 bytes")


def _length(buf: memoryview, pos: int) -> tuple[int, int]:
    """A compact array's element count (a null array: none)."""
    n, pos = _uvarint(buf, pos)
    return max(n - 1, 0), pos


def _string(buf: memoryview, pos: int) -> tuple[str, int]:
    """A compact string (a null string reads as empty: no field read here is nullable)."""
    n, pos = _uvarint(buf, pos)
    if n <= 1:
        return "", pos
    end = pos + n - 1
    if end > len(buf):
        raise MalformedResponseError("malformed OffsetFetch response: a string runs past the end")
    return str(buf[pos:end], "utf-8"), end


def _skip_tags(buf: memoryview, pos: int) -> int:
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos += size
    return pos


_PACK_INT32 = struct.Struct(">i").pack
_PACK_INT16 = struct.Struct(">h").pack
#: replica_id, isolation_level
_LIST_OFFSETS_HEAD = struct.Struct(">ib").pack
#: partition_index, current_leader_epoch (-1: not known), timestamp; then, flexible, no tags
_OFFSETS_PARTITION = {
    (False, False): struct.Struct(">iq").pack,
    (True, False): struct.Struct(">iiq").pack,
    (True, True): struct.Struct(">iiqB").pack,
}
_NO_LEADER_EPOCH = -1
_CONSUMER_REPLICA_ID = -1
_NO_TIMEOUT_MS = 0


def encode_list_offsets(
    version: int,
    isolation_level: int,
    topics: Mapping[str, Sequence[int]],
    timestamp: int,
) -> bytes:
    """The body of a ListOffsets request at ``version`` (in :data:`LIST_OFFSETS_VERSIONS`):
    ``timestamp`` (an offset spec such as -1, the latest) for every partition of ``topics``
    (name -> partition numbers), in their order, as a consumer asks (replica id -1). The
    timeout (v10+) is kafka-python's default, 0: the broker waits only for offsets in tiered
    storage, which a latest offset never is."""
    if version not in LIST_OFFSETS_VERSIONS:
        raise ValueError(f"ListOffsets v{version} is not written here (v2-v{LIST_OFFSETS_VERSIONS[-1]} are)")
    flexible = version >= 6
    epoch = version >= 4
    pack = _OFFSETS_PARTITION[(epoch, flexible)]
    parts = [_LIST_OFFSETS_HEAD(_CONSUMER_REPLICA_ID, isolation_level), _count(len(topics), flexible)]
    for name, partitions in topics.items():
        parts.append(_name(name, flexible))
        parts.append(_count(len(partitions), flexible))
        if flexible:
            parts.extend(pack(p, _NO_LEADER_EPOCH, timestamp, 0) for p in partitions)
            parts.append(b"\0")
        elif epoch:
            parts.extend(pack(p, _NO_LEADER_EPOCH, timestamp) for p in partitions)
        else:
            parts.extend(pack(p, timestamp) for p in partitions)
    if version >= 10:
        parts.append(_PACK_INT32(_NO_TIMEOUT_MS))
    if flexible:
        parts.append(b"\0")
    return b"".join(parts)


def _count(n: int, flexible: bool) -> bytes:
    """An array's length: compact (a varint of n + 1) or an int32."""
    return _uvarint_bytes(n + 1) if flexible else _PACK_INT32(n)


def _name(name: str, flexible: bool) -> bytes:
    """A string: compact (a varint of its length + 1) or with an int16 length."""
    data = name.encode("utf-8")
    return (_uvarint_bytes(len(data) + 1) if flexible else _PACK_INT16(len(data))) + data


def _uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
