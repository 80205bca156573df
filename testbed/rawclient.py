"""A blocking raw-protocol client on kafka-python's network layer, for requests that no
regular client sends (a Produce without AddPartitionsToTxn, on purpose)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import kafka.errors as kafka_errors
from kafka.net.compat import KafkaNetClient
from kafka.protocol.admin import DescribeTransactionsRequest
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest
from kafka.protocol.producer import InitProducerIdRequest

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_MS = 30_000


@dataclass(frozen=True, slots=True)
class CoordinatorTransaction:
    """DescribeTransactions of one transactional id, as its coordinator sees it."""

    coordinator_id: int
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    partitions: tuple[tuple[str, int], ...]


class RawClient:
    """Send one request to one broker and wait for its response."""

    def __init__(self, bootstrap_servers: str, *, client_id: str = "kte-testbed") -> None:
        self._client = KafkaNetClient(
            bootstrap_servers=bootstrap_servers.split(","),
            client_id=client_id,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
        )
        self._client.check_version(timeout_ms=REQUEST_TIMEOUT_MS)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def send(self, node_id: int, request: Any, *, timeout_ms: int = REQUEST_TIMEOUT_MS) -> Any:
        """Send ``request`` to broker ``node_id``; return the decoded response."""
        return self._client.send_and_receive(node_id, request, timeout_ms=timeout_ms)

    def any_node(self) -> int:
        nodes = sorted(b.node_id for b in self._client.cluster.brokers())
        if not nodes:
            raise kafka_errors.NoBrokersAvailable()
        return int(nodes[0])

    def find_transaction_coordinator(self, transactional_id: str) -> int:
        """FindCoordinator(TRANSACTION); retries while the coordinator is loading."""
        request = FindCoordinatorRequest(
            key=transactional_id, key_type=CoordinatorType.TRANSACTION.value, max_version=3
        )
        for _ in range(60):
            response = self.send(self.any_node(), request)
            error = kafka_errors.for_code(response.error_code)
            if error is kafka_errors.NoError:
                node_id: int = response.node_id
                return node_id
            if not error.retriable:
                raise error(response.error_message)
            log.debug("FindCoordinator %s: %s, retrying", transactional_id, error.__name__)
            self._client.poll(timeout_ms=500)
        raise kafka_errors.CoordinatorNotAvailableError(transactional_id)

    def _retry_on_coordinator(self, transactional_id: str, request: Any) -> tuple[int, Any]:
        """Send ``request`` to the id's coordinator, retrying retriable top-level errors."""
        for _ in range(60):
            coordinator = self.find_transaction_coordinator(transactional_id)
            response = self.send(coordinator, request)
            error = kafka_errors.for_code(_error_code(response))
            if error is kafka_errors.NoError:
                return coordinator, response
            if not error.retriable:
                raise error(f"{type(request).__name__} for {transactional_id}")
            log.debug("%s %s: %s, retrying", type(request).__name__, transactional_id,
                      error.__name__)  # fmt: skip
            self._client.poll(timeout_ms=500)
        raise kafka_errors.KafkaTimeoutError(f"{type(request).__name__} for {transactional_id}")

    def init_producer_id(
        self, transactional_id: str, *, transaction_timeout_ms: int = 60_000
    ) -> tuple[int, int, int]:
        """InitProducerId for a transactional id: ``(coordinator, producer id, epoch)``."""
        request = InitProducerIdRequest(
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            producer_id=-1,
            producer_epoch=-1,
            max_version=4,
        )
        coordinator, response = self._retry_on_coordinator(transactional_id, request)
        return coordinator, int(response.producer_id), int(response.producer_epoch)

    def describe_transaction(self, transactional_id: str) -> CoordinatorTransaction:
        """DescribeTransactions for one id, sent to its coordinator."""
        request = DescribeTransactionsRequest(transactional_ids=[transactional_id])
        coordinator, response = self._retry_on_coordinator(transactional_id, request)
        state = response.transaction_states[0]
        return CoordinatorTransaction(
            coordinator_id=coordinator,
            transactional_id=state.transactional_id,
            state=state.transaction_state,
            producer_id=state.producer_id,
            producer_epoch=state.producer_epoch,
            timeout_ms=state.transaction_timeout_ms,
            start_time_ms=state.transaction_start_time_ms,
            partitions=tuple(
                (topic.topic, p) for topic in state.topics for p in topic.partitions
            ),
        )


def _error_code(response: Any) -> int:
    """Top-level error of a response; DescribeTransactions carries it per id."""
    if hasattr(response, "transaction_states"):
        return int(response.transaction_states[0].error_code)
    return int(response.error_code)
