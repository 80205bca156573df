"""Consumer groups: committed offsets on monitored topics and pending transactional commits
(what lies between a committed offset and the LSO is read by ``exporter.kafka.consumable``).

Requests, over kafka-python's protocol layer (the client ``ClusterAdmin`` builds):

1. ``ListGroups`` to every broker, all in flight together. A broker lists exactly the groups
   it coordinates (with their state, v4+), so no FindCoordinator is needed.
2. ``OffsetFetch`` v8+ to each coordinator with all its groups in one request (chunked at
   ``max_groups_per_request``), ``RequireStable`` set: a partition with a pending
   transactional offset commit answers ``UNSTABLE_OFFSET_COMMIT`` instead of an offset.
3. For those partitions only, ``OffsetFetch`` again without ``RequireStable`` (one request per
   coordinator that had any), to read the last committed offset.

So a cycle costs brokers + coordinators (+ coordinators with pending commits) requests,
whatever the number of groups and partitions. Every failure becomes a
:class:`~exporter.model.CollectionError` next to what was read; nothing raises for the batch.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from exporter.kafka._protocol import DecodedBy, ProtocolClient
from exporter.kafka.admin import Collected
from exporter.kafka.errors import KafkaUnavailable, error_name, error_name_for_code
from exporter.kafka.wire import (
    OFFSET_FETCH_VERSIONS,
    OffsetFetchColumns,
    TopicOffsets,
    columns_of,
    decode_offset_fetch,
)
from exporter.model import CollectionError, GroupOffsets

log = logging.getLogger(__name__)
K = TypeVar("K")

UNSTABLE_OFFSET_COMMIT = "UNSTABLE_OFFSET_COMMIT"
#: Group types that keep no consumer offsets to read.
_SKIPPED_GROUP_TYPES = frozenset({"share"})
_SKIPPED_PROTOCOL_TYPES = frozenset({"connect"})
#: OffsetFetch v8 (Kafka 3.0) batches groups; v10 names topics by id only. Their responses
#: are read into columns by exporter.kafka.wire.
_OFFSET_FETCH_VERSIONS = {"min_version": OFFSET_FETCH_VERSIONS[0], "max_version": OFFSET_FETCH_VERSIONS[-1]}


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group: str
    coordinator_id: int
    state: str
    protocol_type: str
    group_type: str


class _Requests:
    """Send requests to brokers concurrently through the one seam to kafka-python
    (:class:`exporter.kafka._protocol.ProtocolClient`)."""

    def __init__(self, client: ProtocolClient, request_timeout_ms: int) -> None:
        self.client = client
        self.timeout_ms = request_timeout_ms

    def run(self, coro: Callable[..., Any], *args: Any) -> Any:
        return self.client.run(coro, *args)

    async def send_all(self, requests: Sequence[tuple[K, int, Any]]) -> list[tuple[K, int, Any]]:
        return await self.client.send_all(requests, self.timeout_ms)


def collect_group_offsets(
    client: Any,
    *,
    broker_ids: Iterable[int],
    topic_filter: Callable[[str], bool],
    group_filter: Callable[[str], bool] = lambda _: True,
    request_timeout_ms: int = 10_000,
    max_groups_per_request: int = 500,
) -> Collected[GroupOffsets]:
    """Committed offsets, on topics passing ``topic_filter``, of the groups passing
    ``group_filter``, as one block of columns (``rows``: that block, or none when nothing
    was read; :func:`offsets_of`). ``client`` is kafka-python's ``KafkaAdminClient``."""
    requests = _Requests(client, request_timeout_ms)
    try:
        result: Collected[GroupOffsets] = requests.run(
            _collect,
            requests,
            sorted(set(broker_ids)),
            topic_filter,
            group_filter,
            max(1, max_groups_per_request),
        )
    except KafkaUnavailable:
        raise
    except Exception as e:  # a broken client: the whole stage is lost, the cycle goes on
        return Collected((), (CollectionError("OffsetFetch", error_name(e), message=str(e)[:200]),))
    return result


def offsets_of(collected: Collected[GroupOffsets]) -> GroupOffsets:
    """The offsets :func:`collect_group_offsets` read (none when it read nothing)."""
    return collected.rows[0] if collected.rows else GroupOffsets()


async def _collect(
    requests: _Requests,
    broker_ids: list[int],
    topic_filter: Callable[[str], bool],
    group_filter: Callable[[str], bool],
    chunk: int,
) -> Collected[GroupOffsets]:
    listed, errors = await _list_groups(requests, broker_ids)
    wanted = [
        g
        for g in listed
        if group_filter(g.group)
        and g.group_type not in _SKIPPED_GROUP_TYPES
        and g.protocol_type not in _SKIPPED_PROTOCOL_TYPES
    ]
    by_coordinator: dict[int, list[ListedGroup]] = defaultdict(list)
    for g in wanted:
        by_coordinator[g.coordinator_id].append(g)
    fetch = [
        (
            tuple(groups[i : i + chunk]),
            coordinator,
            _offset_fetch_request({g.group: None for g in groups[i : i + chunk]}, stable=True),
        )
        for coordinator, groups in sorted(by_coordinator.items())
        for i in range(0, len(groups), chunk)
    ]
    # A group two coordinators list (while it moves) is read from both; its rows keep the
    # last read, as before.
    listings = Counter(g.group for g in wanted)
    columns = _OffsetColumns(frozenset(g for g, n in listings.items() if n > 1))
    unstable: dict[int, dict[str, dict[str, list[int]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    info = {g.group: g for g in wanted}
    for _, coordinator, response in await requests.send_all(fetch):
        # Per (group, topic): the filter, the group's state; a topic without errors goes into
        # the columns as the response's columns (at 1000 groups x 100, this loop and its 100k
        # records took over half the collection's CPU when it did all of it per partition,
        # and a record per row 0.14 s).
        for group, topic, partitions in _offset_topics(response, coordinator, errors):
            if not topic_filter(topic):
                continue
            listed_group = info.get(group)
            state = listed_group.state if listed_group else ""
            if not any(partitions.error_codes):
                columns.add_columns(group, topic, coordinator, state, partitions)
                continue
            read: list[tuple[int, int, bool]] = []
            for partition, offset, code in zip(
                partitions.partitions, partitions.committed_offsets, partitions.error_codes, strict=True
            ):
                if not code:
                    read.append((partition, offset, False))
                    continue
                failure = error_name_for_code(code)
                if failure != UNSTABLE_OFFSET_COMMIT:
                    errors.append(_partition_error(failure, coordinator, topic, partition, f"group {group}"))
                    continue
                unstable[coordinator][group][topic].append(partition)
                read.append((partition, -1, True))
            columns.add_topic(group, topic, coordinator, state, read)
    if unstable:
        # The committed offset behind a pending transactional commit: read it unstable.
        refetch = [
            (
                None,
                coordinator,
                _offset_fetch_request(
                    {group: dict(topics) for group, topics in groups.items()}, stable=False
                ),
            )
            for coordinator, groups in sorted(unstable.items())
        ]
        where = columns.index()
        for _, coordinator, response in await requests.send_all(refetch):
            for group, topic, partition, offset, error in _offset_rows(response, coordinator, errors):
                at = where.get((group, topic, partition))
                if at is None:
                    continue
                if error is not None:
                    behind = f"group {group}: the offset behind its pending transactional commit"
                    errors.append(_partition_error(error, coordinator, topic, partition, behind))
                else:
                    columns.set_committed(at, offset)
    block = columns.done()
    return Collected((block,) if block else (), tuple(errors))


class _OffsetColumns:
    """The columns of :class:`~exporter.model.GroupOffsets` as the responses fill them, a
    topic of a group at a time. A row of a group in ``repeated`` (listed by two coordinators)
    read twice is kept once, with its last read."""

    def __init__(self, repeated: frozenset[str] = frozenset()) -> None:
        self._columns: tuple[list[Any], ...] = tuple([] for _ in GroupOffsets.FIELDS)
        self._repeated = repeated
        self._seen: dict[tuple[str, str, int], int] = {}

    def add_topic(
        self, group: str, topic: str, coordinator: int, state: str, read: list[tuple[int, int, bool]]
    ) -> None:
        """``read``: (partition, committed offset, pending transactional commit) of the topic."""
        groups, _, _, offsets, coordinators, states, pending = self._columns
        if group in self._repeated:
            for partition, offset, unstable in read:
                at = self._seen.get((group, topic, partition))
                if at is not None:
                    offsets[at], coordinators[at], states[at], pending[at] = (
                        offset,
                        coordinator,
                        state,
                        unstable,
                    )
                    continue
                self._seen[(group, topic, partition)] = len(groups)
                for column, value in zip(
                    self._columns,
                    (group, topic, partition, offset, coordinator, state, unstable),
                    strict=True,
                ):
                    column.append(value)
            return
        self._extend(
            group,
            topic,
            coordinator,
            state,
            [partition for partition, _, _ in read],
            [offset for _, offset, _ in read],
            [unstable for _, _, unstable in read],
        )

    def add_columns(self, group: str, topic: str, coordinator: int, state: str, read: TopicOffsets) -> None:
        """A topic read without errors (so no pending transactional commit)."""
        if group in self._repeated:
            rows = [
                (partition, offset, False)
                for partition, offset in zip(read.partitions, read.committed_offsets, strict=True)
            ]
            self.add_topic(group, topic, coordinator, state, rows)
            return
        pending = [False] * len(read.partitions)
        self._extend(group, topic, coordinator, state, read.partitions, read.committed_offsets, pending)

    def _extend(
        self,
        group: str,
        topic: str,
        coordinator: int,
        state: str,
        partitions: list[int],
        offsets: list[int],
        pending: list[bool],
    ) -> None:
        n = len(partitions)
        values: tuple[list[Any], ...] = (
            [group] * n,
            [topic] * n,
            partitions,
            offsets,
            [coordinator] * n,
            [state] * n,
            pending,
        )
        for column, more in zip(self._columns, values, strict=True):
            column.extend(more)

    def index(self) -> dict[tuple[str, str, int], int]:
        """Each row's position by (group, topic, partition)."""
        groups, topics, partitions = self._columns[:3]
        return {key: i for i, key in enumerate(zip(groups, topics, partitions, strict=True))}

    def set_committed(self, at: int, offset: int) -> None:
        """The offset behind a pending transactional commit, on the row at ``at``."""
        self._columns[3][at] = offset

    def done(self) -> GroupOffsets:
        return GroupOffsets(self._columns)


def _partition_error(
    error: str, coordinator: int, topic: str, partition: int, message: str
) -> CollectionError:
    """An OffsetFetch error for one partition of one group."""
    return CollectionError(
        "OffsetFetch", error, broker_id=coordinator, topic=topic, partition=partition, message=message
    )


async def _list_groups(
    requests: _Requests, broker_ids: list[int]
) -> tuple[list[ListedGroup], list[CollectionError]]:
    from kafka.protocol.admin.groups import ListGroupsRequest

    listed: list[ListedGroup] = []
    errors: list[CollectionError] = []
    sent = [(b, b, ListGroupsRequest(states_filter=[], types_filter=[])) for b in broker_ids]
    for broker_id, _, response in await requests.send_all(sent):
        if isinstance(response, BaseException):
            errors.append(
                CollectionError(
                    "ListGroups", error_name(response), broker_id=broker_id, message=str(response)[:200]
                )
            )
            continue
        if response.error_code != 0:
            errors.append(
                CollectionError("ListGroups", error_name_for_code(response.error_code), broker_id=broker_id)
            )
            continue
        listed.extend(
            ListedGroup(
                group=g.group_id,
                coordinator_id=broker_id,
                state=getattr(g, "group_state", "") or "",
                protocol_type=g.protocol_type or "",
                group_type=(getattr(g, "group_type", "") or "").lower(),
            )
            for g in response.groups
        )
    return listed, errors


def _offset_fetch_request(groups: Mapping[str, Mapping[str, list[int]] | None], *, stable: bool) -> Any:
    from kafka.protocol.consumer.group import OffsetFetchRequest

    group_type = OffsetFetchRequest.OffsetFetchRequestGroup
    topic_type = group_type.OffsetFetchRequestTopics
    # Its response read into columns by exporter.kafka.wire: this request's only.
    request = OffsetFetchRequest(
        groups=[
            group_type(
                group_id=group,
                topics=None
                if topics is None
                else [topic_type(name=t, partition_indexes=sorted(ps)) for t, ps in sorted(topics.items())],
            )
            for group, topics in groups.items()
        ],
        require_stable=stable,
        **_OFFSET_FETCH_VERSIONS,
    )
    return DecodedBy(request, OFFSET_FETCH_VERSIONS, decode_offset_fetch)


def _offset_topics(
    response: Any, coordinator: int, errors: list[CollectionError]
) -> Iterable[tuple[str, str, TopicOffsets]]:
    """(group, topic, the topic's partition columns) of one response (read by
    exporter.kafka.wire); request- and group-level failures go to ``errors``."""
    if isinstance(response, BaseException):
        errors.append(
            CollectionError(
                "OffsetFetch", error_name(response), broker_id=coordinator, message=str(response)[:200]
            )
        )
        return
    if not isinstance(response, OffsetFetchColumns):  # read by kafka-python after all
        response = columns_of(response)
    for group in response.groups:
        if group.error_code != 0:
            errors.append(
                CollectionError(
                    "OffsetFetch",
                    error_name_for_code(group.error_code),
                    broker_id=coordinator,
                    message=f"group {group.group_id}",
                )
            )
            continue
        for topic in group.topics:
            yield group.group_id, topic.name, topic


def _offset_rows(
    response: Any, coordinator: int, errors: list[CollectionError]
) -> Iterable[tuple[str, str, int, int, str | None]]:
    """(group, topic, partition, committed offset, error name or None) of one response;
    request- and group-level failures go to ``errors``."""
    for group, topic, read in _offset_topics(response, coordinator, errors):
        columns = zip(read.partitions, read.committed_offsets, read.error_codes, strict=True)
        for partition, offset, code in columns:
            yield group, topic, partition, offset, error_name_for_code(code) if code else None
