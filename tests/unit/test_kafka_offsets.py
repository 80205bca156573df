"""ListOffsets (high watermark and LSO) on a fake protocol client: what is asked of which
broker, and how answers and failures become rows and errors. The real brokers' side: the
LSO lag against the broker's JMX gauge in tests/integration/test_daemon.py, and many
requests in flight to one leader in tests/integration/test_collection.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from kafka.errors import KafkaConnectionError
from kafka.protocol.consumer.offsets import IsolationLevel, ListOffsetsRequest

from exporter.kafka.offsets import partition_offsets
from exporter.kafka.wire import LIST_OFFSETS_VERSIONS
from exporter.model import PartitionOffsets

Answer = Callable[[int | None, Any], Any]


def on_the_wire(request: Any) -> Any:
    """The request as the broker reads it: its bytes at the newest version we write, decoded
    by kafka-python."""
    version = LIST_OFFSETS_VERSIONS[-1]
    return ListOffsetsRequest.decode(request.encode(version=version), version=version)


class FakeProtocolClient:
    """Answers each request, as the broker reads it (:func:`on_the_wire`), with
    ``answer(broker_id, request)`` (an exception: that request failed) and remembers what was
    sent."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.sent: list[tuple[int | None, Any]] = []

    def run(self, coro: Callable[..., Any], *args: Any) -> Any:
        return coro(*args)

    def send_all(self, requests: Sequence[tuple[Any, int | None, Any]], timeout_ms: int) -> list[Any]:
        replies = []
        for key, broker_id, sent in requests:
            request = on_the_wire(sent)
            self.sent.append((broker_id, request))
            replies.append((key, -1 if broker_id is None else broker_id, self.answer(broker_id, request)))
        return replies


def offsets_answer(
    offsets: dict[tuple[str, int], tuple[int, int]], errors: dict[tuple[str, int], int]
) -> Answer:
    """A leader's ListOffsets answer: (high watermark, LSO) by partition, or an error code."""

    def answer(broker_id: int | None, request: Any) -> Any:
        committed = request.isolation_level == IsolationLevel.READ_COMMITTED
        return SimpleNamespace(
            topics=[
                SimpleNamespace(
                    name=t.name,
                    partitions=[
                        SimpleNamespace(
                            partition_index=p.partition_index,
                            error_code=errors.get((t.name, p.partition_index), 0),
                            offset=offsets.get((t.name, p.partition_index), (-1, -1))[committed],
                        )
                        for p in t.partitions
                    ],
                )
                for t in request.topics
            ]
        )

    return answer


def test_offsets_ask_each_leader_once_per_isolation_level_with_all_its_partitions() -> None:
    leaders = {("a", 0): 1, ("a", 1): 2, ("b", 0): 1}
    client = FakeProtocolClient(offsets_answer({("a", 0): (10, 4), ("a", 1): (7, 7), ("b", 0): (3, 3)}, {}))

    result = partition_offsets(client, leaders, leaders, 5000, None)  # type: ignore[arg-type]

    asked = sorted(
        (
            broker,
            int(r.isolation_level),
            sorted((t.name, p.partition_index) for t in r.topics for p in t.partitions),
        )
        for broker, r in client.sent
    )
    assert asked == [
        (1, 0, [("a", 0), ("b", 0)]),
        (1, 1, [("a", 0), ("b", 0)]),
        (2, 0, [("a", 1)]),
        (2, 1, [("a", 1)]),
    ]
    assert result.errors == ()
    assert list(result.rows) == [
        PartitionOffsets("a", 0, 1, 10, 4),
        PartitionOffsets("a", 1, 2, 7, 7),
        PartitionOffsets("b", 0, 1, 3, 3),
    ]


def test_a_partition_that_could_not_be_read_has_minus_one_and_one_error() -> None:
    leaders = {("a", 0): 1, ("a", 1): 1, ("a", 2): -1, ("b", 0): 2}

    def answer(broker_id: int | None, request: Any) -> Any:
        if broker_id == 2:
            return KafkaConnectionError("connection refused")
        return offsets_answer({("a", 0): (10, 4)}, {("a", 1): 6})(broker_id, request)

    result = partition_offsets(FakeProtocolClient(answer), leaders, leaders, 5000, None)  # type: ignore[arg-type]

    assert [(r.topic, r.partition, r.high_watermark, r.last_stable_offset) for r in result.rows] == [
        ("a", 0, 10, 4),
        ("a", 1, -1, -1),
        ("a", 2, -1, -1),
        ("b", 0, -1, -1),
    ]
    assert sorted((e.topic, e.partition, e.error, e.broker_id) for e in result.errors) == [
        ("a", 1, "NOT_LEADER_OR_FOLLOWER", 1),
        ("a", 2, "LEADER_NOT_AVAILABLE", -1),
        ("b", 0, "BROKER_NOT_AVAILABLE", 2),
    ]
    assert {e.api for e in result.errors} == {"ListOffsets"}


def test_an_answer_without_error_but_without_an_offset_is_offset_not_available() -> None:
    leaders = {("a", 0): 1}
    client = FakeProtocolClient(offsets_answer({}, {}))

    result = partition_offsets(client, leaders, leaders, 5000, None)  # type: ignore[arg-type]

    assert [(e.topic, e.partition, e.error) for e in result.errors] == [("a", 0, "OFFSET_NOT_AVAILABLE")]
