"""What a read_committed consumer gets between a committed offset and the LSO (Fetch
``READ_COMMITTED``), within a byte budget per cycle.

LSO - committed counts every offset, but on a transactional topic some are not records a
read_committed consumer gets: transaction markers (control batches) and the records of
aborted transactions. A consumer that commits "last record + 1" (Spring, Flink, most
frameworks) leaves the markers after its last record between its committed offset and the
LSO, and its lag never reads 0 ("lag stuck at 1"). So the batches in between are read, as the
Java consumer reads them: the Fetch response lists the aborted transactions of the range, and
a transactional batch of a producer inside an aborted range (until its ABORT marker) is
skipped, as is every control batch.

Reading is bounded by ``max_bytes`` per cycle (the config's ``consumable_check_max_bytes``):

* every gap (topic, partition, committed, LSO) with committed < LSO, once per partition from
  its smallest committed offset; partitions an open transaction holds (LSO < HWM: the
  blocked-consumer question) first, then the smaller gaps (cheap, and where "stuck at 1"
  lives);
* in rounds: each round asks every unfinished partition, one Fetch per leader, for at most
  its share (``partition_max_bytes`` at most; a first share from the gap's size, doubled
  while the gap is not read to its end), the shares of a round adding up to the bytes left;
  a partition that returned no whole batch is asked alone next round (a broker returns at
  least one batch to the first partition of a request: KIP-74). The bytes received are
  taken from the budget, which a round can pass by at most one batch per request;
* a gap read to its LSO gives an exact :class:`~exporter.model.ConsumableCheck`; one the
  budget (or the deadline, or :data:`MAX_ROUNDS`) cut gives an upper bound (``exact``
  False): the records counted in what was read plus every offset after it. A partition whose
  Fetch failed gives no check (the pipeline then uses LSO - committed, an upper bound too).

Only the batch headers are read (kafka-python's ``DefaultRecordBatch``: offsets, record
count, producer id, attributes); records are decoded only for a batch a committed offset
falls inside, and for control batches (commit or abort).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.kafka._protocol import ProtocolClient
from exporter.kafka.errors import KafkaUnavailable, error_name, error_name_for_code
from exporter.kafka.results import Collected
from exporter.model import CollectionError, ConsumableCheck, GroupOffset, GroupOffsets, PartitionOffsets

log = logging.getLogger(__name__)

#: Fetch v4 brings isolation levels and aborted transactions; v13 names topics by id only.
_FETCH_VERSIONS = {"min_version": 4, "max_version": 12}
READ_COMMITTED = 1
#: The most a partition is asked for in one Fetch.
PARTITION_MAX_BYTES = 1 << 20
#: A partition's first share: this much per offset of its gap, within these bounds.
FIRST_SHARE_PER_OFFSET = 512
MIN_SHARE = 4 << 10
#: Rounds of Fetches per cycle at most (a gap of many MiB is read 1 MiB a round).
MAX_ROUNDS = 64


@dataclass(frozen=True, slots=True, order=True)
class Gap:
    """A partition's committed offsets below its LSO: what a check reads."""

    topic: str
    partition: int
    #: The committed offsets (of all groups) below the LSO, ascending.
    starts: tuple[int, ...]
    last_stable_offset: int
    high_watermark: int = -1

    @property
    def held(self) -> bool:
        """An open transaction holds the LSO below the high watermark."""
        return 0 <= self.last_stable_offset < self.high_watermark

    @property
    def offsets(self) -> int:
        return self.last_stable_offset - self.starts[0]


def consumable_gaps(offsets: Iterable[GroupOffset], partitions: Iterable[PartitionOffsets]) -> list[Gap]:
    """Every partition with a committed offset below its LSO, in reading order: partitions
    an open transaction holds first, then the smaller gaps."""
    ends = {
        (p.topic, p.partition): (p.last_stable_offset, p.high_watermark)
        for p in partitions
        if p.last_stable_offset >= 0
    }
    _, topics, partition_ids, committed = GroupOffsets.of(offsets).columns()[:4]
    starts: dict[tuple[str, int], set[int]] = defaultdict(set)
    for topic, partition, offset in zip(topics, partition_ids, committed, strict=True):
        end = ends.get((topic, partition))
        if end is not None and 0 <= offset < end[0]:
            starts[(topic, partition)].add(offset)
    gaps = [
        Gap(topic, partition, tuple(sorted(found)), *ends[(topic, partition)])
        for (topic, partition), found in starts.items()
    ]
    return sorted(gaps, key=lambda g: (not g.held, g.offsets, g.topic, g.partition))


@dataclass
class _Reading:
    """One partition's gap as it is read: the consumable records counted from the first
    batch read, and that count at each committed offset (and at the LSO) passed."""

    gap: Gap
    leader: int
    next_offset: int
    share: int
    reached: int = -1  # the last offset of the last whole batch read
    total: int = 0
    counted_at: dict[int, int] = field(default_factory=dict)
    alone: bool = False  # returned no whole batch: asked alone next round
    stalled: bool = False  # returned no whole batch when asked alone: left unfinished
    done: bool = False

    def boundaries(self) -> list[int]:
        return [*self.gap.starts, self.gap.last_stable_offset]


def collect_consumable_checks(
    client: ProtocolClient,
    gaps: Sequence[Gap],
    leaders: Mapping[tuple[str, int], int],
    *,
    max_bytes: int,
    request_timeout_ms: int = 10_000,
    deadline: float | None = None,
    partition_max_bytes: int = PARTITION_MAX_BYTES,
) -> Collected[ConsumableCheck]:
    """A check per (gap, committed offset) for the ``gaps`` (in reading order) that the
    budget of ``max_bytes`` reaches; see the module's docstring."""
    if not gaps or max_bytes <= 0:
        return Collected(())
    try:
        result: Collected[ConsumableCheck] = client.run(
            _read, client, list(gaps), leaders, max_bytes, request_timeout_ms, deadline, partition_max_bytes
        )
    except KafkaUnavailable:
        raise
    except Exception as e:
        return Collected((), (CollectionError("Fetch", error_name(e), message=str(e)[:200]),))
    return result


async def _read(
    client: ProtocolClient,
    gaps: list[Gap],
    leaders: Mapping[tuple[str, int], int],
    max_bytes: int,
    request_timeout_ms: int,
    deadline: float | None,
    partition_max_bytes: int,
) -> Collected[ConsumableCheck]:
    errors: list[CollectionError] = []
    reading: list[_Reading] = []
    for gap in gaps:
        leader = leaders.get((gap.topic, gap.partition), -1)
        if leader < 0:
            errors.append(
                CollectionError("Fetch", "LEADER_NOT_AVAILABLE", topic=gap.topic, partition=gap.partition)
            )
            continue
        first = min(partition_max_bytes, max(MIN_SHARE, gap.offsets * FIRST_SHARE_PER_OFFSET))
        reading.append(_Reading(gap, leader, gap.starts[0], first))
    failed: set[tuple[str, int]] = set()
    left = max_bytes
    rounds = 0
    while left > 0 and rounds < MAX_ROUNDS:
        pending = [
            r for r in reading if not (r.done or r.stalled) and (r.gap.topic, r.gap.partition) not in failed
        ]
        if not pending:
            break
        wait_ms = request_timeout_ms
        if deadline is not None:
            wait_ms = min(wait_ms, int((deadline - time.monotonic()) * 1000))
            if wait_ms < 100:
                break
        asked = _shares(pending, left, partition_max_bytes)
        requests = [(batch, batch[0].leader, _fetch_request(batch)) for batch in _requests(asked)]
        rounds += 1
        for batch, leader, response in await client.send_all(requests, wait_ms):
            if isinstance(response, BaseException):
                errors.append(
                    CollectionError(
                        "Fetch", error_name(response), broker_id=leader, message=str(response)[:200]
                    )
                )
                failed.update((r.gap.topic, r.gap.partition) for r in batch)
                continue
            by_key = {(r.gap.topic, r.gap.partition): r for r in batch}
            for topic in response.responses:
                for part in topic.partitions:
                    r = by_key.get((topic.topic, part.partition_index))
                    if r is None:
                        continue
                    if part.error_code != 0:
                        errors.append(
                            CollectionError(
                                "Fetch",
                                error_name_for_code(part.error_code),
                                broker_id=leader,
                                topic=r.gap.topic,
                                partition=r.gap.partition,
                            )
                        )
                        failed.add((r.gap.topic, r.gap.partition))
                        continue
                    records = part.records or b""
                    left -= len(records)
                    aborted = [(a.producer_id, a.first_offset) for a in (part.aborted_transactions or ())]
                    _advance(r, records, aborted, partition_max_bytes)
    rows: list[ConsumableCheck] = []
    for r in reading:
        if (r.gap.topic, r.gap.partition) not in failed:
            rows.extend(_checks(r))
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "consumable checks: %d gap(s), %d read to the LSO, %d round(s), %d of %d bytes left",
            len(reading),
            sum(r.done for r in reading),
            rounds,
            max(left, 0),
            max_bytes,
        )
    return Collected(tuple(rows), tuple(errors))


def _shares(pending: list[_Reading], left: int, partition_max_bytes: int) -> list[tuple[_Reading, int]]:
    """The partitions asked this round, in reading order, with their shares: the shares add
    up to ``left`` at most."""
    asked: list[tuple[_Reading, int]] = []
    for r in pending:
        share = min(r.share, partition_max_bytes, left)
        if share <= 0:
            break
        asked.append((r, share))
        left -= share
    return asked


def _requests(asked: list[tuple[_Reading, int]]) -> list[list[_Reading]]:
    """One request per leader, in reading order, and one alone for each partition that
    returned no whole batch last round."""
    by_leader: dict[int, list[_Reading]] = defaultdict(list)
    alone: list[list[_Reading]] = []
    for r, share in asked:
        r.share = share
        if r.alone:
            alone.append([r])
        else:
            by_leader[r.leader].append(r)
    return [*by_leader.values(), *alone]


def _fetch_request(batch: list[_Reading]) -> Any:
    from kafka.protocol.consumer.fetch import FetchRequest

    topics: dict[str, list[_Reading]] = defaultdict(list)
    for r in batch:
        topics[r.gap.topic].append(r)
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=sum(r.share for r in batch),
        isolation_level=READ_COMMITTED,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchTopic.FetchPartition(
                        partition=r.gap.partition,
                        current_leader_epoch=-1,
                        fetch_offset=r.next_offset,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=r.share,
                    )
                    for r in parts
                ],
            )
            for topic, parts in topics.items()
        ],
        forgotten_topics_data=[],
        rack_id="",
        **_FETCH_VERSIONS,
    )


def _advance(r: _Reading, records: bytes, aborted: Sequence[tuple[int, int]], most: int) -> None:
    """Count what one Fetch of ``r`` returned, and mark it done once the batches reach its
    LSO. No whole batch (the share was smaller than the next batch, or the request's bytes
    went to the partitions before it): asked alone next round, and left unfinished when it
    returns none then either (the offsets up to the LSO compacted away, the log truncated)."""
    before = r.reached
    for batch in _batches(records, aborted):
        base, last = batch.base, batch.last
        if last < r.next_offset:
            continue
        for boundary in r.boundaries():
            if boundary in r.counted_at or boundary > last:
                continue
            if boundary <= base:
                r.counted_at[boundary] = r.total
            else:  # a committed offset inside the batch: its records before it
                r.counted_at[boundary] = r.total + (batch.before(boundary) if batch.consumable else 0)
        if batch.consumable:
            r.total += batch.count
        r.reached = last
        r.next_offset = last + 1
        if last >= r.gap.last_stable_offset - 1:
            r.done = True
            for boundary in r.boundaries():  # the LSO, when the batch ends just before it
                r.counted_at.setdefault(boundary, r.total)
            return
    if r.reached == before:
        r.stalled = r.alone
        r.alone = True
        return
    r.alone = False
    r.share = min(most, r.share * 2)


def _checks(r: _Reading) -> list[ConsumableCheck]:
    end = r.gap.last_stable_offset
    rows = []
    for start in r.gap.starts:
        if r.done:
            rows.append(
                ConsumableCheck(
                    r.gap.topic, r.gap.partition, start, end, r.counted_at[end] - r.counted_at[start]
                )
            )
            continue
        # Cut before the LSO: what was counted from the start on, and every offset not read.
        counted = r.total - r.counted_at[start] if start in r.counted_at else 0
        unread = end - max(start, r.reached + 1)
        rows.append(ConsumableCheck(r.gap.topic, r.gap.partition, start, end, counted + unread, exact=False))
    return rows


@dataclass(frozen=True, slots=True)
class _Batch:
    base: int
    last: int
    consumable: bool
    count: int
    batch: Any

    def before(self, offset: int) -> int:
        """Records of the batch below ``offset`` (the batch's records decoded)."""
        return sum(1 for record in self.batch if record.offset < offset)


def _batches(records: bytes, aborted: Sequence[tuple[int, int]]) -> Iterable[_Batch]:
    """The whole batches of a READ_COMMITTED Fetch's records, each marked consumable as the
    Java consumer decides: control batches are not, nor transactional batches of a producer
    whose aborted transaction (listed in the response from its first offset) has not yet met
    its ABORT marker."""
    from kafka.record import MemoryRecords

    pending = sorted(aborted, key=lambda a: a[1])
    aborting: set[int] = set()
    batches = MemoryRecords(records)
    while batches.has_next():
        batch = batches.next_batch()
        if batch is None:
            break
        if not hasattr(batch, "is_control_batch"):  # a legacy (v0/v1) batch: never transactional
            offsets = [record.offset for record in batch]
            if offsets:
                yield _Batch(offsets[0], offsets[-1], True, len(offsets), batch)
            continue
        base = batch.base_offset
        last = base + batch.last_offset_delta
        while pending and pending[0][1] <= last:
            aborting.add(pending.pop(0)[0])
        if batch.is_control_batch:
            if batch.producer_id in aborting and any(getattr(record, "abort", False) for record in batch):
                aborting.discard(batch.producer_id)  # the ABORT marker ends the aborted range
            yield _Batch(base, last, False, 0, batch)
            continue
        consumable = not (batch.is_transactional and batch.producer_id in aborting)
        yield _Batch(base, last, consumable, batch.records_count, batch)


def consumable_offsets(records: bytes | None, aborted: Sequence[tuple[int, int]]) -> tuple[list[int], int]:
    """Offsets a read_committed consumer gets from a READ_COMMITTED Fetch's records, and the
    last offset the batches reach (-1 when none): the records of every consumable batch."""
    consumable: list[int] = []
    reached = -1
    for batch in _batches(records or b"", aborted):
        reached = max(reached, batch.last)
        if batch.consumable:
            consumable.extend(record.offset for record in batch.batch)
    return consumable, reached
