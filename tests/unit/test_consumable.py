"""What a read_committed consumer gets between committed offsets and the LSO, counted from
record batches as a READ_COMMITTED Fetch returns them (exporter.kafka.consumable), on batches
built here: data batches (transactional or not), commit and abort markers. The same logic
against a real broker and a real read_committed consumer: tests/integration/
test_groups_collection.py."""

from __future__ import annotations

import struct

from kafka.record.default_records import DefaultRecordBatchBuilder

from exporter.kafka.consumable import Gap, _advance, _checks, _Reading, consumable_offsets
from exporter.model import ConsumableCheck

TOPIC = "t"
ABORT, COMMIT = 0, 1
#: Byte offsets of a v2 batch header's fields (Kafka's DefaultRecordBatch).
BASE_OFFSET, ATTRIBUTES = 0, 21
CONTROL_BIT = 0x20


def batch(base: int, records: int, *, pid: int = -1, control: int | None = None) -> bytes:
    """A v2 batch at ``base``: ``records`` data records, transactional when ``pid`` >= 0, or
    one control record (ABORT or COMMIT) of producer ``pid``."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=pid >= 0, producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1, batch_size=1 << 20,
    )  # fmt: skip
    if control is not None:
        builder.append(0, timestamp=1, key=struct.pack(">hh", 0, control), value=b"\0\0\0\0\0\0", headers=[])
    else:
        for i in range(records):
            builder.append(i, timestamp=1, key=None, value=b"v", headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, BASE_OFFSET, base)
    if control is not None:
        (attributes,) = struct.unpack_from(">h", data, ATTRIBUTES)
        struct.pack_into(">h", data, ATTRIBUTES, attributes | CONTROL_BIT)  # the CRC is not read
    return bytes(data)


#: offsets 0-1 committed transaction of producer 7, its marker at 2; 3-4 aborted transaction of
#: producer 8, its marker at 5; 6-7 plain records; 8 a transaction of 7 still open (the LSO).
LOG = [
    batch(0, 2, pid=7),
    batch(2, 1, pid=7, control=COMMIT),
    batch(3, 2, pid=8),
    batch(5, 1, pid=8, control=ABORT),
    batch(6, 2),
]
ABORTED = [(8, 3)]  # (producer id, first offset) as the Fetch response lists them


def read(gap: Gap, *fetches: bytes, aborted: list[tuple[int, int]] = ABORTED) -> list[ConsumableCheck]:
    reading = _Reading(gap, leader=1, next_offset=gap.starts[0], share=1 << 20)
    for records in fetches:
        _advance(reading, records, aborted, 1 << 20)
    return _checks(reading)


def test_markers_and_aborted_records_are_not_consumable_and_each_committed_offset_gets_its_count() -> None:
    checks = read(Gap(TOPIC, 0, (0, 1, 2, 3, 6), 8, 9), b"".join(LOG))
    assert [(c.from_offset, c.consumable_records, c.exact) for c in checks] == [
        (0, 4, True),
        (1, 3, True),  # inside the first batch: record 1 and the two plain ones
        (2, 2, True),
        (3, 2, True),
        (6, 2, True),
    ]
    assert consumable_offsets(b"".join(LOG), ABORTED) == ([0, 1, 6, 7], 7)


def test_a_committed_offset_before_trailing_markers_has_nothing_to_read() -> None:
    """The consumer that commits its last record + 1 (2, the commit marker) behind the
    transaction at 3: nothing consumable before that LSO."""
    assert read(Gap(TOPIC, 0, (2,), 3, 9), LOG[1]) == [ConsumableCheck(TOPIC, 0, 2, 3, 0)]


def test_a_gap_read_over_several_fetches_is_counted_the_same() -> None:
    assert read(Gap(TOPIC, 0, (0, 3), 8, 9), b"".join(LOG[:2]), b"".join(LOG[2:4]), LOG[4]) == read(
        Gap(TOPIC, 0, (0, 3), 8, 9), b"".join(LOG)
    )


def test_a_gap_not_read_to_its_lso_is_an_upper_bound_counting_every_offset_not_read() -> None:
    checks = read(Gap(TOPIC, 0, (0, 6), 8, 9), b"".join(LOG[:3]))  # read up to offset 4
    assert [(c.from_offset, c.consumable_records, c.exact) for c in checks] == [
        (0, 2 + 3, False),  # records 0-1 counted, offsets 5-7 not read
        (6, 2, False),
    ]


def test_a_partition_that_returns_no_whole_batch_is_asked_alone_then_left_unfinished() -> None:
    reading = _Reading(Gap(TOPIC, 0, (0,), 8, 9), leader=1, next_offset=0, share=64)
    _advance(reading, LOG[0][:30], ABORTED, 1 << 20)  # a partial batch: nothing whole
    assert (reading.alone, reading.stalled, reading.done) == (True, False, False)
    _advance(reading, b"", ABORTED, 1 << 20)
    assert (reading.stalled, reading.done) == (True, False)
    assert _checks(reading) == [ConsumableCheck(TOPIC, 0, 0, 8, 8, exact=False)]


def test_an_aborted_range_ends_at_its_abort_marker() -> None:
    """Producer 8 aborts (3-4, marker 5), then writes again in a transaction that commits:
    those records are consumable."""
    log = [*LOG[2:4], batch(6, 3, pid=8), batch(9, 1, pid=8, control=COMMIT)]
    assert read(Gap(TOPIC, 0, (3,), 10, 10), b"".join(log)) == [ConsumableCheck(TOPIC, 0, 3, 10, 3)]
