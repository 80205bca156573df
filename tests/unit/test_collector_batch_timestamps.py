"""The collector's batch-timestamp cache: a start batch is read once; one that cannot be read
(retention passed it) is not asked for again, while a retriable failure (a leader move, a
timeout) is tried again for a few cycles instead of leaving the transaction to the
LastTimestamp fallback until it closes."""

from __future__ import annotations

from typing import cast

import pytest

from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.collector import FETCH_ATTEMPTS, SnapshotCollector
from exporter.kafka.metadata import ClusterMetadata
from exporter.kafka.results import Collected
from exporter.model import BatchTimestamp, CollectionError, ProducerState

OPEN = ProducerState("t", 0, 1, 4000, 3, 5, 1_000, 7, 120)
METADATA = ClusterMetadata(brokers=(), leaders={("t", 0): 1})


def _collector() -> SnapshotCollector:
    return SnapshotCollector(cluster="c", admin=cast(ClusterAdmin, object()))


def _failed(error: str) -> Collected[BatchTimestamp]:
    return Collected((), (CollectionError(api="Fetch", error=error, broker_id=1, topic="t", partition=0),))


@pytest.mark.parametrize(
    ("error", "asked_again"),
    [("NOT_LEADER_OR_FOLLOWER", True), ("REQUEST_TIMED_OUT", True), ("OFFSET_OUT_OF_RANGE", False)],
)
def test_a_start_batch_is_asked_for_again_only_after_a_retriable_failure(
    error: str, asked_again: bool
) -> None:
    collector = _collector()
    plan = collector._plan_batch_timestamps(METADATA, (OPEN,), ())
    assert plan == {1: [("t", 0, 120)]}
    collector._merge_batch_timestamps(plan, _failed(error))
    again = collector._plan_batch_timestamps(METADATA, (OPEN,), ())
    assert again == ({1: [("t", 0, 120)]} if asked_again else {})


def test_a_start_batch_failing_with_a_retriable_error_is_asked_for_a_few_cycles_only() -> None:
    """A fetch that keeps failing (a storage error, a stale leader) must not make every cycle
    partial for as long as the transaction stays open."""
    collector = _collector()
    asked = 0
    while plan := collector._plan_batch_timestamps(METADATA, (OPEN,), ()):
        asked += 1
        collector._merge_batch_timestamps(plan, _failed("NOT_LEADER_OR_FOLLOWER"))
        assert asked <= FETCH_ATTEMPTS
    assert asked == FETCH_ATTEMPTS


def test_a_start_batch_read_once_is_not_asked_for_again() -> None:
    collector = _collector()
    plan = collector._plan_batch_timestamps(METADATA, (OPEN,), ())
    merged = collector._merge_batch_timestamps(plan, Collected((BatchTimestamp("t", 0, 120, 500),)))
    assert merged.rows == (BatchTimestamp("t", 0, 120, 500),)
    assert collector._plan_batch_timestamps(METADATA, (OPEN,), ()) == {}
