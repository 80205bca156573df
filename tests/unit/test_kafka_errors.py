"""Errors of the Kafka layer: Kafka's names, whether a retry may help, the one error path."""

from __future__ import annotations

import time

import pytest

from exporter.kafka.errors import (
    DeadlineExceeded,
    KafkaRequestError,
    KafkaUnavailable,
    error_name,
    error_name_for_code,
    is_retriable,
)
from exporter.kafka.results import Collected, Gather, guarded, timeout_ms
from exporter.model import CollectionError


@pytest.mark.parametrize(
    "error",
    [
        "CONCURRENT_TRANSACTIONS",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "NOT_COORDINATOR",
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_LEADER_OR_FOLLOWER",
        "REQUEST_TIMED_OUT",
        "NETWORK_EXCEPTION",
        "BROKER_NOT_AVAILABLE",
        "DEADLINE_EXCEEDED",
    ],
)
def test_transient_errors_are_retriable(error: str) -> None:
    assert is_retriable(error)


@pytest.mark.parametrize(
    "error",
    [
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "TOPIC_AUTHORIZATION_FAILED",
        "TRANSACTIONAL_ID_NOT_FOUND",
        "INVALID_PRODUCER_EPOCH",
        "PRODUCER_FENCED",
        "SASL_AUTHENTICATION_FAILED",
        "SSL_HANDSHAKE_FAILED",
        "UNSUPPORTED_VERSION",
        "SomethingNobodyKnows",
    ],
)
def test_permanent_and_unknown_errors_are_not_retriable(error: str) -> None:
    assert not is_retriable(error)


def test_request_errors_say_whether_they_are_retriable() -> None:
    busy = KafkaRequestError("InitProducerId", "CONCURRENT_TRANSACTIONS", broker_id=2)
    denied = KafkaRequestError("InitProducerId", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
    assert busy.retriable and not denied.retriable
    assert str(busy) == "InitProducerId failed on broker 2: CONCURRENT_TRANSACTIONS"
    assert KafkaUnavailable("gone").retriable
    assert not KafkaUnavailable("login", error="SASL_AUTHENTICATION_FAILED").retriable


def test_error_codes_get_kafkas_current_names() -> None:
    assert error_name_for_code(6) == "NOT_LEADER_OR_FOLLOWER"  # kafka-python: NOT_LEADER_FOR_PARTITION
    assert error_name_for_code(51) == "CONCURRENT_TRANSACTIONS"
    assert error_name(KafkaRequestError("Fetch", "OFFSET_OUT_OF_RANGE")) == "OFFSET_OUT_OF_RANGE"


def test_deadline_exceeded_is_a_retriable_request_error() -> None:
    error = DeadlineExceeded("ListOffsets", broker_id=1)
    assert isinstance(error, KafkaRequestError)
    assert (error.api, error.error, error.retriable) == ("ListOffsets", "DEADLINE_EXCEEDED", True)


# -- the one error path ----------------------------------------------------------------------


def test_gather_keeps_rows_next_to_the_errors_of_what_failed() -> None:
    gather: Gather[str] = Gather("DescribeProducers")
    gather.add("row-1")
    assert gather.ok(0, broker_id=1, topic="t", partition=0)
    assert not gather.ok(6, broker_id=1, topic="t", partition=1, message="moved")
    gather.fail(TimeoutError("x" * 500), broker_id=2)

    result = gather.result()

    assert result.rows == ("row-1",)
    assert result.errors[0] == CollectionError(
        "DescribeProducers", "NOT_LEADER_OR_FOLLOWER", broker_id=1, topic="t", partition=1, message="moved"
    )
    assert (result.errors[1].error, result.errors[1].broker_id) == ("TimeoutError", 2)
    assert len(result.errors[1].message) == 200  # bounded


def test_a_call_that_fails_as_a_whole_becomes_one_error() -> None:
    def broken() -> Collected[int]:
        raise KafkaUnavailable("the admin client is closed")

    result = guarded("ListTransactions", broken)

    assert result.rows == ()
    assert [(e.api, e.error) for e in result.errors] == [("ListTransactions", "BROKER_NOT_AVAILABLE")]


# -- deadlines -------------------------------------------------------------------------------


def test_request_timeouts_are_shortened_to_the_time_left() -> None:
    assert timeout_ms(10_000, None, "Metadata") == 10_000
    assert timeout_ms(10_000, time.monotonic() + 60, "Metadata") == 10_000
    assert 1_000 <= timeout_ms(10_000, time.monotonic() + 2, "Metadata") <= 2_000


def test_a_request_with_no_time_left_is_not_sent() -> None:
    with pytest.raises(DeadlineExceeded) as raised:
        timeout_ms(10_000, time.monotonic() - 1, "DescribeProducers", broker_id=3)
    assert (raised.value.api, raised.value.broker_id) == ("DescribeProducers", 3)
